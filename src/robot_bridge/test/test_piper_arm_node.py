"""piper_arm node over real DDS, the real piper_sdk and the CAN twin (virtual bus in-process; udp_multicast to the executable)."""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import can
import pytest
from ament_index_python.packages import get_package_share_directory
from brace_msgs.msg import AgentState, EndEffectorDelta
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from geometry_msgs.msg import PoseStamped
from piper_sdk import C_PiperInterface_V2
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64
from std_srvs.srv import Trigger

from brace_common import qos
from brace_common.testing import call_service, installed_executable, terminate, wait_for
from robot_bridge.piper import piper_frames as pf
from robot_bridge.piper.piper_arm_node import PiperArmNode
from robot_bridge.piper.piper_twin import PiperTwin, TwinConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared piper_sdk_session helper
from piper_sdk_session import close_sdk, unique_port  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:The 'bustype' argument:DeprecationWarning")

CONFIG = Path(get_package_share_directory("brace_bringup")) / "params" / "piper_arm.yaml"
TWIN_CONFIG = Path(__file__).resolve().parents[1] / "config" / "piper_twin.yaml"
SUCCESS = TransitionCallbackReturn.SUCCESS
FAILURE = TransitionCallbackReturn.FAILURE


class Operator(Node):
    """Sends commands and calls the services; collects joint_states, end_pose, agent_states and diagnostics."""

    def __init__(self) -> None:
        super().__init__("operator")
        self.joint_cmd = self.create_publisher(JointState, "joint_cmd", 10)
        self.ee_cmd = self.create_publisher(EndEffectorDelta, "ee_delta_cmd", 10)
        self.gripper_cmd = self.create_publisher(Float64, "gripper_cmd", 10)
        self.joint_states: list[JointState] = []
        self.poses: list[PoseStamped] = []
        self.agent_states: list[AgentState] = []
        self.diagnostics: list[DiagnosticStatus] = []
        self.create_subscription(JointState, "joint_states", self.joint_states.append, qos.STATE)
        self.create_subscription(PoseStamped, "end_pose", self.poses.append, qos.STATE)
        self.create_subscription(AgentState, "agent_states", self.agent_states.append, qos.STATE)
        self.create_subscription(DiagnosticArray, "/diagnostics", lambda m: self.diagnostics.extend(m.status),
                                 qos.DIAGNOSTICS)
        self.clients_ = {name: self.create_client(Trigger, f"/piper_arm/{name}") for name in ("enable", "stop",
                                                                                                "resume")}
        self.sent = 0
        self.streamed: list[float] | None = None
        self.create_timer(0.05, self._stream)

    def _stream(self) -> None:
        if self.streamed is not None:
            self.joints(self.streamed)

    def stream(self, positions) -> None:
        """Send joint command `positions` every 50 ms from now on (None stops)."""
        self.streamed = None if positions is None else list(positions)

    def call(self, service: str) -> Trigger.Response:
        return call_service(self.clients_[service], Trigger.Request(), f"~/{service}", answer_s=30.0)

    def joints(self, positions, names=None) -> None:
        msg = JointState(name=list(names) if names is not None else [f"joint{i + 1}" for i in range(len(positions))],
                         position=[float(p) for p in positions])
        self.joint_cmd.publish(msg)
        self.sent += 1

    def delta(self, translation=(0.0, 0.0, 0.0), rotation=(0.0, 0.0, 0.0), gripper=math.nan) -> None:
        msg = EndEffectorDelta(gripper=float(gripper))
        msg.translation.x, msg.translation.y, msg.translation.z = translation
        msg.rotation.x, msg.rotation.y, msg.rotation.z = rotation
        self.ee_cmd.publish(msg)

    def status(self) -> DiagnosticStatus | None:
        mine = [s for s in self.diagnostics if s.name.startswith("piper_arm")]
        return mine[-1] if mine else None

    def values(self) -> dict[str, str]:
        status = self.status()
        return {kv.key: kv.value for kv in status.values} if status else {}

    def level(self) -> int | None:
        status = self.status()
        return None if status is None else level_of(status)

    def mine_since(self, index: int) -> list[DiagnosticStatus]:
        """The node's statuses received after the first `index` statuses."""
        return [s for s in self.diagnostics[index:] if s.name.startswith("piper_arm")]


def level_of(status: DiagnosticStatus) -> int:
    return int.from_bytes(status.level, "little") if isinstance(status.level, bytes) else int(status.level)


def values_of(status: DiagnosticStatus) -> dict[str, str]:
    return {kv.key: kv.value for kv in status.values}


def close(a, b, tol) -> bool:
    return all(abs(x - y) <= tol for x, y in zip(a, b, strict=True))


@pytest.fixture
def rig(ros):
    """A twin on a fresh virtual channel, the arm node and an operator; `rig.up(**params)` configures and activates."""
    port = unique_port("arm")
    twin = PiperTwin(port, "virtual", TwinConfig())
    twin.start()
    rig = Rig(ros, twin, port)
    yield rig
    rig.close()


