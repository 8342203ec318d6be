"""ArmControl without ROS or a bus: a scripted driver, a manual clock; faults, holds, reconnection pacing, health."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from brace_common.testing import ManualClock
from robot_bridge.piper import arm_control as ac
from robot_bridge.piper.arm_control import ArmControl
from robot_bridge.piper.piper_arm_config import PiperArmConfig
from robot_bridge.piper.piper_driver import CtrlMode, DriverError, Feedback

HEALTHY = Feedback(joints_rad=(0.0,) * 6, gripper_m=0.0, joint_effort_nm=(0.0,) * 6, gripper_effort_nm=0.0,
                   end_pose=(0.2, 0.0, 0.2, 0.0, 0.0, 0.0), arm_status=0, ctrl_mode=int(CtrlMode.CAN), move_mode=1,
                   err_code=0, motor_faults=(), motors_enabled=(True,) * 6, received=True, can_ok=True,
                   feedback_age_s=0.0, joints_age_s=0.0, alive_s=10.0, joint_frames=1)
SILENT = replace(HEALTHY, can_ok=False, alive_s=0.0, feedback_age_s=math.inf)


class ScriptedDriver:
    """Reports `feedback`; records what the arm was sent."""

    def __init__(self, config) -> None:
        self.config = config
        self.feedback = HEALTHY
        self.sent: list[tuple] = []
        self.reconnect_times: list[float] = []
        self.clock: ManualClock | None = None
        self.connected = False

    def connect(self) -> None:
        self.connected = True

    def disconnect(self) -> None:
        self.connected = False

    def read(self) -> Feedback:
        return self.feedback

    def reconnect(self) -> None:
        self.reconnect_times.append(self.clock.now)
        raise DriverError("the bus did not open")

    def enable(self, attempts: int, interval_s: float) -> int:
        return 1

    def select_mode(self, mode) -> None:
        self.sent.append(("mode", mode))

    def wait_ctrl_mode(self, mode, timeout_s: float) -> bool:
        return self.feedback.ctrl_mode == mode

    def hold(self):
        self.sent.append(("hold",))
        return list(self.feedback.joints_rad)

    def send_joints(self, joints) -> None:
        self.sent.append(("joints", tuple(joints)))

    def send_gripper(self, width) -> None:
        self.sent.append(("gripper", width))

    def emergency_stop(self) -> None:
        self.sent.append(("stop",))

    def health(self):
        from brace_common.counters import Health
        return Health({"driver_reconnects": len(self.reconnect_times)})


class Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def _log(self, text: str, **_) -> None:
        self.lines.append(text)

    info = warning = error = _log


@pytest.fixture
def arm(monkeypatch):
    clock = ManualClock(100.0)
    monkeypatch.setattr(ac.time, "monotonic", clock)
    control = ArmControl(Log(), driver_factory=ScriptedDriver)
    cfg = PiperArmConfig(can_interface="virtual", command_timeout_s=0.5, reconnect_initial_s=0.5, reconnect_max_s=2.0,
                         silence_recovery_s=0.5)
    control.connect(cfg, cfg.limits())
    control.driver.clock = clock
    assert control.activate() == 1
    return control, control.driver, clock


def holds(driver) -> int:
    return sum(1 for s in driver.sent if s == ("hold",))


def test_a_command_passes_the_gate_feeds_the_watchdog_and_its_lapse_holds_once(arm):
    control, driver, clock = arm
    control.joints([], [0.1, 0.0, 0.0, 0.0, 0.0, 0.0])
    assert ("joints", (0.1, 0.0, 0.0, 0.0, 0.0, 0.0)) in driver.sent and control.counts["commands.joint_cmd"] == 1
    assert control.commanding(clock.now)
    before = holds(driver)
    clock.now += 0.6
    control.supervise()
    control.supervise()
    assert control.counts["holds.watchdog"] == 1 and holds(driver) == before + 1


def test_a_refused_command_warns_in_one_report_only(arm):
    control, driver, _ = arm
    control.joints([], [1.0, 0.0, 0.0, 0.0, 0.0, 0.0])  # more than one step
    assert control.rejections.counts["joint_cmd.joint_step"] == 1
    health = control.health()
    assert health.warnings == ("1 commands refused",) and health.values["rejected.joint_cmd.joint_step"] == 1
    assert control.health().warnings == ()


def test_a_fault_holds_once_refuses_commands_and_clears(arm):
    control, driver, _ = arm
    driver.feedback = replace(HEALTHY, arm_status=0x07)  # collision
    before = holds(driver)
    control.supervise()
    control.supervise()
    assert control.gate.faults == ("collision",) and control.counts["holds.fault"] == 1 and holds(driver) == before + 1
    control.gripper(0.02)
    assert control.rejections.counts["gripper_cmd.fault"] == 1
    assert control.health().errors == ("fault: collision",)
    driver.feedback = HEALTHY
    control.supervise()
    assert not control.gate.faults and control.counts["recoveries"] == 1


def test_silence_reconnects_with_doubling_waits_and_clears_only_after_the_recovery_time(arm):
    control, driver, clock = arm
    start, sent = clock.now, len(driver.sent)
    driver.feedback = SILENT
    while clock.now < start + 9.0:
        control.supervise()
        clock.now += 0.25  # exact in binary: the waits compare exactly
    waits = [b - a for a, b in zip(driver.reconnect_times, driver.reconnect_times[1:], strict=False)]
    assert driver.reconnect_times[0] - start == 0.5 and waits[:2] == [1.0, 2.0]  # the first after initial_s
    assert len(waits) >= 3 and set(waits[1:]) == {2.0}  # capped at reconnect_max_s
    assert control.counts["reconnect_failures"] == control.counts["reconnects"] == len(driver.reconnect_times)
    health = control.health()
    assert health.values["reconnect_attempt"] == control.backoff.attempts and health.values["reconnect_delay_s"] == 2.0
    assert control.counts["faults_raised"] == 1 and len(driver.sent) == sent  # nothing sent to a silent arm
    driver.feedback = replace(HEALTHY, alive_s=0.1)  # back, but not for long enough
    control.supervise()
    assert control.gate.faults == (ac.CAN_SILENT,)
    driver.feedback = HEALTHY
    control.supervise()
    assert not control.gate.faults and control.backoff.attempts == 0 and control.health().values["reconnect_attempt"] == 0


def test_stop_refuses_everything_until_resume_and_release_forgets_the_connection(arm):
    control, driver, _ = arm
    assert control.stop() == (True, "emergency stop sent (the arm stops, damped); commands are refused until ~/resume")
    control.joints([], [0.0] * 6)
    assert control.rejections.counts["joint_cmd.stopped"] == 1
    assert control.enable() == (False, "emergency stop: call ~/resume")
    assert "emergency stop (call ~/resume)" in control.health().errors
    control.release()
    assert control.driver is None and not driver.connected and control.stop() == (False, "not connected")
    control.supervise()  # a tick after release does nothing
    control.exit()
