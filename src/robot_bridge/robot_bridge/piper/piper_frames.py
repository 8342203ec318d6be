"""The AgileX PiPER arm's CAN frames (protocol V2, as piper_sdk 0.6.2 sends and parses them): IDs, pack and unpack.

Pure functions over (arbitration id, 8 data bytes), big-endian, values in the SDK's integer units (piper_units); a
frame packs from a frozen dataclass and unpacks into one (`unpack_command`, `unpack_feedback`). The frame table:
docs/piper_twin.md, "Frames".
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import ClassVar

# ---- IDs -----------------------------------------------------------------------------------------------------
MOTION_CTRL_1 = 0x150
MOTION_CTRL_2 = 0x151
END_POSE_CTRL_XY = 0x152
END_POSE_CTRL_ZRX = 0x153
END_POSE_CTRL_RYRZ = 0x154
JOINT_CTRL_12 = 0x155
JOINT_CTRL_34 = 0x156
JOINT_CTRL_56 = 0x157
GRIPPER_CTRL = 0x159
MOTOR_ENABLE = 0x471
MOTOR_LIMIT_QUERY = 0x472
FIRMWARE = 0x4AF  # the query (host -> arm) and the answer (arm -> host) share this ID

ARM_STATUS = 0x2A1
END_POSE_XY = 0x2A2
END_POSE_ZRX = 0x2A3
END_POSE_RYRZ = 0x2A4
JOINT_FB_12 = 0x2A5
JOINT_FB_34 = 0x2A6
JOINT_FB_56 = 0x2A7
GRIPPER_FB = 0x2A8
HIGH_SPEED_BASE = 0x250  # + motor 1..6
LOW_SPEED_BASE = 0x260  # + motor 1..6
MOTOR_LIMIT_FB = 0x473
MOTOR_ACC_FB = 0x47C

JOINT_CTRL_IDS = (JOINT_CTRL_12, JOINT_CTRL_34, JOINT_CTRL_56)
JOINT_FB_IDS = (JOINT_FB_12, JOINT_FB_34, JOINT_FB_56)
END_POSE_CTRL_IDS = (END_POSE_CTRL_XY, END_POSE_CTRL_ZRX, END_POSE_CTRL_RYRZ)
END_POSE_FB_IDS = (END_POSE_XY, END_POSE_ZRX, END_POSE_RYRZ)
HIGH_SPEED_IDS = tuple(HIGH_SPEED_BASE + m for m in range(1, 7))
LOW_SPEED_IDS = tuple(LOW_SPEED_BASE + m for m in range(1, 7))

# ---- field values ----------------------------------------------------------------------------------------------
CTRL_MODE_STANDBY = 0x00
CTRL_MODE_CAN = 0x01
MOVE_P, MOVE_J, MOVE_L, MOVE_C, MOVE_M, MOVE_CPV = range(6)
ESTOP_NONE, ESTOP_STOP, ESTOP_RESUME = 0x00, 0x01, 0x02
ARM_NORMAL = 0x00
ARM_EMERGENCY_STOP = 0x01
ARM_NO_SOLUTION = 0x02
ARM_TARGET_EXCEEDS_LIMIT = 0x04
ARM_JOINT_COMM_ERROR = 0x05
ARM_COLLISION = 0x07
MOTION_REACHED, MOTION_NOT_REACHED = 0x00, 0x01
ENABLE_FLAG_DISABLE, ENABLE_FLAG_ENABLE = 0x01, 0x02
MOTOR_ALL_SDK = 7  # what the SDK's EnableArm()/DisableArm() send by default: every motor
MOTOR_ALL = 0xFF
GRIPPER_DISABLE, GRIPPER_ENABLE, GRIPPER_DISABLE_CLEAR, GRIPPER_ENABLE_CLEAR = 0x00, 0x01, 0x02, 0x03
GRIPPER_SET_ZERO = 0xAE
LIMIT_QUERY_ANGLE_SPEED, LIMIT_QUERY_ACC = 0x01, 0x02

# driver status bits (low-speed 0x26x byte 5, gripper 0x2A8 byte 6)
DRIVER_VOLTAGE_LOW = 1 << 0
DRIVER_MOTOR_OVERHEAT = 1 << 1
DRIVER_OVERCURRENT = 1 << 2
DRIVER_OVERHEAT = 1 << 3
DRIVER_COLLISION = 1 << 4  # gripper: sensor status
DRIVER_ERROR = 1 << 5
DRIVER_ENABLED = 1 << 6
DRIVER_STALL = 1 << 7  # gripper: homed


class FrameError(ValueError):
    """A frame whose data is too short or whose values do not fit their fields."""


Frame = tuple[int, bytes]
"""(arbitration id, 8 data bytes)."""


def _pack(fmt: str, *values: int) -> bytes:
    try:
        data = struct.pack(fmt, *values)
    except struct.error as exc:
        raise FrameError(f"cannot pack {values} as '{fmt}': {exc}") from None
    return data.ljust(8, b"\x00")


def _unpack(fmt: str, data: bytes | bytearray | Sequence[int]) -> tuple[int, ...]:
    raw = bytes(data)
    size = struct.calcsize(fmt)
    if len(raw) < size:
        raise FrameError(f"frame has {len(raw)} data bytes, needs {size}")
    return struct.unpack_from(fmt, raw)


class FixedFrame:
    """A frame with one ID, CAN_ID, whose data are the dataclass's fields in order, packed as LAYOUT (struct)."""

    CAN_ID: ClassVar[int]
    LAYOUT: ClassVar[str]

    def pack(self) -> Frame:
        """The frame."""
        return self.CAN_ID, _pack(self.LAYOUT, *_values(self))

    @classmethod
    def unpack(cls, data: bytes) -> FixedFrame:
        """From a frame's data."""
        return cls(*_unpack(cls.LAYOUT, data))