class Rig:
    def __init__(self, ros, twin: PiperTwin, port: str) -> None:
        self.ros, self.twin, self.port = ros, twin, port
        self.node: PiperArmNode | None = None
        self.op: Operator | None = None

    def make(self, **params) -> PiperArmNode:
        # silence_timeout_s: a busy test machine can pause the SDK's reader thread for a few hundred ms
        params = {"can_port": self.port, "can_interface": "virtual", "diagnostics_period_s": 0.1,
                  "feedback_period_s": 0.02, "silence_timeout_s": 1.0,
                  "enable_interval_s": 0.02, "enable_attempts": 100, "feedback_timeout_s": 10.0, **params}
        self.node = PiperArmNode(parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
        self.ros.add(self.node)
        self.op = self.ros.add(Operator())
        return self.node

    def up(self, **params) -> PiperArmNode:
        node = self.make(**params)
        assert node.trigger_configure() == SUCCESS, node.last_error
        assert node.trigger_activate() == SUCCESS, node.last_error
        wait_for(lambda: self.op.joint_cmd.get_subscription_count() > 0 and self.op.ee_cmd.get_subscription_count() > 0
                 and self.op.gripper_cmd.get_subscription_count() > 0 and len(self.op.joint_states) > 0
                 and self.op.status() is not None, 15.0, "discovery")
        # a busy machine can delay the twin's first frames past the silence timeout: a can_silent fault that clears
        # by itself; a command sent during it is refused, so the tests begin once nothing refuses commands
        wait_for(lambda: not node.gate.faults, 15.0, "an arm without faults")
        return node

    def rejected(self, key: str) -> int:
        return self.node.rejections.counts.get(key, 0)

    def close(self) -> None:
        if self.node is not None and self.node.driver is not None:
            self.node.release()
        sdk = C_PiperInterface_V2._instances.get(self.port)  # the SDK's one instance for this CAN name
        if sdk is not None:
            close_sdk(sdk, self.port)  # and its monitor threads, which DisconnectPort leaves running
        self.twin.stop()


def level_is(rig: Rig, level: int):
    return lambda: rig.op.level() == level


# ---------------------------------------------------------------------------------------------- lifecycle and feedback


def stamp(msg) -> float:
    return msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9


def test_activate_enables_the_arm_and_joint_states_arrive(rig):
    node = rig.up(feedback_period_s=0.005)
    assert rig.twin.state().enabled and node.state_label == "active"
    wait_for(lambda: len(rig.op.joint_states) >= 150, 30.0, "joint_states")
    msgs = rig.op.joint_states[-120:]
    # How often it publishes is a benchmark's question (tests never assert on time): here, in order and fresh.
    stamps = [stamp(m) for m in msgs]
    assert all(b >= a for a, b in zip(stamps, stamps[1:], strict=False))
    last = msgs[-1]
    assert last.name == ["joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper"]
    assert close(last.position[:6], rig.twin.state().joints_rad, 1e-4)
    wait_for(lambda: rig.op.poses and rig.op.agent_states, 15.0, "end_pose and agent_states")
    pose = rig.op.poses[-1]
    assert pose.header.frame_id == "base_link"
    assert close([pose.pose.position.x, pose.pose.position.y, pose.pose.position.z],
                 rig.twin.state().end_pose[:3], 1e-4)
    state = rig.op.agent_states[-1]
    assert state.agent_id == "arm_0" and state.step >= 1 and math.isnan(state.tracking_error) and not state.has_goal
    assert state.position.z == pytest.approx(pose.pose.position.z, abs=1e-4)
    wait_for(level_is(rig, 0), 15.0, "diagnostics OK")
    values = rig.op.values()
    assert values["arm_status"] == "normal" and values["enabled"] == "True" and values["can_ok"] == "True"


def test_invalid_parameters_fail_configure_naming_the_parameter(rig):
    for params, name in [({"speed_percent": 150}, "speed_percent"),
                         ({"joint_lower_rad": [-3.0, 0.0, -2.967, -1.745, -1.22, -2.09]}, "joint_lower_rad"),
                         ({"can_interface": "carrier_pigeon"}, "can_interface"),
                         ({"command_timeout_s": -1.0}, "command_timeout_s"),
                         ({"speed_pct": 50}, "speed_pct")]:
        node = rig.make(**params)
        assert node.trigger_configure() == FAILURE
        assert f"'{name}'" in node.last_error, node.last_error
        assert node.driver is None
    wait_for(lambda: rig.op.status() is not None and "speed_pct" in rig.op.status().message, 15.0,
             "the failure on /diagnostics")
    assert rig.op.level() == 2


def test_configure_fails_when_the_bus_does_not_open(rig):
    port = unique_port("nocan")  # no such socketcan interface
    node = rig.make(can_interface="socketcan", can_port=port)
    assert node.trigger_configure() == FAILURE
    assert f"cannot open CAN port '{port}'" in node.last_error and node.driver is None
    close_sdk(C_PiperInterface_V2._instances[port], port)


def test_enable_refused_fails_activate_after_the_bounded_retry(rig):
    rig.twin.refuse_enable(True)
    node = rig.make(enable_attempts=4)
    assert node.trigger_configure() == SUCCESS
    assert node.trigger_activate() == FAILURE
    assert "motors not enabled after 4 attempts" in node.last_error
    assert rig.twin.counts()["refused_enable"] >= 4 and not rig.twin.state().enabled
    wait_for(lambda: rig.op.status() is not None and "not enabled after 4 attempts" in rig.op.status().message, 15.0,
             "diagnostics name the failure")
    assert rig.op.level() == 2
    rig.twin.refuse_enable(False)  # the operator fixed it: activation now succeeds
    # The arm reports its motors enabled in its low-speed frames (the twin: every 50 ms), so 4 attempts 20 ms apart
    # can end before the report on a busy machine: activate again, as a lifecycle manager would, until it does.
    wait_for(lambda: node.trigger_activate() == SUCCESS, 30.0, "activation once the arm accepts enable")
    assert rig.twin.state().enabled


def test_deactivate_holds_and_cleanup_disconnects_without_disabling(rig):
    node = rig.up(speed_percent=5, max_joint_step_rad=1.0, command_timeout_s=30.0)
    rig.op.joints([0.5, 0, 0, 0, 0, 0])
    wait_for(lambda: rig.twin.state().joints_rad[0] > 0.02, 15.0, "moving")
    assert node.trigger_deactivate() == SUCCESS
    wait_for(lambda: rig.twin.state().motion_reached, 15.0, "held")
    assert rig.twin.state().joints_rad[0] < 0.45 and rig.twin.state().enabled
    rig.op.joints([0.1, 0, 0, 0, 0, 0])
    wait_for(lambda: rig.rejected("joint_cmd.inactive") >= 1, 15.0, "commands refused while inactive")
    assert node.trigger_cleanup() == SUCCESS
    assert node.driver is None
    received = rig.twin.counts()["frames_received"]
    rig.op.joints([0.1, 0, 0, 0, 0, 0])
    wait_for(lambda: len(rig.op.diagnostics) > 3 and rig.op.values().get("state") == "unconfigured", 15.0,
             "diagnostics after cleanup")
    assert rig.twin.counts()["frames_received"] == received  # nothing reaches the arm any more
    assert rig.twin.state().enabled  # cleanup never disables the arm


# ---------------------------------------------------------------------------------------------- commands


def test_joint_command_moves_the_twin(rig):
    node = rig.up()
    target = [0.1, 0.15, -0.1, 0.05, -0.1, 0.12]
    rig.op.joints(target)
    wait_for(lambda: close(rig.twin.state().joints_rad, target, 1e-4), 15.0, "the twin at the target")
    rig.op.joints([0.03], names=["gripper"])
    wait_for(lambda: abs(rig.twin.state().gripper_m - 0.03) < 1e-4, 15.0, "gripper by name")
    # the others keep their measured angles: wait until the node has measured the target (on a busy machine its
    # feedback can trail the twin), so the expected end state is the one the test knows
    wait_for(lambda: rig.op.joint_states and close(list(rig.op.joint_states[-1].position[:6]), target, 1e-3), 15.0,
             "the arm measures the target")
    rig.op.joints([0.2, -0.15], names=["joint1", "joint3"])
    wait_for(lambda: close(rig.twin.state().joints_rad, [0.2, 0.15, -0.15, 0.05, -0.1, 0.12], 1e-4), 15.0,
             "partial command")
    rig.op.gripper_cmd.publish(Float64(data=0.05))
    wait_for(lambda: abs(rig.twin.state().gripper_m - 0.05) < 1e-4, 15.0, "gripper_cmd")
    assert node.counts["commands.joint_cmd"] >= 3 and node.rejections.total == 0


def test_ee_delta_moves_the_end_pose_and_has_goal_follows_the_commands(rig):
    rig.up(command_timeout_s=0.5)
    wait_for(lambda: rig.op.poses, 15.0, "end_pose")
    start = rig.op.poses[-1].pose.position
    goal_z = start.z + 0.04
    while rig.twin.state().end_pose[2] < goal_z - 0.002:
        rig.op.delta(translation=(0.0, 0.0, min(0.01, goal_z - rig.twin.state().end_pose[2])), gripper=0.02)
        wait_for(lambda: rig.op.agent_states and rig.op.agent_states[-1].has_goal, 15.0, "has_goal while commanding")
    wait_for(lambda: rig.op.poses[-1].pose.position.z > goal_z - 0.003, 15.0, "end_pose follows")
    pose = rig.op.poses[-1].pose.position
    assert abs(pose.x - start.x) < 0.003 and abs(pose.y - start.y) < 0.003
    assert abs(rig.twin.state().gripper_m - 0.02) < 1e-3 or rig.twin.state().gripper_target_m == pytest.approx(0.02)
    wait_for(lambda: not rig.op.agent_states[-1].has_goal, 15.0, "has_goal false once commands stop")


def test_bad_commands_are_refused_counted_and_the_twin_does_not_move(rig):
    node = rig.up()
    before = rig.twin.state().joints_rad
    bad = [
        (lambda: rig.op.joints([math.nan, 0, 0, 0, 0, 0]), "joint_cmd.non_finite"),
        (lambda: rig.op.joints([0, 0, 0.5, 0, 0, 0]), "joint_cmd.joint_limit"),      # joint3 must be <= 0
        (lambda: rig.op.joints([0.5, 0, 0, 0, 0, 0]), "joint_cmd.joint_step"),       # > 0.2 rad in one step
        (lambda: rig.op.joints([0.1], names=["elbow"]), "joint_cmd.unknown_joint"),
        (lambda: rig.op.gripper_cmd.publish(Float64(data=0.2)), "gripper_cmd.gripper_range"),
        (lambda: rig.op.gripper_cmd.publish(Float64(data=math.inf)), "gripper_cmd.non_finite"),
        (lambda: rig.op.delta(translation=(math.nan, 0.0, 0.0)), "ee_delta_cmd.non_finite"),
        (lambda: rig.op.delta(translation=(0.0, 0.0, 0.2)), "ee_delta_cmd.translation_step"),
        (lambda: rig.op.delta(rotation=(0.0, 0.0, 1.0)), "ee_delta_cmd.rotation_step"),
        (lambda: rig.op.delta(translation=(0.0, 0.0, -0.03), gripper=-1.0), "ee_delta_cmd.gripper_range"),
    ]
    for send, key in bad:
        wait_for(lambda send=send, key=key: send() or rig.rejected(key) >= 1, 15.0, key)
    wait_for(lambda: all(rig.op.values().get(f"rejected.{key}", "0") != "0" for _, key in bad), 15.0,
             "counts on /diagnostics")
    assert node.counts["commands.joint_cmd"] == node.counts["commands.ee_delta_cmd"] == 0
    assert node.counts["commands.gripper_cmd"] == 0
    assert close(rig.twin.state().joints_rad, before, 1e-6) and rig.twin.state().gripper_m == 0.0
    assert rig.twin.counts()["refused_limit"] == 0  # nothing out of limits ever reached the arm


def test_a_delta_out_of_the_workspace_box_is_refused(rig):
    node = rig.up(workspace_max_m=[0.6, 0.6, 0.22])  # the start pose is at z = 0.213 m
    rig.op.delta(translation=(0.0, 0.0, 0.005))
    wait_for(lambda: node.counts["commands.ee_delta_cmd"] == 1, 15.0, "inside the box: accepted")
    wait_for(lambda: rig.op.delta(translation=(0.0, 0.0, 0.01)) or rig.rejected("ee_delta_cmd.workspace") >= 1, 15.0,
             "beyond z 0.22: refused")
    assert rig.twin.state().end_pose[2] < 0.22


def test_watchdog_holds_when_commands_stop(rig):
    node = rig.up(speed_percent=5, max_joint_step_rad=1.0, command_timeout_s=0.3)
    rig.op.joints([0.5, 0, 0, 0, 0, 0])  # 5 s away at 5 % speed: the watchdog holds long before
    wait_for(lambda: node.counts["holds.watchdog"] == 1, 15.0, "watchdog hold")
    wait_for(lambda: rig.twin.state().motion_reached, 15.0, "the arm stopped")
    assert rig.twin.state().joints_rad[0] < 0.45 and rig.twin.state().enabled
    assert node.counts["holds.watchdog"] == 1  # once per lapse, not every period


# ---------------------------------------------------------------------------------------------- stop / resume


def test_stop_holds_and_refuses_commands_until_resume(rig):
    node = rig.up(speed_percent=5, max_joint_step_rad=1.0, command_timeout_s=30.0)
    rig.op.joints([0.5, 0, 0, 0, 0, 0])
    wait_for(lambda: rig.twin.state().joints_rad[0] > 0.02, 15.0, "moving")
    response = rig.op.call("stop")
    assert response.success, response.message
    wait_for(lambda: rig.twin.state().emergency_stop and rig.twin.state().motion_reached, 15.0, "stopped")
    stopped_at = rig.twin.state().joints_rad
    wait_for(lambda: rig.op.joints([stopped_at[0] + 0.1, 0, 0, 0, 0, 0]) or
             rig.rejected("joint_cmd.stopped") >= 2, 15.0, "commands refused while stopped")
    wait_for(lambda: rig.op.level() == 2 and "emergency stop" in rig.op.status().message, 15.0, "diagnostics ERROR")
    assert close(rig.twin.state().joints_rad, stopped_at, 1e-6) and rig.twin.state().enabled
    assert not rig.op.call("enable").success  # ~/enable does not undo a stop
    response = rig.op.call("resume")
    assert response.success, response.message
    assert not rig.twin.state().emergency_stop and not node.gate.faults  # commands pass once ~/resume answers
    target = [stopped_at[0] + 0.05, 0, 0, 0, 0, 0]
    rig.op.joints(target)
    wait_for(lambda: close(rig.twin.state().joints_rad, target, 1e-4), 15.0, "moves again after resume")
    wait_for(level_is(rig, 0), 15.0, "diagnostics OK again")
    assert not rig.op.call("resume").success  # nothing to resume
    assert node.counts["stops"] == node.counts["resumes"] == 1


# ---------------------------------------------------------------------------------------------- faults


def test_can_silence_mid_motion_refuses_commands_reconnects_and_recovers_without_disabling(rig):
    node = rig.up(speed_percent=10, max_joint_step_rad=1.0, command_timeout_s=30.0, reconnect_initial_s=0.2,
                  reconnect_max_s=0.5)
    rig.op.joints([0.4, 0, 0, 0, 0, 0])
    wait_for(lambda: rig.twin.state().joints_rad[0] > 0.02, 15.0, "moving")
    rig.twin.set_silent(True)
    wait_for(lambda: rig.op.level() == 2 and "can_silent" in rig.op.status().message, 15.0, "diagnostics ERROR")
    wait_for(lambda: rig.op.joints([0.1, 0, 0, 0, 0, 0]) or rig.rejected("joint_cmd.fault") >= 2, 15.0,
             "commands refused during the silence")
    wait_for(lambda: node.counts["reconnects"] >= 2, 30.0, "reconnection attempts")
    assert rig.twin.state().enabled and rig.twin.state().motor_enabled[:6] == (True,) * 6
    rig.twin.set_silent(False)
    wait_for(level_is(rig, 0), 30.0, "diagnostics OK once frames return")
    assert node.counts["recoveries"] >= 1 and rig.twin.state().enabled
    here = rig.twin.state().joints_rad
    target = [here[0] + 0.05, 0, 0, 0, 0, 0]
    rig.op.joints(target)
    wait_for(lambda: close(rig.twin.state().joints_rad, target, 1e-4), 15.0, "commands reach the arm again")


def test_collision_is_an_error_that_holds_and_refuses_commands(rig):
    node = rig.up(speed_percent=5, max_joint_step_rad=1.0, command_timeout_s=30.0)
    rig.op.joints([0.5, 0, 0, 0, 0, 0])
    wait_for(lambda: rig.twin.state().joints_rad[0] > 0.02, 15.0, "moving")
    rig.twin.set_collision(True)
    wait_for(lambda: rig.op.level() == 2 and "collision" in rig.op.status().message, 15.0, "diagnostics ERROR")
    assert rig.op.values()["arm_status"] == "collision"
    wait_for(lambda: node.counts["holds.fault"] == 1, 15.0, "held on the fault")
    wait_for(lambda: rig.op.joints([0.1, 0, 0, 0, 0, 0]) or rig.rejected("joint_cmd.fault") >= 1, 15.0,
             "commands refused")
    rig.twin.set_collision(False)
    wait_for(level_is(rig, 0), 15.0, "OK once the arm reports normal")
    wait_for(lambda: rig.twin.state().motion_reached, 15.0, "holding, not resuming the old motion")
    assert rig.twin.state().joints_rad[0] < 0.45 and rig.twin.state().enabled


def test_over_limit_joint_is_named_on_diagnostics(rig):
    rig.up()
    rig.twin.set_over_limit(4)
    wait_for(lambda: rig.op.level() == 2 and "joint4_angle_limit" in rig.op.status().message, 15.0, "ERROR")
    assert rig.op.values()["errors"] == "joint4_angle_limit"
    rig.twin.set_over_limit(None)
    wait_for(level_is(rig, 0), 15.0, "cleared")


def pendant(rig: Rig, frame) -> None:
    """Another device on the bus (a teach pendant, a second program) sends one frame to the arm."""
    bus = can.Bus(interface="virtual", channel=rig.port, receive_own_messages=False)
    try:
        can_id, data = frame
        bus.send(can.Message(arbitration_id=can_id, data=data, is_extended_id=False))
    finally:
        bus.shutdown()


def test_another_device_taking_the_arm_is_a_fault_until_enable(rig):
    node = rig.up()
    pendant(rig, pf.MotionCtrl2(ctrl_mode=pf.CTRL_MODE_STANDBY, move_mode=pf.MOVE_P).pack())
    wait_for(lambda: rig.op.level() == 2 and "ctrl_mode_standby" in rig.op.status().message, 15.0, "ERROR")
    wait_for(lambda: rig.op.joints([0.05, 0, 0, 0, 0, 0]) or rig.rejected("joint_cmd.fault") >= 1, 15.0, "refused")
    pendant(rig, pf.MotorEnable(motor_num=7, enable_flag=pf.ENABLE_FLAG_DISABLE).pack())  # motors off (twin: no drop)
    wait_for(lambda: "motors_disabled" in node.gate.faults, 15.0, "disabled motors are a fault")
    response = rig.op.call("enable")
    assert response.success, response.message
    assert rig.twin.state().enabled and rig.twin.state().ctrl_mode == pf.CTRL_MODE_CAN and not node.gate.faults
    wait_for(level_is(rig, 0), 15.0, "OK after ~/enable")
    target = [0.05, 0, 0, 0, 0, 0]
    rig.op.joints(target)
    wait_for(lambda: close(rig.twin.state().joints_rad, target, 1e-4), 15.0, "commands pass again")


class EchoPeer:
    """A CAN adapter that echoes: every frame on the channel goes back onto it, so the node hears its own frames."""

    def __init__(self, port: str) -> None:
        self.bus = can.Bus(interface="virtual", channel=port, receive_own_messages=False)
        self.echoed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self.bus.recv(0.05)
            if msg is not None:
                self.bus.send(can.Message(arbitration_id=msg.arbitration_id, data=msg.data, is_extended_id=False))
                self.echoed += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)
        self.bus.shutdown()


