"""The PiPER twin against the real piper_sdk on python-can's virtual bus (one process), and its model on its own."""

import math
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest

from brace_common.config import ConfigError
from brace_common.testing import wait_for

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared piper_sdk_session helper
from piper_sdk_session import sdk_session, unique_port  # noqa: E402

from robot_bridge.piper import piper_frames as pf  # noqa: E402
from robot_bridge.piper import piper_units as units  # noqa: E402
from robot_bridge.piper.piper_kinematics import PiperKinematics  # noqa: E402
from robot_bridge.piper.piper_twin import PiperArmModel, PiperTwin, TwinConfig  # noqa: E402

START = [0.1, 0.5, -0.6, 0.2, -0.3, 0.4]


def sdk_joints(piper) -> list[int]:
    """The SDK's joint feedback (0.001 deg)."""
    js = piper.GetArmJointMsgs().joint_state
    return [js.joint_1, js.joint_2, js.joint_3, js.joint_4, js.joint_5, js.joint_6]


def sdk_pose(piper) -> list[int]:
    """The SDK's end-pose feedback (0.001 mm, 0.001 deg)."""
    p = piper.GetArmEndPoseMsgs().end_pose
    return [p.X_axis, p.Y_axis, p.Z_axis, p.RX_axis, p.RY_axis, p.RZ_axis]


def near(values, expected, tol) -> bool:
    """Every value within `tol` of its expected value."""
    return all(abs(a - b) <= tol for a, b in zip(values, expected, strict=True))


def cycles_later(twin: PiperTwin, n: int = 20) -> None:
    """Wait until the twin has run `n` more feedback cycles."""
    start = twin.counts()["cycles"]
    wait_for(lambda: twin.counts()["cycles"] >= start + n, what=f"{n} twin cycles")


@contextmanager
def connected(grasp=None, **config):
    """A running twin (START joints, `config` overrides) and the SDK connected to it on a fresh virtual channel."""
    port = unique_port("twin")
    twin = PiperTwin(port, "virtual", TwinConfig(initial_joints=list(START), **config), grasp=grasp)
    with twin, sdk_session(port) as piper:
        wait_for(lambda: sdk_joints(piper) != [0] * 6, what="joint feedback in the SDK")
        yield twin, piper
    assert not twin.running


@pytest.fixture
def arm():
    """The twin with its default configuration and the SDK connected to it."""
    with connected() as pair:
        yield pair


def enable_and_select(piper, twin, move_mode=pf.MOVE_J, speed=100):
    """Enable every motor and select CAN control, `move_mode`, `speed` %."""
    piper.EnableArm(7)
    wait_for(lambda: all(piper.GetArmEnableStatus()), what="all motors enabled in the SDK")
    piper.MotionCtrl_2(0x01, move_mode, speed, 0x00)
    wait_for(lambda: piper.GetArmStatus().arm_status.ctrl_mode == pf.CTRL_MODE_CAN
             and piper.GetArmStatus().arm_status.mode_feed == move_mode, what="CAN control mode in the SDK")