class MotorFrame:
    """A frame per motor 1-6, ID_BASE + motor, whose data are the dataclass's fields after `motor`, as LAYOUT."""

    ID_BASE: ClassVar[int]
    LAYOUT: ClassVar[str]

    def pack(self) -> Frame:
        """The frame."""
        values = _values(self)
        if not 1 <= values[0] <= 6:
            raise FrameError(f"motor {values[0]} is not 1-6")
        return self.ID_BASE + values[0], _pack(self.LAYOUT, *values[1:])

    @classmethod
    def unpack(cls, can_id: int, data: bytes) -> MotorFrame:
        """From a frame's ID and data."""
        return cls(can_id - cls.ID_BASE, *_unpack(cls.LAYOUT, data))


def _values(frame) -> tuple[int, ...]:
    return tuple(getattr(frame, f.name) for f in fields(frame))


# ---- commands --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MotionCtrl1(FixedFrame):
    """0x150: emergency stop (0x01) / resume (0x02), trajectory and drag-teach control."""

    CAN_ID = MOTION_CTRL_1
    LAYOUT = ">BBB"

    emergency_stop: int = ESTOP_NONE
    track_ctrl: int = 0
    drag_teach_ctrl: int = 0


@dataclass(frozen=True)
class MotionCtrl2(FixedFrame):
    """0x151: control mode, move mode, speed percentage (0-100), MIT mode, residence time, installation."""

    CAN_ID = MOTION_CTRL_2
    LAYOUT = ">BBBBBB"

    ctrl_mode: int = CTRL_MODE_CAN
    move_mode: int = MOVE_J
    speed_pct: int = 50
    mit_mode: int = 0
    residence_time: int = 0
    installation_pos: int = 0


@dataclass(frozen=True)
class PairI32:
    """Two int32 values of a joint (0.001 deg) or end-pose (0.001 mm / 0.001 deg) frame, with its ID."""

    can_id: int
    first: int
    second: int

    def pack(self) -> Frame:
        """The frame."""
        return self.can_id, _pack(">ii", self.first, self.second)

    @classmethod
    def unpack(cls, can_id: int, data: bytes) -> PairI32:
        """From a frame's ID and data."""
        return cls(can_id, *_unpack(">ii", data))


def pack_six(ids: Sequence[int], values: Sequence[int]) -> list[Frame]:
    """Six int32 values as the three frames `ids` (joints 1-6 or X, Y, Z, RX, RY, RZ)."""
    if len(values) != 6 or len(ids) != 3:
        raise FrameError(f"expected 6 values for 3 frames, got {len(values)} for {len(ids)}")
    return [PairI32(ids[i], int(values[2 * i]), int(values[2 * i + 1])).pack() for i in range(3)]


def joint_ctrl_frames(millideg: Sequence[int]) -> list[Frame]:
    """Joint target (6 x 0.001 deg) as 0x155-0x157."""
    return pack_six(JOINT_CTRL_IDS, millideg)


