"""The piper_twin node as its own process, reached across processes by the real piper_sdk over udp_multicast.

The twin runs as `ros2 run robot_bridge piper_twin` would start it (with config/piper_twin.yaml) on an
interface-local IPv6 multicast group; this test process connects piper_sdk to the same group, reads the arm's
feedback and drives it, injects faults with set_parameters and sees them in the SDK and on /diagnostics.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rcl_interfaces.srv import SetParameters
from rclpy.node import Node
from rclpy.parameter import Parameter

from brace_common import names, qos
from brace_common.domain_leases import fresh_domain
from brace_common.testing import call_service, installed_executable, terminate, wait_for

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared piper_sdk_session helper
from piper_sdk_session import sdk_session  # noqa: E402

from robot_bridge.piper import piper_frames as pf  # noqa: E402
from robot_bridge.piper import piper_units as units  # noqa: E402

CONFIG = Path(__file__).resolve().parents[1] / "config" / "piper_twin.yaml"
START = [0.1, 0.5, -0.6, 0.2, -0.3, 0.4]


def free_udp_port() -> int:
    """A UDP port nothing on this host is bound to right now."""
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as sock:
        sock.bind(("::", 0))
        return sock.getsockname()[1]


@pytest.fixture
def can_env(monkeypatch):
    """An interface-local group and a UDP port of this test's own; python-can in this process uses the port."""
    port = free_udp_port()
    monkeypatch.setenv("CAN_CONFIG", json.dumps({"port": port}))
    return f"ff01::74:{os.getpid() % 0xFFFF:x}", {**os.environ, "CAN_CONFIG": json.dumps({"port": port})}


def start_twin(env: dict, tmp_path: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    """The installed piper_twin executable with the package's parameter file and `args` (--ros-args)."""
    log_path = tmp_path / "piper_twin.log"
    proc = subprocess.Popen(
        [str(installed_executable("robot_bridge", "piper_twin")), "--ros-args", "--params-file", str(CONFIG), *args],
        env=env, stdout=log_path.open("w"), stderr=subprocess.STDOUT)
    return proc, log_path


def sdk_joints(piper) -> list[int]:
    """The SDK's joint feedback (0.001 deg)."""
    js = piper.GetArmJointMsgs().joint_state
    return [js.joint_1, js.joint_2, js.joint_3, js.joint_4, js.joint_5, js.joint_6]


def set_parameter(node: Node, client, name: str, value) -> bool:
    """Set one parameter of the twin through its set_parameters service; whether it was accepted."""
    request = SetParameters.Request(parameters=[Parameter(name, value=value).to_parameter_msg()])
    return call_service(client, request, f"set_parameters {name}", answer_s=15.0, resends=2).results[0].successful


def test_sdk_reads_and_drives_the_twin_across_processes(ros, can_env, tmp_path):
    group, env = can_env
    env["ROS_DOMAIN_ID"] = str(ros.domain_id)
    proc, log_path = start_twin(env, tmp_path, "-p", f"can_port:={group}", "-p",
                                f"initial_joints:={START}", "-p", "initially_enabled:=false")
    node = ros.add(Node("twin_test"))
    statuses: list[DiagnosticStatus] = []
    node.create_subscription(DiagnosticArray, names.DIAGNOSTICS,
                             lambda msg: statuses.extend(s for s in msg.status if s.name.startswith("piper_twin")),
                             qos.DIAGNOSTICS)
    client = node.create_client(SetParameters, "/piper_twin/set_parameters")
    try:
        with sdk_session(group, "udp_multicast") as piper:
            expected = units.joints_to_sdk(START)
            wait_for(lambda: sdk_joints(piper) == expected, timeout=30.0,
                     what=f"joint feedback across processes ({log_path.read_text()[-1500:]})")
            wait_for(piper.isOk, what="isOk() true")
            # commands cross too: enable, CAN control in MOVE J, a joint target
            piper.EnableArm(7)
            wait_for(lambda: all(piper.GetArmEnableStatus()), what="motors enabled")
            goal = [0.3, 0.8, -0.9, 0.0, 0.2, 0.1]
            piper.MotionCtrl_2(0x01, 0x01, 100, 0x00)
            piper.JointCtrl(*units.joints_to_sdk(goal))
            wait_for(lambda: all(abs(a - b) <= 2 for a, b in zip(sdk_joints(piper), units.joints_to_sdk(goal),
                                                                  strict=True)), what="joints at the goal")
            # faults at run time through parameters
            assert client.wait_for_service(timeout_sec=15.0)
            assert set_parameter(node, client, "fault_collision", True)
            wait_for(lambda: piper.GetArmStatus().arm_status.arm_status == pf.ARM_COLLISION, what="collision")
            wait_for(lambda: any(s.level == DiagnosticStatus.ERROR and "fault_collision" in s.message
                                 for s in statuses), what="collision on /diagnostics")
            assert set_parameter(node, client, "fault_over_limit_joint", 2)
            wait_for(lambda: piper.GetArmStatus().arm_status.err_status.joint_2_angle_limit, what="over-limit bit")
            assert not set_parameter(node, client, "fault_over_limit_joint", 9)
            assert not set_parameter(node, client, "fault_silent", "yes")
            assert set_parameter(node, client, "fault_collision", False)
            assert set_parameter(node, client, "fault_over_limit_joint", -1)
            wait_for(lambda: piper.GetArmStatus().arm_status.err_code == 0
                     and piper.GetArmStatus().arm_status.arm_status == pf.ARM_NORMAL, what="faults cleared")
            assert set_parameter(node, client, "fault_silent", True)
            wait_for(lambda: not piper.isOk(), what="isOk() false while the twin is silent")
            assert set_parameter(node, client, "fault_silent", False)
            wait_for(piper.isOk, what="isOk() true again")
            count = len(statuses)
            wait_for(lambda: len(statuses) > count + 1, what="fresh diagnostics")
            assert statuses[-1].level == DiagnosticStatus.OK, statuses[-1].message
            values = {kv.key: kv.value for kv in statuses[-1].values}
            assert values["state"] == "active" and values["enabled"] == "True" and values["faults"] == "none"
    finally:
        code = terminate(proc)
    output = log_path.read_text()
    assert code == 0, output[-3000:]
    assert "Traceback" not in output, output[-3000:]


@pytest.mark.parametrize(("args", "named"), [
    (["-p", "can_port:=239.74.163.2"], "can_port"),
    (["-p", "can_port:=ff01::74:2", "-p", "feedback_period_s:=0.0"], "feedback_period_s"),
    (["-p", "can_port:=ff01::74:2", "-p", "initial_joints:=[0.0, -1.0, 0.0, 0.0, 0.0, 0.0]"], "initial_joints"),
    (["-p", "can_port:=ff01::74:2", "-p", "fault_over_limit_joint:=7"], "fault_over_limit_joint"),
    (["-p", "can_port:=ff01::74:2", "-p", "rate_hzz:=10.0"], "rate_hzz"),
])
def test_invalid_parameters_stop_the_node_naming_them(can_env, tmp_path, args, named):
    _, env = can_env
    env["ROS_DOMAIN_ID"] = str(fresh_domain())
    proc, log_path = start_twin(env, tmp_path, *args)
    try:
        code = proc.wait(timeout=60)
    finally:
        terminate(proc)
    output = log_path.read_text()
    assert code == 2, output[-2000:]
    assert f"parameter '{named}'" in output, output[-2000:]
    assert "Traceback" not in output