def test_sdk_reads_every_feedback(arm):
    twin, piper = arm
    expected = [units.joint_to_sdk(v) for v in START]
    wait_for(lambda: near(sdk_joints(piper), expected, 1), what="start joints")
    pose = PiperKinematics().forward_pose(START)
    wait_for(lambda: near(sdk_pose(piper), PiperArmModel._sdk_pose(pose), 2), what="end pose of the start joints")
    status = piper.GetArmStatus().arm_status
    assert (status.ctrl_mode, status.arm_status, status.err_code) == (pf.CTRL_MODE_STANDBY, pf.ARM_NORMAL, 0)
    wait_for(lambda: piper.GetArmLowSpdInfoMsgs().motor_6.vol == 240, what="low-speed driver info")
    assert piper.GetArmEnableStatus() == [False] * 6
    high = piper.GetArmHighSpdInfoMsgs()
    wait_for(lambda: high.motor_3.pos == round(START[2] * 1000), what="high-speed motor 3 position")
    assert piper.GetArmGripperMsgs().gripper_state.grippers_angle == 0
    wait_for(piper.isOk, what="isOk() true")
    # the SDK's start-up queries are answered
    wait_for(lambda: piper.GetPiperFirmwareVersion() == "S-V1.8-1", what="firmware text")
    # (the SDK's GetAllMotorAngleLimitMaxSpd() entries all alias its last decoded answer; ask one motor instead)
    piper.SearchMotorMaxAngleSpdAccLimit(2, 0x01)

    def joint_2_limits():
        answer = piper.GetCurrentMotorAngleLimitMaxVel().current_motor_angle_limit_max_vel
        return answer.motor_num, answer.max_angle_limit, answer.min_angle_limit, answer.max_joint_spd

    wait_for(lambda: joint_2_limits() == (2, 1799, 0, 2000), what="joint 2 limits answer")  # 3.14 rad = 179.9 deg
    piper.SearchMotorMaxAngleSpdAccLimit(4, 0x02)
    wait_for(lambda: piper.GetCurrentMotorMaxAccLimit().current_motor_max_acc_limit.joint_motor_num == 4,
             what="joint 4 max acceleration answer")
    assert piper.GetCurrentMotorMaxAccLimit().current_motor_max_acc_limit.max_joint_acc == 5000
    # feedback keeps coming: the status time stamp moves on
    stamp = piper.GetArmStatus().time_stamp
    wait_for(lambda: piper.GetArmStatus().time_stamp > stamp, what="fresh status frames")
    assert twin.counts()["malformed"] == 0


def test_enable_refused_then_accepted_and_per_motor_disable(arm):
    twin, piper = arm
    twin.refuse_enable(True)
    piper.EnableArm(7)
    wait_for(lambda: twin.counts()["refused_enable"] >= 1, what="the refused enable")
    cycles_later(twin, 25)
    assert piper.GetArmEnableStatus() == [False] * 6
    assert not twin.state().enabled
    twin.refuse_enable(False)
    piper.EnableArm(7)
    wait_for(lambda: all(piper.GetArmEnableStatus()), what="enabled motors")
    assert twin.state().enabled and twin.state().motor_enabled == (True,) * 7
    wait_for(lambda: piper.GetArmGripperMsgs().gripper_state.foc_status.driver_enable_status, what="gripper enabled")
    piper.DisableArm(3)
    wait_for(lambda: piper.GetArmEnableStatus() == [True, True, False, True, True, True], what="motor 3 disabled")
    assert not twin.state().enabled


def test_joint_control_moves_the_joints_and_disabled_motors_stay(arm):
    twin, piper = arm
    enable_and_select(piper, twin)
    goal = [0.4, 1.0, -1.0, -0.3, 0.5, -0.5]
    piper.JointCtrl(*units.joints_to_sdk(goal))
    wait_for(lambda: near(sdk_joints(piper), units.joints_to_sdk(goal), 2), what="joints at the goal")
    assert twin.state().joints_rad == pytest.approx(goal, abs=1e-4)
    wait_for(lambda: piper.GetArmStatus().arm_status.motion_status == pf.MOTION_REACHED, what="motion reached")
    pose = PiperKinematics().forward_pose(goal)
    wait_for(lambda: near(sdk_pose(piper), PiperArmModel._sdk_pose(pose), 2), what="end pose follows")
    # joint 1 disabled: it holds while joint 2 moves
    piper.DisableArm(1)
    wait_for(lambda: not piper.GetArmEnableStatus()[0], what="motor 1 disabled")
    piper.JointCtrl(*units.joints_to_sdk([0.0, 0.6, -1.0, -0.3, 0.5, -0.5]))
    wait_for(lambda: abs(sdk_joints(piper)[1] - units.joint_to_sdk(0.6)) <= 2, what="joint 2 moved")
    assert sdk_joints(piper)[0] == units.joint_to_sdk(0.4)


def test_speed_percentage_limits_the_joint_speed(arm):
    twin, piper = arm
    enable_and_select(piper, twin, speed=10)
    piper.JointCtrl(*units.joints_to_sdk([1.5, *START[1:]]))
    wait_for(lambda: piper.GetArmHighSpdInfoMsgs().motor_1.motor_speed > 0, what="joint 1 moving")
    speeds = []
    for _ in range(20):
        cycles_later(twin, 1)
        speeds.append(piper.GetArmHighSpdInfoMsgs().motor_1.motor_speed)
    # 10 % of joint 1's 2.0 rad/s, in 0.001 rad/s (dt jitter allowed for)
    assert 0 < max(speeds) <= 205
    assert max(abs(v) for v in twin.state().joint_velocity) <= 0.2 * 1.01