def assert_faulted_without_flapping(rig: Rig, since: int, before: dict[str, int]) -> None:
    """Since diagnostics index `since`: ERROR with can_silent every time, never OK; since the counts `before`: no
    command accepted, the fault raised once and never cleared; the reconnection attempts grew with capped waits."""
    node = rig.node
    assert node.counts["recoveries"] == before["recoveries"], node.counts
    assert node.counts["faults_raised"] == before["faults_raised"] + 1, node.counts
    assert node.counts["commands.joint_cmd"] == before["commands.joint_cmd"]
    statuses = rig.op.mine_since(since)
    assert statuses and all(level_of(st) == 2 and "can_silent" in st.message for st in statuses), \
        [(level_of(st), st.message) for st in statuses]
    values = [values_of(st) for st in statuses]
    assert all(v["can_ok"] == "False" and v["faults"] == "can_silent" for v in values), \
        [(v.get("can_ok"), v["faults"]) for v in values]
    attempts = [int(v["reconnect_attempt"]) for v in values]
    assert attempts == sorted(attempts) and attempts[-1] >= 3, attempts  # grows, never back to 1
    assert all(float(v["reconnect_delay_s"]) <= 0.4 for v in values)


def test_an_echoing_bus_with_the_arm_gone_never_reads_alive(rig):
    node = rig.up(command_timeout_s=30.0, reconnect_initial_s=0.1, reconnect_max_s=0.4, silence_timeout_s=0.5)
    rig.op.stream([0.0] * 6)
    # OK seen by the operator too: an ERROR still in flight from before the arm was up is not the fault to come
    wait_for(lambda: node.counts["commands.joint_cmd"] >= 3 and not node.gate.faults and rig.op.level() == 0, 15.0,
             "commands accepted")
    refused = rig.rejected("joint_cmd.fault")  # commands streamed before the arm was up were refused too
    before = dict(node.counts)
    rig.twin.stop()  # the arm is gone, and the adapter echoes every frame the node sends
    echo = EchoPeer(rig.port)
    try:
        wait_for(lambda: rig.op.level() == 2 and "can_silent" in rig.op.status().message, 15.0,
                 "ERROR while commands (and their echoes) keep coming")
        since = len(rig.op.diagnostics)
        wait_for(lambda: rig.rejected("joint_cmd.fault") >= refused + 3, 15.0, "commands refused")
        before["commands.joint_cmd"] = node.counts["commands.joint_cmd"]
        wait_for(lambda: node.backoff.attempts >= 3 and echo.echoed > 20, 30.0, "reconnections under echoes")
        rig.op.stream(None)  # no commands: the reconnections' start-up queries are all that echoes now
        attempts = node.backoff.attempts
        wait_for(lambda: node.backoff.attempts >= attempts + 2, 30.0, "more reconnections")
        count = len(rig.op.diagnostics)
        wait_for(lambda: len(rig.op.mine_since(count)) >= 2, 15.0, "fresh diagnostics")
        assert_faulted_without_flapping(rig, since, before)
        assert node.driver.frames.counts["own"] > 0 and not node.driver.read().can_ok
        assert int(rig.op.values()["frames.own"]) > 0
    finally:
        echo.close()


