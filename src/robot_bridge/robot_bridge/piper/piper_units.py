"""Unit conversions between SI values and the integer units piper_sdk 0.6.2 puts on the CAN bus.

Conversions round with `round()` and use exact `math.pi`; a value that does not fit its wire field raises
UnitRangeError, naming the quantity (nothing is clamped here: `clamp` is the caller's decision). The units and the
out-of-range rule: docs/piper_twin.md, "Units".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1
UINT16_MAX = (1 << 16) - 1
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1

MILLIDEG_PER_RAD = 1000.0 * 180.0 / math.pi
"""0.001-degree units in one radian (exact pi)."""
MICROMETRE_PER_M = 1_000_000.0
"""0.001-mm units in one metre."""
MILLI = 1000.0
"""0.001-units (N·m, rad/s, A, V...) in one SI unit."""

JOINT_COUNT = 6

JOINT_LIMITS_RAD: tuple[tuple[float, float], ...] = (
    (-2.6179, 2.6179),
    (0.0, 3.14),
    (-2.967, 0.0),
    (-1.745, 1.745),
    (-1.22, 1.22),
    (-2.09439, 2.09439),
)
"""Joint angle limits (rad) as piper_sdk 0.6.2 documents and enforces them (its joint limit table; these are the
SDK's own numbers, 3.14 included, not our rounding of pi)."""

GRIPPER_RANGE_M: tuple[float, float] = (0.0, 0.07)
"""Gripper stroke range (m) the SDK enforces."""

GRIPPER_EFFORT_MAX_NM = 5.0
"""Largest gripper effort (N·m) the SDK documents for GripperCtrl (0..5000 in 0.001 N·m)."""


class UnitRangeError(ValueError):
    """A value that does not fit the SDK's integer field (or is not finite)."""


def _to_int(value: float, scale: float, low: int, high: int, what: str) -> int:
    if not math.isfinite(value):
        raise UnitRangeError(f"{what}: {value!r} is not a finite number")
    scaled = round(float(value) * scale)
    if not low <= scaled <= high:
        raise UnitRangeError(f"{what}: {value!r} is {scaled} in SDK units, outside [{low}, {high}]")
    return scaled


def rad_to_millideg(angle_rad: float, what: str = "angle") -> int:
    """Radians to the SDK's 0.001-degree int32 units."""
    return _to_int(angle_rad, MILLIDEG_PER_RAD, INT32_MIN, INT32_MAX, what)


def millideg_to_rad(value: int) -> float:
    """The SDK's 0.001-degree units to radians."""
    return float(value) / MILLIDEG_PER_RAD


def joint_to_sdk(angle_rad: float) -> int:
    """A joint angle (rad) in the SDK's JointCtrl units (0.001 degree, int32)."""
    return rad_to_millideg(angle_rad, "joint angle")


def joint_from_sdk(value: int) -> float:
    """A joint angle in the SDK's units (0.001 degree) in radians."""
    return millideg_to_rad(value)


def joints_to_sdk(angles_rad: Sequence[float]) -> list[int]:
    """Six joint angles (rad) in the SDK's units; UnitRangeError unless exactly six."""
    if len(angles_rad) != JOINT_COUNT:
        raise UnitRangeError(f"joints: expected {JOINT_COUNT} angles, got {len(angles_rad)}")
    return [rad_to_millideg(a, f"joint{i + 1}") for i, a in enumerate(angles_rad)]


def joints_from_sdk(values: Iterable[int]) -> list[float]:
    """Joint angles in the SDK's units to radians."""
    return [millideg_to_rad(v) for v in values]


def position_to_sdk(position_m: float, what: str = "position") -> int:
    """An end-pose coordinate (m) in the SDK's 0.001-mm int32 units."""
    return _to_int(position_m, MICROMETRE_PER_M, INT32_MIN, INT32_MAX, what)


def position_from_sdk(value: int) -> float:
    """An end-pose coordinate in the SDK's 0.001-mm units in metres."""
    return float(value) / MICROMETRE_PER_M


def pose_to_sdk(pose: Sequence[float]) -> list[int]:
    """An end pose (x, y, z m, roll, pitch, yaw rad) in the SDK's EndPoseCtrl units (X, Y, Z, RX, RY, RZ)."""
    if len(pose) != 6:
        raise UnitRangeError(f"end pose: expected 6 values, got {len(pose)}")
    names = ("X", "Y", "Z", "RX", "RY", "RZ")
    return [position_to_sdk(v, names[i]) for i, v in enumerate(pose[:3])] + \
        [rad_to_millideg(v, names[i + 3]) for i, v in enumerate(pose[3:])]


def pose_from_sdk(values: Sequence[int]) -> list[float]:
    """An end pose in the SDK's units (X, Y, Z 0.001 mm, RX, RY, RZ 0.001 degree) in (m, m, m, rad, rad, rad)."""
    if len(values) != 6:
        raise UnitRangeError(f"end pose: expected 6 values, got {len(values)}")
    return [position_from_sdk(v) for v in values[:3]] + [millideg_to_rad(v) for v in values[3:]]


def gripper_to_sdk(width_m: float) -> int:
    """A gripper stroke (m) in the SDK's 0.001-mm int32 units."""
    return _to_int(width_m, MICROMETRE_PER_M, INT32_MIN, INT32_MAX, "gripper stroke")


def gripper_from_sdk(value: int) -> float:
    """A gripper stroke in the SDK's 0.001-mm units in metres."""
    return float(value) / MICROMETRE_PER_M


def gripper_effort_to_sdk(effort_nm: float) -> int:
    """A gripper effort command (N·m) in the SDK's 0.001 N·m units (uint16 in the command frame)."""
    return _to_int(effort_nm, MILLI, 0, UINT16_MAX, "gripper effort")


def gripper_effort_feedback_to_sdk(effort_nm: float) -> int:
    """A measured gripper effort (N·m) in the SDK's 0.001 N·m units (int16 in the feedback frame)."""
    return _to_int(effort_nm, MILLI, INT16_MIN, INT16_MAX, "gripper effort feedback")


def gripper_effort_from_sdk(value: int) -> float:
    """A gripper effort in the SDK's 0.001 N·m units in N·m."""
    return float(value) / MILLI


def milli_to_sdk16(value: float, what: str) -> int:
    """An SI value (rad/s, A, N·m) in 0.001 units as the int16 the high-speed feedback frame carries."""
    return _to_int(value, MILLI, INT16_MIN, INT16_MAX, what)


def milli_from_sdk(value: int) -> float:
    """A value in 0.001 units (rad/s, A, N·m) in SI units."""
    return float(value) / MILLI


def clamp(value: float, low: float, high: float) -> float:
    """`value` limited to [low, high]."""
    return min(max(value, low), high)


def clamp_joints(angles_rad: Sequence[float]) -> list[float]:
    """Joint angles limited to the SDK's joint limit table (JOINT_LIMITS_RAD)."""
    if len(angles_rad) != JOINT_COUNT:
        raise UnitRangeError(f"joints: expected {JOINT_COUNT} angles, got {len(angles_rad)}")
    return [clamp(a, lo, hi) for a, (lo, hi) in zip(angles_rad, JOINT_LIMITS_RAD, strict=True)]


def joint_limit_millideg(joint_index: int) -> tuple[int, int]:
    """Joint `joint_index` (0-based)'s limits in the SDK's units, rounded as the SDK rounds them."""
    lo, hi = JOINT_LIMITS_RAD[joint_index]
    return round(math.degrees(lo) * 1000), round(math.degrees(hi) * 1000)