def test_target_outside_the_joint_limits_is_refused(arm):
    twin, piper = arm
    enable_and_select(piper, twin)
    piper.JointCtrl(*units.joints_to_sdk([0.1, -0.2, -0.6, 0.2, -0.3, 0.4]))  # joint 2 below 0
    wait_for(lambda: piper.GetArmStatus().arm_status.arm_status == pf.ARM_TARGET_EXCEEDS_LIMIT, what="status 0x04")
    cycles_later(twin, 20)
    assert twin.state().joints_rad == pytest.approx(START, abs=1e-12)
    piper.JointCtrl(*units.joints_to_sdk([0.1, 0.6, -0.6, 0.2, -0.3, 0.4]))
    wait_for(lambda: piper.GetArmStatus().arm_status.arm_status == pf.ARM_NORMAL, what="status normal again")
    wait_for(lambda: abs(twin.state().joints_rad[1] - 0.6) < 1e-3, what="the valid target reached")


def test_end_pose_control_reaches_a_reachable_pose_and_refuses_an_unreachable_one(arm):
    twin, piper = arm
    enable_and_select(piper, twin, move_mode=pf.MOVE_P)
    goal_joints = [-0.3, 1.1, -0.9, 0.4, 0.6, 0.2]
    target = PiperArmModel._sdk_pose(PiperKinematics().forward_pose(goal_joints))
    piper.EndPoseCtrl(*target)
    wait_for(lambda: near(sdk_pose(piper)[:3], target[:3], 1000) and near(sdk_pose(piper)[3:], target[3:], 500),
             what="end pose within 1 mm / 0.5 deg of the target")
    assert piper.GetArmStatus().arm_status.arm_status == pf.ARM_NORMAL
    # Within 1 mm the joints may still be converging: the held pose is the one the arm settles at.
    wait_for(lambda: piper.GetArmStatus().arm_status.motion_status == pf.MOTION_REACHED, what="motion reached")
    held = twin.state().joints_rad
    piper.EndPoseCtrl(1_500_000, 0, 300_000, 0, 0, 0)  # 1.5 m away: out of reach
    wait_for(lambda: piper.GetArmStatus().arm_status.arm_status == pf.ARM_NO_SOLUTION, what="status 'no solution'")
    cycles_later(twin, 20)
    assert twin.state().joints_rad == pytest.approx(held, abs=1e-3)


def test_gripper_closes_on_the_object_and_the_effort_rises():
    with connected(grasp=lambda state: 0.03, gripper_speed=0.1) as (twin, piper):
        _grasp_object(twin, piper)


def _grasp_object(twin, piper):
    piper.GripperCtrl(70_000, 1000, 0x01, 0)
    wait_for(lambda: piper.GetArmGripperMsgs().gripper_state.grippers_angle == 70_000, what="gripper open")
    assert piper.GetArmGripperMsgs().gripper_state.foc_status.driver_enable_status
    piper.GripperCtrl(0, 2000, 0x01, 0)
    wait_for(lambda: piper.GetArmGripperMsgs().gripper_state.grippers_effort >= 1900, what="grip effort risen")
    state = piper.GetArmGripperMsgs().gripper_state
    assert state.grippers_angle == 30_000
    assert twin.state().gripper_blocked and twin.state().gripper_m == pytest.approx(0.03)
    piper.GripperCtrl(70_000, 2000, 0x01, 0)  # opening releases
    wait_for(lambda: piper.GetArmGripperMsgs().gripper_state.grippers_effort < 100, what="effort released")


def test_disabled_gripper_does_not_move(arm):
    twin, piper = arm
    piper.GripperCtrl(50_000, 1000, 0x00, 0)  # code 0x00 disables
    cycles_later(twin, 30)
    assert piper.GetArmGripperMsgs().gripper_state.grippers_angle == 0
    assert not piper.GetArmGripperMsgs().gripper_state.foc_status.driver_enable_status