def test_a_command_flood_runs_the_newest_and_counts_every_command_it_skips(rig):
    node = rig.up(command_timeout_s=30.0)
    rig.op.joints([0.0] * 6)  # the publisher's first command starts its sequence count
    wait_for(lambda: node.commands.counts["taken.joint_cmd"] == 1, 15.0, "the first command taken")
    for k in range(3000):  # as fast as this thread can publish: far faster than commands run
        rig.op.joints([0.001 * (k % 100), 0.0, 0.0, 0.0, 0.0, 0.0])
    final = [0.15, 0.0, 0.0, 0.0, 0.0, 0.0]
    wait_for(lambda: rig.op.joints(final) or close(rig.twin.state().joints_rad, final, 1e-4), 30.0,
             "the newest command runs")
    counts = node.commands.counts

    def refused() -> int:
        return sum(v for k, v in node.rejections.counts.items() if k.startswith("joint_cmd."))

    wait_for(lambda: counts["taken.joint_cmd"] + counts["lost.joint_cmd.sequence_gap"] == rig.op.sent, 30.0,
             f"every command sent taken or counted lost ({counts}, sent {rig.op.sent})")
    wait_for(lambda: node.counts["commands.joint_cmd"] + refused() + counts["dropped.joint_cmd.superseded"]
             == counts["taken.joint_cmd"], 30.0, "every command taken run, refused or counted superseded")
    assert refused() == 0
    keys = ("taken.joint_cmd", "dropped.joint_cmd.superseded", "lost.joint_cmd.sequence_gap")
    wait_for(lambda: all(rig.op.values().get(k) == str(counts[k]) for k in keys), 15.0, "the counts on /diagnostics")