def end_pose_ctrl_frames(pose: Sequence[int]) -> list[Frame]:
    """End-pose target (X, Y, Z 0.001 mm; RX, RY, RZ 0.001 deg) as 0x152-0x154."""
    return pack_six(END_POSE_CTRL_IDS, pose)


@dataclass(frozen=True)
class GripperCtrl(FixedFrame):
    """0x159: stroke (int32 0.001 mm), effort (uint16 0.001 N·m), enable code (0-3), set zero (0xAE)."""

    CAN_ID = GRIPPER_CTRL
    LAYOUT = ">iHBB"

    angle: int = 0
    effort: int = 0
    status_code: int = GRIPPER_DISABLE
    set_zero: int = 0

    @property
    def enable(self) -> bool:
        """Whether the code enables the gripper (0x01, 0x03)."""
        return bool(self.status_code & 0x01)


@dataclass(frozen=True)
class MotorEnable(FixedFrame):
    """0x471: motor 1-6 (joint), 7 or 0xFF (all motors, gripper included); flag 0x01 disable, 0x02 enable."""

    CAN_ID = MOTOR_ENABLE
    LAYOUT = ">BB"

    motor_num: int = MOTOR_ALL_SDK
    enable_flag: int = ENABLE_FLAG_ENABLE

    def motors(self) -> tuple[int, ...]:
        """The joint motors (1-6) and gripper (7) this command addresses; () for an unknown motor number."""
        if self.motor_num in (MOTOR_ALL_SDK, MOTOR_ALL):
            return (1, 2, 3, 4, 5, 6, 7)
        if 1 <= self.motor_num <= 6:
            return (self.motor_num,)
        return ()


@dataclass(frozen=True)
class MotorLimitQuery(FixedFrame):
    """0x472: ask motor 1-6 for its angle limits / max speed (0x01, answered by 0x473) or max acceleration (0x02,
    answered by 0x47C)."""

    CAN_ID = MOTOR_LIMIT_QUERY
    LAYOUT = ">BB"

    motor_num: int = 1
    search_content: int = LIMIT_QUERY_ANGLE_SPEED


@dataclass(frozen=True)
class FirmwareQuery(FixedFrame):
    """0x4AF from the host: byte 0 = 0x01 asks the arm for its firmware text."""

    CAN_ID = FIRMWARE
    LAYOUT = ">B"

    request: int = 0x01


Command = MotionCtrl1 | MotionCtrl2 | PairI32 | GripperCtrl | MotorEnable | MotorLimitQuery | FirmwareQuery


def unpack_command(can_id: int, data: bytes) -> Command | None:
    """A frame the arm receives as its dataclass; None for an ID the arm does not take (FrameError if short)."""
    if can_id == MOTION_CTRL_1:
        return MotionCtrl1.unpack(data)
    if can_id == MOTION_CTRL_2:
        return MotionCtrl2.unpack(data)
    if can_id in JOINT_CTRL_IDS or can_id in END_POSE_CTRL_IDS:
        return PairI32.unpack(can_id, data)
    if can_id == GRIPPER_CTRL:
        return GripperCtrl.unpack(data)
    if can_id == MOTOR_ENABLE:
        return MotorEnable.unpack(data)
    if can_id == MOTOR_LIMIT_QUERY:
        return MotorLimitQuery.unpack(data)
    if can_id == FIRMWARE:
        return FirmwareQuery.unpack(data)
    return None


# ---- feedback --------------------------------------------------------------------------------------------------
def err_code(angle_limit: Sequence[bool] = (), comm_error: Sequence[bool] = ()) -> int:
    """The arm status's uint16 error code: byte 6 (high) bit j = joint j+1 over its angle limit, byte 7 (low)
    bit j = joint j+1 communication error."""
    code = 0
    for j, flag in enumerate(angle_limit[:6]):
        code |= (1 << (8 + j)) if flag else 0
    for j, flag in enumerate(comm_error[:6]):
        code |= (1 << j) if flag else 0
    return code


def err_bits(code: int) -> tuple[tuple[bool, ...], tuple[bool, ...]]:
    """(angle limit per joint, communication error per joint) from an error code."""
    return tuple(bool(code & (1 << (8 + j))) for j in range(6)), tuple(bool(code & (1 << j)) for j in range(6))


@dataclass(frozen=True)
class ArmStatus(FixedFrame):
    """0x2A1: control mode, arm status, move-mode feedback, teach status, motion status, trajectory number,
    error code (see err_code)."""

    CAN_ID = ARM_STATUS
    LAYOUT = ">BBBBBBH"

    ctrl_mode: int = CTRL_MODE_STANDBY
    arm_status: int = ARM_NORMAL
    mode_feed: int = MOVE_P
    teach_status: int = 0
    motion_status: int = MOTION_REACHED
    trajectory_num: int = 0
    err_code: int = 0