def test_emergency_stop_holds_and_resume_releases(arm):
    twin, piper = arm
    enable_and_select(piper, twin, speed=5)
    piper.JointCtrl(*units.joints_to_sdk([2.0, *START[1:]]))
    wait_for(lambda: twin.state().joints_rad[0] > START[0] + 0.01, what="joint 1 moving")
    piper.EmergencyStop(0x01)
    wait_for(lambda: piper.GetArmStatus().arm_status.arm_status == pf.ARM_EMERGENCY_STOP, what="emergency stop")
    held = sdk_joints(piper)
    piper.JointCtrl(*units.joints_to_sdk([-1.0, *START[1:]]))  # ignored while stopped
    cycles_later(twin, 30)
    assert sdk_joints(piper) == held and twin.state().emergency_stop
    piper.ResetPiper()
    wait_for(lambda: piper.GetArmStatus().arm_status.arm_status == pf.ARM_NORMAL, what="resumed")
    cycles_later(twin, 10)
    assert sdk_joints(piper) == held  # resume holds; it does not pick up the old target
    piper.MotionCtrl_2(0x01, 0x01, 100, 0x00)
    piper.JointCtrl(*units.joints_to_sdk(START))
    wait_for(lambda: near(sdk_joints(piper), units.joints_to_sdk(START), 2), what="moves again after resume")


def test_silence_makes_the_sdk_not_ok_and_frames_return(arm):
    twin, piper = arm
    wait_for(piper.isOk, what="isOk() true")
    twin.set_silent(True)
    wait_for(lambda: not piper.isOk(), what="isOk() false during silence")
    assert twin.state().silent
    stamp = piper.GetArmJointMsgs().time_stamp
    twin.set_silent(False)
    wait_for(piper.isOk, what="isOk() true after silence")
    wait_for(lambda: piper.GetArmJointMsgs().time_stamp > stamp, what="joint frames again")


def test_collision_and_over_limit_show_in_the_sdk_status(arm):
    twin, piper = arm
    enable_and_select(piper, twin, speed=5)
    piper.JointCtrl(*units.joints_to_sdk([2.0, *START[1:]]))
    wait_for(lambda: twin.state().joints_rad[0] > START[0] + 0.01, what="joint 1 moving")
    twin.set_collision(True)
    wait_for(lambda: piper.GetArmStatus().arm_status.arm_status == pf.ARM_COLLISION, what="collision status")
    held = twin.state().joints_rad
    cycles_later(twin, 20)
    assert twin.state().joints_rad == held and twin.state().collision
    twin.set_over_limit(3)
    wait_for(lambda: piper.GetArmStatus().arm_status.err_status.joint_3_angle_limit, what="joint 3 over-limit bit")
    err = piper.GetArmStatus().arm_status.err_status
    assert not err.joint_1_angle_limit and not err.communication_status_joint_3
    assert twin.state().over_limit == (False, False, True, False, False, False)
    twin.set_over_limit(None)
    twin.set_collision(False)
    wait_for(lambda: piper.GetArmStatus().arm_status.err_code == 0
             and piper.GetArmStatus().arm_status.arm_status == pf.ARM_NORMAL, what="faults cleared")
    with pytest.raises(ValueError, match="1-6"):
        twin.set_over_limit(0)


def test_lifecycle_and_config_validation():
    port = unique_port("twin_life")
    before = threading.active_count()
    twin = PiperTwin(port, "virtual", TwinConfig(feedback_period_s=0.002))
    twin.start()
    assert twin.running
    wait_for(lambda: twin.counts()["frames_sent"] > 0, what="frames sent")
    twin.stop()
    assert not twin.running and threading.active_count() == before
    twin.stop()  # idempotent
    with pytest.raises(ConfigError, match="initial_joints"):
        TwinConfig(initial_joints=[0.0, -0.5, 0, 0, 0, 0]).validate()
    with pytest.raises(ConfigError, match="max_joint_speed"):
        TwinConfig(max_joint_speed=[1.0] * 5).validate()
    with pytest.raises(ConfigError, match="feedback_period_s"):
        PiperTwin(port, config=TwinConfig(feedback_period_s=0.0))
    with pytest.raises(ValueError, match="can_port"):
        PiperTwin("")


