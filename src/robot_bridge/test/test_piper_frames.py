"""piper_frames: round trips, and agreement with piper_sdk's own decoder (feedback) and encoder (commands).

Feedback frames we pack are decoded by the SDK's protocol parser; command frames the SDK's interface sends on a
python-can virtual bus are captured and decoded by ours.
"""

import dataclasses
import itertools
import random
import struct

import can
import pytest
from piper_sdk import C_PiperInterface_V2
from piper_sdk.piper_msgs.msg_v2 import PiperMessage
from piper_sdk.protocol.protocol_v2 import C_PiperParserV2

from robot_bridge.piper import piper_frames as pf

_port = itertools.count()


def sdk_decode(frame: pf.Frame) -> PiperMessage:
    """The SDK parser's reading of one frame."""
    can_id, data = frame
    assert len(data) == 8
    msg = PiperMessage()
    assert C_PiperParserV2().DecodeMessage(can.Message(arbitration_id=can_id, data=data, is_extended_id=False), msg)
    return msg


def test_ids_match_the_sdk():
    from piper_sdk.piper_msgs.msg_v2 import CanIDPiper as ID

    assert (pf.MOTION_CTRL_1, pf.MOTION_CTRL_2, pf.GRIPPER_CTRL, pf.MOTOR_ENABLE) == (
        ID.ARM_MOTION_CTRL_1.value, ID.ARM_MOTION_CTRL_2.value, ID.ARM_GRIPPER_CTRL.value,
        ID.ARM_MOTOR_ENABLE_DISABLE_CONFIG.value)
    assert pf.JOINT_CTRL_IDS == (ID.ARM_JOINT_CTRL_12.value, ID.ARM_JOINT_CTRL_34.value, ID.ARM_JOINT_CTRL_56.value)
    assert pf.END_POSE_CTRL_IDS == tuple(getattr(ID, f"ARM_MOTION_CTRL_CARTESIAN_{i}").value for i in (1, 2, 3))
    assert pf.ARM_STATUS == ID.ARM_STATUS_FEEDBACK.value and pf.GRIPPER_FB == ID.ARM_GRIPPER_FEEDBACK.value
    assert pf.END_POSE_FB_IDS == tuple(getattr(ID, f"ARM_END_POSE_FEEDBACK_{i}").value for i in (1, 2, 3))
    assert pf.JOINT_FB_IDS == (ID.ARM_JOINT_FEEDBACK_12.value, ID.ARM_JOINT_FEEDBACK_34.value,
                               ID.ARM_JOINT_FEEDBACK_56.value)
    assert pf.HIGH_SPEED_IDS == tuple(getattr(ID, f"ARM_INFO_HIGH_SPD_FEEDBACK_{i}").value for i in range(1, 7))
    assert pf.LOW_SPEED_IDS == tuple(getattr(ID, f"ARM_INFO_LOW_SPD_FEEDBACK_{i}").value for i in range(1, 7))
    assert (pf.MOTOR_LIMIT_QUERY, pf.MOTOR_LIMIT_FB, pf.MOTOR_ACC_FB, pf.FIRMWARE) == (
        ID.ARM_SEARCH_MOTOR_MAX_SPD_ACC_LIMIT.value, ID.ARM_FEEDBACK_CURRENT_MOTOR_ANGLE_LIMIT_MAX_SPD.value,
        ID.ARM_FEEDBACK_CURRENT_MOTOR_MAX_ACC_LIMIT.value, ID.ARM_FIRMWARE_READ.value)