# ---------------------------------------------------------------------------------------------- the executable


def free_udp_port() -> int:
    """A UDP port nothing on this host is bound to right now."""
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as sock:
        sock.bind(("::", 0))
        return sock.getsockname()[1]


def run_arm(env: dict, tmp_path: Path, *params: str, files: tuple[Path, ...] = ()) -> tuple[subprocess.Popen, Path]:
    """`ros2 run robot_bridge piper_arm` with the package's parameter file, then `files`, then `params` (name:=value)."""
    log_path = tmp_path / "piper_arm.log"
    args = [a for f in files for a in ("--params-file", str(f))] + [a for p in params for a in ("-p", p)]
    proc = subprocess.Popen([str(installed_executable("robot_bridge", "piper_arm")), "--ros-args", "--params-file",
                             str(CONFIG), *args], env=env, stdout=log_path.open("w"), stderr=subprocess.STDOUT)
    return proc, log_path


def test_the_executable_drives_a_twin_in_another_process_and_leaves_it_enabled(ros, tmp_path, monkeypatch):
    port = free_udp_port()  # python-can's udp_multicast: one UDP port per twin/arm pair, in both processes
    monkeypatch.setenv("CAN_CONFIG", json.dumps({"port": port}))
    group = f"ff01::74:{(os.getpid() + 1) % 0xFFFF:x}"  # interface-local: never leaves the host
    env = {**os.environ, "CAN_CONFIG": json.dumps({"port": port}), "ROS_DOMAIN_ID": str(ros.domain_id)}
    with PiperTwin(group, "udp_multicast", TwinConfig()) as twin:
        proc, log_path = run_arm(env, tmp_path, "autostart:=true", "can_interface:=udp_multicast",
                                 f"can_port:={group}", "feedback_period_s:=0.02")
        try:
            op = ros.add(Operator())
            wait_for(lambda: twin.state().enabled and op.joint_states, 60.0,
                     f"enabled and publishing ({log_path.read_text()[-1500:]})")
            wait_for(lambda: op.joint_cmd.get_subscription_count() > 0, 15.0, "joint_cmd discovered")
            target = [0.1, 0.1, -0.1, 0.0, 0.0, 0.0]
            wait_for(lambda: op.joints(target) or close(twin.state().joints_rad, target, 1e-4), 30.0,
                     "a joint command across processes moves the twin")
        finally:
            code = terminate(proc)
        assert code == 0, log_path.read_text()[-2000:]
        assert twin.state().enabled  # exiting holds and disconnects; it never disables the arm