def joint_feedback_frames(millideg: Sequence[int]) -> list[Frame]:
    """Joint angles (6 x 0.001 deg) as 0x2A5-0x2A7."""
    return pack_six(JOINT_FB_IDS, millideg)


def end_pose_feedback_frames(pose: Sequence[int]) -> list[Frame]:
    """End pose (X, Y, Z 0.001 mm; RX, RY, RZ 0.001 deg) as 0x2A2-0x2A4."""
    return pack_six(END_POSE_FB_IDS, pose)


@dataclass(frozen=True)
class GripperFeedback(FixedFrame):
    """0x2A8: stroke (int32 0.001 mm), effort (int16 0.001 N·m), status bits (DRIVER_*; bit 6 enabled)."""

    CAN_ID = GRIPPER_FB
    LAYOUT = ">ihB"

    angle: int = 0
    effort: int = 0
    status_code: int = 0


@dataclass(frozen=True)
class HighSpeed(MotorFrame):
    """0x251-0x256 for motor 1-6: speed (int16 0.001 rad/s), current (int16 0.001 A), position (int32; the twin
    sends 0.001 rad, the SDK documents the field as 'rad')."""

    ID_BASE = HIGH_SPEED_BASE
    LAYOUT = ">hhi"

    motor: int
    speed: int = 0
    current: int = 0
    pos: int = 0


@dataclass(frozen=True)
class LowSpeed(MotorFrame):
    """0x261-0x266 for motor 1-6: voltage (uint16 0.1 V), driver temperature (int16 °C), motor temperature
    (int8 °C), driver status bits (DRIVER_*; bit 6 enabled), bus current (uint16 0.001 A)."""

    ID_BASE = LOW_SPEED_BASE
    LAYOUT = ">HhbBH"

    motor: int
    voltage: int = 0
    driver_temp: int = 0
    motor_temp: int = 0
    status: int = 0
    bus_current: int = 0

    @property
    def enabled(self) -> bool:
        """Whether the driver reports itself enabled (bit 6)."""
        return bool(self.status & DRIVER_ENABLED)


@dataclass(frozen=True)
class MotorLimitFeedback(FixedFrame):
    """0x473: motor 1-6's max / min angle (int16 0.1 deg) and max joint speed (uint16 0.001 rad/s)."""

    CAN_ID = MOTOR_LIMIT_FB
    LAYOUT = ">BhhH"

    motor_num: int
    max_angle: int
    min_angle: int
    max_speed: int


@dataclass(frozen=True)
class MotorAccFeedback(FixedFrame):
    """0x47C: motor 1-6's max acceleration (uint16 0.001 rad/s²)."""

    CAN_ID = MOTOR_ACC_FB
    LAYOUT = ">BH"

    motor_num: int
    max_acc: int


def firmware_frames(text: str) -> list[Frame]:
    """Firmware text (ASCII) as 0x4AF frames of 8 bytes each, zero-padded."""
    raw = text.encode("ascii")
    return [(FIRMWARE, raw[i:i + 8].ljust(8, b"\x00")) for i in range(0, len(raw), 8)] or [(FIRMWARE, bytes(8))]


Feedback = ArmStatus | PairI32 | GripperFeedback | HighSpeed | LowSpeed | MotorLimitFeedback | MotorAccFeedback


def unpack_feedback(can_id: int, data: bytes) -> Feedback | None:
    """A frame the arm sends as its dataclass; None for an ID that is not arm feedback (FrameError if short)."""
    if can_id == ARM_STATUS:
        return ArmStatus.unpack(data)
    if can_id in JOINT_FB_IDS or can_id in END_POSE_FB_IDS:
        return PairI32.unpack(can_id, data)
    if can_id == GRIPPER_FB:
        return GripperFeedback.unpack(data)
    if can_id in HIGH_SPEED_IDS:
        return HighSpeed.unpack(can_id, data)
    if can_id in LOW_SPEED_IDS:
        return LowSpeed.unpack(can_id, data)
    if can_id == MOTOR_LIMIT_FB:
        return MotorLimitFeedback.unpack(data)
    if can_id == MOTOR_ACC_FB:
        return MotorAccFeedback.unpack(data)
    return None