def test_round_trips():
    rng = random.Random(3)
    for _ in range(200):
        i32 = [rng.randint(-(2**31), 2**31 - 1) for _ in range(6)]
        for frames in (pf.joint_ctrl_frames(i32), pf.end_pose_ctrl_frames(i32)):
            decoded = [pf.unpack_command(i, d) for i, d in frames]
            assert [v for p in decoded for v in (p.first, p.second)] == i32
        for frames in (pf.joint_feedback_frames(i32), pf.end_pose_feedback_frames(i32)):
            decoded = [pf.unpack_feedback(i, d) for i, d in frames]
            assert [v for p in decoded for v in (p.first, p.second)] == i32
        status = pf.ArmStatus(rng.randint(0, 7), rng.randint(0, 15), rng.randint(0, 5), rng.randint(0, 7),
                              rng.randint(0, 1), rng.randint(0, 255), rng.randint(0, 0xFFFF))
        assert pf.unpack_feedback(*status.pack()) == status
        grip = pf.GripperFeedback(i32[0], rng.randint(-32768, 32767), rng.randint(0, 255))
        assert pf.unpack_feedback(*grip.pack()) == grip
        hs = pf.HighSpeed(rng.randint(1, 6), rng.randint(-32768, 32767), rng.randint(-32768, 32767), i32[1])
        assert pf.unpack_feedback(*hs.pack()) == hs
        ls = pf.LowSpeed(rng.randint(1, 6), rng.randint(0, 65535), rng.randint(-32768, 32767), rng.randint(-128, 127),
                         rng.randint(0, 255), rng.randint(0, 65535))
        assert pf.unpack_feedback(*ls.pack()) == ls
        for cmd in (pf.MotionCtrl1(rng.randint(0, 2), rng.randint(0, 8), rng.randint(0, 7)),
                    pf.MotionCtrl2(rng.randint(0, 7), rng.randint(0, 5), rng.randint(0, 100), 0xAD, 3, 1),
                    pf.GripperCtrl(i32[2], rng.randint(0, 65535), rng.randint(0, 3), 0xAE),
                    pf.MotorEnable(rng.randint(1, 7), rng.randint(1, 2)), pf.MotorLimitQuery(3, 2), pf.FirmwareQuery()):
            assert pf.unpack_command(*cmd.pack()) == cmd
    for fb in (pf.MotorLimitFeedback(2, 1800, 0, 3000), pf.MotorAccFeedback(5, 500)):
        assert pf.unpack_feedback(*fb.pack()) == fb


def test_every_layout_fits_a_frame_and_its_fields():
    """A frame class's LAYOUT packs at most 8 bytes, one struct item per data field (a MotorFrame's motor is its ID)."""
    classes = [c for c in vars(pf).values() if isinstance(c, type) and issubclass(c, (pf.FixedFrame, pf.MotorFrame))
               and c not in (pf.FixedFrame, pf.MotorFrame)]
    assert len(classes) == 12
    for cls in classes:
        data_fields = len(dataclasses.fields(cls)) - (1 if issubclass(cls, pf.MotorFrame) else 0)
        assert struct.calcsize(cls.LAYOUT) <= 8, cls.__name__
        assert len(struct.unpack(cls.LAYOUT, bytes(struct.calcsize(cls.LAYOUT)))) == data_fields, cls.__name__


def test_bad_frames_raise_frame_error():
    with pytest.raises(pf.FrameError, match="needs 8"):
        pf.unpack_command(pf.JOINT_CTRL_12, b"\x00\x01")
    with pytest.raises(pf.FrameError):
        pf.ArmStatus(ctrl_mode=256).pack()
    with pytest.raises(pf.FrameError):
        pf.HighSpeed(7).pack()
    with pytest.raises(pf.FrameError):
        pf.joint_ctrl_frames([0] * 5)
    assert pf.unpack_command(0x2A5, bytes(8)) is None
    assert pf.unpack_feedback(0x155, bytes(8)) is None