class TwinProcess:
    """The piper_twin executable on a udp_multicast group: started, killed (SIGKILL), started again."""

    def __init__(self, env: dict, log_path: Path, group: str) -> None:
        self.env, self.log_path, self.group = env, log_path, group
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [str(installed_executable("robot_bridge", "piper_twin")), "--ros-args", "--params-file", str(TWIN_CONFIG),
             "-p", f"can_port:={self.group}"], env=self.env, stdout=self.log_path.open("a"), stderr=subprocess.STDOUT)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None:
            terminate(self.proc)


def test_a_killed_twin_process_faults_the_arm_without_flapping_and_it_recovers_when_the_twin_returns(
        ros, tmp_path, monkeypatch):
    port = free_udp_port()  # udp_multicast loops every frame the node sends back to its own reader
    monkeypatch.setenv("CAN_CONFIG", json.dumps({"port": port}))
    group = f"ff01::74:{(os.getpid() + 2) % 0xFFFF:x}"
    twin = TwinProcess({**os.environ, "ROS_DOMAIN_ID": str(ros.domain_id)}, tmp_path / "piper_twin.log", group)
    twin.start()
    rig = Rig(ros, twin, group)
    try:
        node = rig.up(can_interface="udp_multicast", feedback_timeout_s=60.0, command_timeout_s=30.0,
                      reconnect_initial_s=0.1, reconnect_max_s=0.4, silence_timeout_s=0.5)
        rig.op.stream([0.0] * 6)
        # OK seen by the operator too: an ERROR still in flight from before the arm was up is not the fault to come
        wait_for(lambda: node.counts["commands.joint_cmd"] >= 3 and not node.gate.faults and rig.op.level() == 0, 15.0,
                 "commands accepted")
        refused = rig.rejected("joint_cmd.fault")  # commands streamed before the arm was up were refused too
        before = dict(node.counts)
        twin.kill()
        wait_for(lambda: rig.op.level() == 2 and "can_silent" in rig.op.status().message, 15.0,
                 "ERROR while commands keep coming")
        noticed = time.time()
        since = len(rig.op.diagnostics)
        wait_for(lambda: rig.rejected("joint_cmd.fault") >= refused + 3, 15.0, "commands refused")
        before["commands.joint_cmd"] = node.counts["commands.joint_cmd"]
        wait_for(lambda: node.backoff.attempts >= 4, 30.0, "reconnections while the twin is dead")
        count = len(rig.op.diagnostics)
        wait_for(lambda: len(rig.op.mine_since(count)) >= 2, 15.0, "fresh diagnostics")
        assert_faulted_without_flapping(rig, since, before)
        # no joint state passed a dead arm's last frame off as fresh
        assert max(stamp(m) for m in rig.op.joint_states) < noticed
        twin.start()  # the arm is back, powered up again: motors disabled, not in CAN control
        # the arm's status frame can come before its first low-speed report (the motors' enable bits, every 50 ms):
        # wait for the report, not only for the first fault after the silence
        wait_for(lambda: "can_silent" not in node.gate.faults and "motors_disabled" in node.gate.faults, 60.0,
                 f"the twin's feedback back ({twin.log_path.read_text()[-1500:]})")
        assert "motors_disabled" in node.gate.faults and node.counts["recoveries"] == before["recoveries"]
        response = rig.op.call("enable")
        assert response.success, response.message
        wait_for(level_is(rig, 0), 15.0, "OK again")
        accepted = node.counts["commands.joint_cmd"]
        wait_for(lambda: node.counts["commands.joint_cmd"] > accepted + 2, 15.0, "commands accepted again")
        assert 0 < int(rig.op.values()["frames.own"])
    finally:
        rig.close()


