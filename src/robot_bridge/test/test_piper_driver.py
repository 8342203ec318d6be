"""PiperDriver: the real piper_sdk against the CAN twin on python-can's virtual bus, in one process."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from brace_common.testing import ManualClock, wait_for
from robot_bridge.piper import piper_driver as pd
from robot_bridge.piper import piper_frames as pf
from robot_bridge.piper.piper_driver import DriverConfig, DriverError, PiperDriver, wait_feedback
from robot_bridge.piper.piper_twin import PiperTwin, TwinConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared piper_sdk_session helper
from piper_sdk_session import close_sdk, unique_port  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:The 'bustype' argument:DeprecationWarning")  # inside piper_sdk


def port_name() -> str:
    """A CAN channel no other test (or process) uses: the SDK keeps one instance per name."""
    return unique_port("drv")


@pytest.fixture
def rig():
    """A started twin and a connected driver on a fresh virtual channel; both stopped after the test."""
    port = port_name()
    twin = PiperTwin(port, "virtual", TwinConfig())
    twin.start()
    driver = PiperDriver(DriverConfig(port, "virtual", speed_percent=100))
    try:
        driver.connect()
        assert wait_feedback(driver, 10.0) is not None, "no feedback from the twin"
        yield twin, driver
    finally:
        driver.disconnect()
        close_sdk(driver.sdk, port)  # and the SDK's monitor threads, which DisconnectPort leaves running
        twin.stop()


def enabled_rig(rig):
    twin, driver = rig
    driver.enable(50, 0.02)
    driver.select_mode(pd.MoveMode.J)
    wait_for(lambda: twin.state().enabled and driver.read().enabled, 10.0, "enabled")
    return twin, driver


def close(a, b, tol) -> bool:
    return all(abs(x - y) <= tol for x, y in zip(a, b, strict=True))


# ---------------------------------------------------------------------------------------------- tables


def test_status_and_error_codes_by_name():
    assert pd.arm_status_name(0x00) == "normal" and pd.arm_status_severity(0x00) == pd.Severity.OK
    assert pd.arm_status_name(0x07) == "collision" and pd.arm_status_severity(0x07) == pd.Severity.ERROR
    assert pd.arm_status_name(0x01) == "emergency_stop"
    assert pd.arm_status_severity(0x02) == pd.Severity.WARN  # no solution: the arm refused a target
    assert pd.arm_status_name(0x42) == "unknown_0x42" and pd.arm_status_severity(0x42) == pd.Severity.ERROR
    assert set(pd.ARM_STATUS) == set(range(16))
    assert pd.error_names(0) == []
    assert pd.error_names((1 << 2) | (1 << 10)) == ["joint3_communication_error", "joint3_angle_limit"]
    assert pd.error_names(1 << 15) == ["error_bit_15"]
    assert pd.motor_fault_names(2, 1 << 6) == []  # the enable bit is no fault
    assert pd.motor_fault_names(2, (1 << 4) | (1 << 5)) == ["joint2_collision_protection", "joint2_driver_error"]


def test_only_the_arms_own_feedback_frames_prove_it_alive():
    clock = ManualClock(100.0)
    frames = pd.FrameMonitor(silence_s=0.25, clock=clock)
    assert frames.liveness() == pd.Liveness(math.inf, math.inf, 0.0, 0)
    for can_id in sorted(pd.HOST_COMMAND_IDS):  # the node's own frames coming back: an echo
        frames.observe(can_id)
    frames.observe(pf.JOINT_FB_12, is_rx=False)  # a frame the bus marks as sent by this host
    frames.observe(0x251)  # the arm's high-speed motor info: not a liveness frame
    assert frames.liveness().feedback_age_s == math.inf
    assert frames.counts == {"feedback": 0, "own": len(pd.HOST_COMMAND_IDS) + 1, "other": 1}
    assert pd.ARM_FEEDBACK_IDS.isdisjoint(pd.HOST_COMMAND_IDS)
    frames.observe(pf.ARM_STATUS)
    clock.now += 0.1
    frames.observe(pf.JOINT_FB_34)
    clock.now += 0.1
    live = frames.liveness()
    assert (live.feedback_age_s, live.joints_age_s, live.alive_s) == pytest.approx((0.1, 0.1, 0.2))
    assert live.joint_frames == 1
    clock.now += 0.3  # silent longer than the bound
    assert frames.liveness().alive_s == 0.0 and frames.liveness().feedback_age_s == pytest.approx(0.4)
    frames.observe(pf.GRIPPER_FB)  # one frame after a silence: alive again, but only just
    clock.now += 0.05
    live = frames.liveness()
    assert live.alive_s == pytest.approx(0.05) and live.joints_age_s == pytest.approx(0.45) and live.joint_frames == 1


def test_an_echoing_bus_does_not_keep_a_dead_arm_alive(rig):
    twin, driver = enabled_rig(rig)
    twin.stop()  # the arm is gone; the SDK's receive bus still hears every frame the driver sends

    def command_and_look() -> bool:
        driver.send_joints([0.0] * 6)
        return not driver.read().can_ok

    wait_for(command_and_look, 10.0, "silence noticed while the driver's own frames keep coming back")
    for _ in range(50):
        assert command_and_look()
    feedback = driver.read()
    assert feedback.alive_s == 0.0 and feedback.feedback_age_s > 0.25
    assert driver.frames.counts["own"] > 50  # the echoes did reach the reader


# ---------------------------------------------------------------------------------------------- connection


def test_connect_reads_the_twin_in_si_units(rig):
    twin, driver = rig
    feedback = driver.read()
    state = twin.state()
    assert feedback.can_ok and feedback.received
    assert close(feedback.joints_rad, state.joints_rad, 1e-5)
    assert close(feedback.end_pose[:3], state.end_pose[:3], 2e-6)  # 0.001 mm on the wire
    assert close(feedback.end_pose[3:], state.end_pose[3:], 2e-5)  # 0.001 degree on the wire
    assert feedback.arm_status_name == "normal" and feedback.faults == []
    assert not feedback.enabled  # the arm powers up disabled


def test_a_bus_that_does_not_open_is_a_driver_error():
    port = port_name()
    driver = PiperDriver(DriverConfig(port, "no_such_interface"))
    with pytest.raises(DriverError, match="cannot open CAN port"):
        driver.connect()
    assert not driver.connected
    close_sdk(driver.sdk, port)


def test_parameters_are_checked():
    with pytest.raises(ValueError):
        DriverConfig("x", "virtual", speed_percent=0)
    with pytest.raises(ValueError):
        DriverConfig("x", "virtual", gripper_effort_nm=6.0)


# ---------------------------------------------------------------------------------------------- enable


def test_enable_succeeds_within_the_bounded_retry(rig):
    twin, driver = rig
    attempt = driver.enable(50, 0.02)
    assert 1 <= attempt <= 50
    wait_for(lambda: driver.read().enabled, 10.0, "enabled feedback")
    assert twin.state().enabled


def test_enable_refused_fails_after_the_last_attempt_naming_the_motors(rig):
    twin, driver = rig
    twin.refuse_enable(True)
    with pytest.raises(DriverError, match=r"after 3 attempts.*joint1, joint2, joint3, joint4, joint5, joint6"):
        driver.enable(3, 0.02)
    assert twin.counts()["refused_enable"] >= 3 and not twin.state().enabled


# ---------------------------------------------------------------------------------------------- commands


def test_joint_command_moves_the_twin(rig):
    twin, driver = enabled_rig(rig)
    target = [0.1, 0.3, -0.3, 0.05, -0.1, 0.2]
    driver.send_joints(target)
    wait_for(lambda: close(twin.state().joints_rad, target, 1e-4), 10.0, "joints at the target")
    wait_for(lambda: close(driver.read().joints_rad, target, 1e-4), 10.0, "feedback at the target")
    assert twin.state().move_mode == pd.MoveMode.J


def test_end_pose_delta_moves_the_end_effector(rig):
    twin, driver = enabled_rig(rig)
    before = driver.read().end_pose
    target = driver.send_ee_delta([0.01, 0.0, 0.02], [0.0, 0.0, 0.0])
    assert target[:3] == pytest.approx([before[0] + 0.01, before[1], before[2] + 0.02])
    wait_for(lambda: close(twin.state().end_pose[:3], target[:3], 1e-3), 10.0, "end pose at the target")
    wait_for(lambda: close(driver.read().end_pose[:3], target[:3], 1e-3), 10.0, "end-pose feedback")
    assert twin.state().move_mode == pd.MoveMode.P


def test_gripper_command_opens_the_gripper(rig):
    twin, driver = enabled_rig(rig)
    driver.send_gripper(0.04)
    wait_for(lambda: abs(driver.read().gripper_m - 0.04) < 1e-5, 10.0, "gripper open")
    assert twin.state().gripper_m == pytest.approx(0.04, abs=1e-5)


def test_hold_stops_a_motion_where_the_arm_is(rig):
    twin, driver = enabled_rig(rig)
    driver.speed_percent = 5  # slow: the motion is still under way when the hold comes
    driver.send_joints([0.5, 0.0, 0.0, 0.0, 0.0, 0.0])
    wait_for(lambda: twin.state().joints_rad[0] > 0.02, 10.0, "motion started")
    held = driver.hold()
    assert held is not None and held[0] < 0.5
    wait_for(lambda: twin.state().motion_reached, 10.0, "motion stopped")
    stopped = twin.state().joints_rad[0]
    assert stopped < 0.45 and abs(stopped - held[0]) < 0.05


def test_emergency_stop_and_resume(rig):
    twin, driver = enabled_rig(rig)
    driver.emergency_stop()
    wait_for(lambda: driver.read().arm_status_name == "emergency_stop", 10.0, "stop reported")
    assert "emergency_stop" in driver.read().faults
    driver.send_joints([0.2, 0, 0, 0, 0, 0])  # ignored by a stopped arm
    driver.resume()
    wait_for(lambda: driver.read().faults == [], 10.0, "resumed")
    assert twin.state().joints_rad[0] == pytest.approx(0.0, abs=1e-6) and twin.state().enabled


def test_faults_by_name(rig):
    twin, driver = rig
    twin.set_collision(True)
    wait_for(lambda: "collision" in driver.read().faults, 10.0, "collision status")
    wait_for(lambda: "joint1_collision_protection" in driver.read().motor_faults, 10.0, "driver collision bits")
    twin.set_collision(False)
    twin.set_over_limit(3)
    wait_for(lambda: driver.read().faults == ["joint3_angle_limit"], 10.0, "over-limit bit")
    twin.set_over_limit(None)
    wait_for(lambda: driver.read().faults == [], 10.0, "cleared")


# ---------------------------------------------------------------------------------------------- CAN loss


def test_silence_then_reconnect_recovers_without_disabling(rig):
    twin, driver = enabled_rig(rig)
    twin.set_silent(True)
    wait_for(lambda: not driver.read().can_ok, 10.0, "silence noticed (no feedback frame from the arm)")
    driver.reconnect()
    assert driver.counts["reconnects"] == 1 and not driver.read().can_ok
    twin.set_silent(False)
    wait_for(lambda: driver.read().can_ok, 10.0, "frames again after the reconnection")
    assert twin.state().enabled and driver.read().enabled
    target = [0.05, 0.1, -0.1, 0.0, 0.0, 0.0]
    driver.send_joints(target)  # commands reach the arm over the reopened bus
    wait_for(lambda: close(twin.state().joints_rad, target, 1e-4), 10.0, "moves after the reconnection")


def test_disconnect_stops_reading_and_sending(rig):
    twin, driver = enabled_rig(rig)
    driver.disconnect()
    wait_for(lambda: not driver.read().can_ok, 10.0, "no frames once disconnected")
    received = twin.counts()["frames_received"]
    with pytest.raises(DriverError, match="not connected"):
        driver.send_joints([0.1, 0, 0, 0, 0, 0])
    with pytest.raises(DriverError, match="not connected"):
        driver.emergency_stop()
    assert twin.counts()["frames_received"] == received
    assert twin.state().enabled  # disconnecting leaves the arm as it was