def test_err_code_bits_match_the_sdk():
    code = pf.err_code(angle_limit=[False, True, False, False, False, True], comm_error=[True, False, False, True])
    assert pf.err_bits(code) == ((False, True, False, False, False, True), (True, False, False, True, False, False))
    sdk = sdk_decode(pf.ArmStatus(ctrl_mode=1, arm_status=pf.ARM_COLLISION, mode_feed=pf.MOVE_J, motion_status=1,
                                  trajectory_num=9, err_code=code).pack()).arm_status_msgs
    assert (sdk.ctrl_mode, sdk.arm_status, sdk.mode_feed, sdk.motion_status, sdk.trajectory_num) == (1, 7, 1, 1, 9)
    assert sdk.err_code == code
    e = sdk.err_status
    assert [e.joint_2_angle_limit, e.joint_6_angle_limit, e.joint_1_angle_limit] == [True, True, False]
    assert [e.communication_status_joint_1, e.communication_status_joint_4, e.communication_status_joint_2] == [
        True, True, False]


def test_feedback_frames_decode_in_the_sdk():
    joints = [123456, -98765, 0, -2147483648, 2147483647, 42]
    msgs = [sdk_decode(f) for f in pf.joint_feedback_frames(joints)]
    j = [msgs[0].arm_joint_feedback.joint_1, msgs[0].arm_joint_feedback.joint_2, msgs[1].arm_joint_feedback.joint_3,
         msgs[1].arm_joint_feedback.joint_4, msgs[2].arm_joint_feedback.joint_5, msgs[2].arm_joint_feedback.joint_6]
    assert j == joints
    pose = [56128, -1, 213266, 179999, -85000, 3]
    msgs = [sdk_decode(f) for f in pf.end_pose_feedback_frames(pose)]
    p = [msgs[0].arm_end_pose.X_axis, msgs[0].arm_end_pose.Y_axis, msgs[1].arm_end_pose.Z_axis,
         msgs[1].arm_end_pose.RX_axis, msgs[2].arm_end_pose.RY_axis, msgs[2].arm_end_pose.RZ_axis]
    assert p == pose
    g = sdk_decode(pf.GripperFeedback(35000, -1200, pf.DRIVER_ENABLED | pf.DRIVER_STALL).pack()).gripper_feedback
    assert (g.grippers_angle, g.grippers_effort) == (35000, -1200)
    assert g.foc_status.driver_enable_status and g.foc_status.homing_status and not g.foc_status.driver_error_status
    for motor in range(1, 7):
        hs = sdk_decode(pf.HighSpeed(motor, -1500, 800, 314).pack())
        h = getattr(hs, f"arm_high_spd_feedback_{motor}")
        assert (h.can_id, h.motor_speed, h.current, h.pos) == (0x250 + motor, -1500, 800, 314)
        ls = sdk_decode(pf.LowSpeed(motor, 240, -5, -3, pf.DRIVER_ENABLED | pf.DRIVER_OVERHEAT, 1500).pack())
        low = getattr(ls, f"arm_low_spd_feedback_{motor}")
        assert (low.vol, low.foc_temp, low.motor_temp, low.bus_current) == (240, -5, -3, 1500)
        assert low.foc_status.driver_enable_status and low.foc_status.driver_overheating
        assert not low.foc_status.driver_error_status
    lim = sdk_decode(pf.MotorLimitFeedback(2, 1800, -50, 3000).pack()).arm_feedback_current_motor_angle_limit_max_spd
    assert (lim.motor_num, lim.max_angle_limit, lim.min_angle_limit, lim.max_joint_spd) == (2, 1800, -50, 3000)
    acc = sdk_decode(pf.MotorAccFeedback(4, 500).pack()).arm_feedback_current_motor_max_acc_limit
    assert (acc.joint_motor_num, acc.max_joint_acc) == (4, 500)
    fw = b"".join(sdk_decode(f).firmware_data for f in pf.firmware_frames("xxS-V1.8-1 twin"))
    assert fw.startswith(b"xxS-V1.8-1 twin")