def test_the_executable_stays_up_with_an_error_when_its_can_port_is_missing(ros, tmp_path):
    """A missing CAN adapter is a hardware fault, not an invalid configuration: the node exited 2 at autostart; it
    now stays up, unconfigured, with diagnostics ERROR naming the port, for a lifecycle manager to retry."""
    env = {**os.environ, "ROS_DOMAIN_ID": str(ros.domain_id)}
    proc, log_path = run_arm(env, tmp_path, "autostart:=true", "can_interface:=socketcan", "can_port:=brace_nocan0")
    try:
        op = ros.add(Operator())
        wait_for(lambda: proc.poll() is not None or (op.status() is not None and "brace_nocan0" in op.status().message),
                 60.0, "diagnostics naming the missing port")
        assert proc.poll() is None, log_path.read_text()[-2000:]
        assert op.level() == 2 and op.values().get("state") == "unconfigured"
    finally:
        code = terminate(proc)
    assert code == 0, log_path.read_text()[-2000:]
    assert "stays up" in log_path.read_text()

def test_the_executable_exits_2_naming_an_invalid_parameter(tmp_path):
    proc, log_path = run_arm(dict(os.environ), tmp_path, "autostart:=true", "speed_percent:=500")
    assert proc.wait(timeout=60) == 2
    assert "'speed_percent'" in log_path.read_text()


@pytest.mark.parametrize("line, parameter", [("max_joint_step_rad: '0.05'", "max_joint_step_rad"),
                                             ("workspace_max_m: '[0.3, 0.3, 0.3]'", "workspace_max_m"),
                                             ("max_translation_step_m: 0.01abc", "max_translation_step_m"),
                                             ("speed_percent: 9223372036854775808", "speed_percent")])
def test_a_site_file_that_changes_a_safety_limits_type_stops_the_arm_naming_it_and_the_file(tmp_path, line,
                                                                                              parameter):
    """rcl drops a later value of another type and keeps the earlier, looser one (0.2 rad, the 0.6 / 0.7 m box):
    the arm refuses to start instead, naming the parameter and the site file."""
    site = tmp_path / "site_limits.yaml"
    site.write_text(f"/**/piper_arm:\n  ros__parameters:\n    {line}\n")
    proc, log_path = run_arm(dict(os.environ), tmp_path, "autostart:=true", files=(site,))
    try:
        code = proc.wait(timeout=60)
    finally:
        terminate(proc)
    log = log_path.read_text()
    assert code == 2, log[-2000:]
    assert f"'{parameter}'" in log and str(site) in log, log[-2000:]