def test_model_frames_per_cycle_and_malformed_input():
    model = PiperArmModel(TwinConfig(low_speed_every=4))
    assert len(model.feedback(0)) == 1 + 3 + 3 + 1 + 6 + 6
    assert len(model.feedback(1)) == 14
    assert model.handle(pf.JOINT_CTRL_12, b"\x01") == [] and model.counts["malformed"] == 1
    assert model.handle(pf.ARM_STATUS, bytes(8)) == [] and model.counts["commands"] == 0
    replies = model.handle(*pf.MotorLimitQuery(2, pf.LIMIT_QUERY_ACC).pack())
    assert [pf.unpack_feedback(*f) for f in replies] == [pf.MotorAccFeedback(2, 5000)]
    # a joint target in standby is ignored; in CAN control and MOVE J it is taken
    target = [10_000, 20_000, -5_000, 0, 0, 0]
    for frame in pf.joint_ctrl_frames(target):
        model.handle(*frame)
    assert model.target is None and model.counts["ignored"] == 1
    model.handle(*pf.MotorEnable(pf.MOTOR_ALL, pf.ENABLE_FLAG_ENABLE).pack())
    model.handle(*pf.MotionCtrl2(pf.CTRL_MODE_CAN, pf.MOVE_J, 100).pack())
    for frame in pf.joint_ctrl_frames(target)[:2]:
        model.handle(*frame)
    assert model.target is None  # the target takes effect with its last frame (0x157)
    model.handle(*pf.joint_ctrl_frames(target)[2])
    for _ in range(100):
        model.advance(0.01)
    assert model.q[:3] == pytest.approx([math.radians(10), math.radians(20), math.radians(-5)])
    assert model.reached() and model.snapshot().enabled
    # a target with one joint outside its limits is refused whole
    for frame in pf.joint_ctrl_frames([0, -1000, 0, 0, 0, 0]):
        model.handle(*frame)
    assert model.arm_status() == pf.ARM_TARGET_EXCEEDS_LIMIT and model.target is None


def test_model_end_pose_target_after_a_hold_is_taken_again():
    model = PiperArmModel(TwinConfig(initial_joints=list(START), initially_enabled=True))
    model.handle(*pf.MotionCtrl2(pf.CTRL_MODE_CAN, pf.MOVE_P, 20).pack())
    goal = [-0.3, 1.1, -0.9, 0.4, 0.6, 0.2]
    frames = pf.end_pose_ctrl_frames(PiperArmModel._sdk_pose(PiperKinematics().forward_pose(goal)))
    for frame in frames:
        model.handle(*frame)
    model.advance(0.05)
    assert model.target is not None and not model.reached()
    model.handle(*pf.MotionCtrl1(pf.ESTOP_STOP).pack())
    model.handle(*pf.MotionCtrl1(pf.ESTOP_RESUME).pack())
    assert model.target is None  # resume holds
    for frame in frames:  # the same target again is a new command after the hold
        model.handle(*frame)
    for _ in range(400):
        model.advance(0.01)
    assert model.reached() and model.arm_status() == pf.ARM_NORMAL
    assert model.kinematics.forward_pose(model.q) == pytest.approx(PiperKinematics().forward_pose(goal), abs=2e-5)


def test_placing_the_arm_holds_it_there_and_refuses_a_place_outside_the_limits():
    model = PiperArmModel(TwinConfig(initial_joints=list(START), initially_enabled=True))
    model.handle(*pf.MotionCtrl2(pf.CTRL_MODE_CAN, pf.MOVE_J, 100).pack())
    for frame in pf.joint_ctrl_frames([10_000, 20_000, -5_000, 0, 0, 0]):
        model.handle(*frame)
    model.advance(0.01)
    assert model.target is not None
    home = [0.0, 1.5, -1.3, 0.0, 1.0, 0.0]
    model.place(home, 0.05)
    model.advance(0.5)   # the target it was moving to is gone: it holds where it was put
    assert list(model.q) == home and model.gripper == 0.05 and model.reached() and not model.qdot.any()
    with pytest.raises(ValueError, match="joint limits"):
        model.place([0.0, -1.0, 0.0, 0.0, 0.0, 0.0], 0.0)
    with pytest.raises(ValueError, match="gripper"):
        model.place(home, 0.5)
    assert list(model.q) == home