@pytest.fixture
def sdk_on_virtual_bus():
    """The SDK's interface with a bus on a fresh virtual channel (no read thread), and our bus on that channel."""
    channel = f"piper_frames_{next(_port)}"
    ours = can.Bus(interface="virtual", channel=channel)
    piper = C_PiperInterface_V2(can_name=channel, judge_flag=False, can_auto_init=False)
    piper.CreateCanBus(channel, bustype="virtual")
    yield piper, ours
    piper.GetCanBus().Close()  # never connected: no threads to stop
    C_PiperInterface_V2._instances.pop(channel, None)  # the SDK keeps one interface per name for the process
    ours.shutdown()


def _captured(bus: can.BusABC, count: int) -> list[pf.Frame]:
    frames = []
    for _ in range(count):
        msg = bus.recv(timeout=5.0)
        assert msg is not None, f"SDK sent {len(frames)} of {count} frames"
        frames.append((msg.arbitration_id, bytes(msg.data)))
    return frames


def test_commands_the_sdk_sends_decode_with_ours(sdk_on_virtual_bus):
    piper, bus = sdk_on_virtual_bus
    piper.EnableArm(7)
    piper.DisableArm(3)
    piper.MotionCtrl_2(0x01, 0x00, 37, 0x00)
    piper.EmergencyStop(0x01)
    piper.ResetPiper()
    piper.JointCtrl(10000, 20000, -30000, 40000, -50000, 60000)
    piper.EndPoseCtrl(150000, -2000, 300000, -179000, 85000, 1000)
    piper.GripperCtrl(50000, 1500, 0x01, 0)
    piper.SearchMotorMaxAngleSpdAccLimit(4, 0x02)
    piper.SearchPiperFirmwareVersion()
    got = [pf.unpack_command(i, d) for i, d in _captured(bus, 14)]
    assert got[0] == pf.MotorEnable(7, pf.ENABLE_FLAG_ENABLE) and got[0].motors() == (1, 2, 3, 4, 5, 6, 7)
    assert got[1] == pf.MotorEnable(3, pf.ENABLE_FLAG_DISABLE) and got[1].motors() == (3,)
    assert got[2] == pf.MotionCtrl2(ctrl_mode=1, move_mode=pf.MOVE_P, speed_pct=37)
    assert got[3] == pf.MotionCtrl1(emergency_stop=pf.ESTOP_STOP)
    assert got[4] == pf.MotionCtrl1(emergency_stop=pf.ESTOP_RESUME)
    assert got[5:8] == [pf.PairI32(pf.JOINT_CTRL_12, 10000, 20000), pf.PairI32(pf.JOINT_CTRL_34, -30000, 40000),
                        pf.PairI32(pf.JOINT_CTRL_56, -50000, 60000)]
    assert got[8:11] == [pf.PairI32(pf.END_POSE_CTRL_XY, 150000, -2000),
                         pf.PairI32(pf.END_POSE_CTRL_ZRX, 300000, -179000),
                         pf.PairI32(pf.END_POSE_CTRL_RYRZ, 85000, 1000)]
    assert got[11] == pf.GripperCtrl(50000, 1500, pf.GRIPPER_ENABLE, 0) and got[11].enable
    assert got[12] == pf.MotorLimitQuery(4, pf.LIMIT_QUERY_ACC)
    assert got[13] == pf.FirmwareQuery(0x01)


def test_our_command_bytes_equal_the_sdks(sdk_on_virtual_bus):
    piper, bus = sdk_on_virtual_bus
    piper.MotionCtrl_2(0x01, 0x01, 80, 0xAD, 5, 0x02)
    piper.JointCtrl(-1, 2, -3, 4, -5, 6)
    piper.GripperCtrl(0, 5000, 0x03, 0xAE)
    piper.EnableArm(0xFF, 0x02)
    sent = _captured(bus, 6)
    ours = [pf.MotionCtrl2(1, 1, 80, 0xAD, 5, 0x02).pack(), *pf.joint_ctrl_frames([-1, 2, -3, 4, -5, 6]),
            pf.GripperCtrl(0, 5000, 0x03, 0xAE).pack(), pf.MotorEnable(0xFF, 0x02).pack()]
    assert sent == ours
