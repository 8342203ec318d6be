"""Safety checks of the arm's commands, ROS-free: what may reach the PiPER and what is refused, and why.

Every command passes a `check_*` function before the driver sends it, accepted or `Refused` whole (the reason is
the rejected.<input>.<reason> counter); `CommandGate`, `CommandWatchdog` and `LatestCommands` hold the state
around them. The reasons and the orientation convention are in docs/piper_arm.md.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from brace_common.counters import Counters, Health
from brace_common.reception import SequenceGaps
from brace_common.validation import InvalidInput

from .piper_units import GRIPPER_RANGE_M, JOINT_COUNT, JOINT_LIMITS_RAD

JOINT_NAMES: tuple[str, ...] = tuple(f"joint{i + 1}" for i in range(JOINT_COUNT))
"""The arm's joint names, in order (JointState names of joint_states and joint_cmd)."""
GRIPPER_NAME = "gripper"
"""The gripper's name in a JointState (its opening in m)."""

REASONS = ("non_finite", "malformed", "unknown_joint", "joint_limit", "joint_step", "translation_step",
           "rotation_step", "workspace", "gripper_range", "no_feedback", "frame", "inactive", "stopped", "fault")
"""Every reason a command can be refused for (the counter keys)."""

Matrix = tuple[tuple[float, float, float], tuple[float, float, float], tuple[float, float, float]]


class Refused(InvalidInput):
    """A command refused by a safety check; `reason` is the counter key, the message says what and by how much."""


@dataclass(frozen=True)
class SafetyLimits:
    """The limits every command is checked against (SI units: rad, m)."""

    joint_lower_rad: tuple[float, ...] = tuple(lo for lo, _ in JOINT_LIMITS_RAD)
    joint_upper_rad: tuple[float, ...] = tuple(hi for _, hi in JOINT_LIMITS_RAD)
    workspace_min_m: tuple[float, float, float] = (-0.6, -0.6, 0.0)
    workspace_max_m: tuple[float, float, float] = (0.6, 0.6, 0.7)
    max_joint_step_rad: float = 0.2
    max_translation_step_m: float = 0.05
    max_rotation_step_rad: float = 0.2
    gripper_range_m: tuple[float, float] = GRIPPER_RANGE_M
    speed_percent: int = 50
    sdk_joint_limits: tuple[tuple[float, float], ...] = field(default=JOINT_LIMITS_RAD, repr=False)

    def validate(self) -> None:
        """ValueError naming the first inconsistent limit (joint limits may narrow the SDK's table, never widen it)."""
        if len(self.joint_lower_rad) != JOINT_COUNT or len(self.joint_upper_rad) != JOINT_COUNT:
            raise ValueError(f"joint limits need {JOINT_COUNT} values each")
        for i, (lo, hi) in enumerate(zip(self.joint_lower_rad, self.joint_upper_rad, strict=True)):
            sdk_lo, sdk_hi = self.sdk_joint_limits[i]
            if not (math.isfinite(lo) and math.isfinite(hi)) or lo >= hi:
                raise ValueError(f"joint{i + 1}: lower {lo} must be finite and below upper {hi}")
            if lo < sdk_lo or hi > sdk_hi:
                raise ValueError(f"joint{i + 1}: [{lo}, {hi}] reaches beyond the SDK's limits [{sdk_lo}, {sdk_hi}]")
        if len(self.workspace_min_m) != 3 or len(self.workspace_max_m) != 3:
            raise ValueError("the workspace box needs 3 values per corner")
        for axis, lo, hi in zip("xyz", self.workspace_min_m, self.workspace_max_m, strict=True):
            if not (math.isfinite(lo) and math.isfinite(hi)) or lo >= hi:
                raise ValueError(f"workspace {axis}: min {lo} must be finite and below max {hi}")
        for name in ("max_joint_step_rad", "max_translation_step_m", "max_rotation_step_rad"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0.0:
                raise ValueError(f"{name} {value} must be a positive number")
        lo, hi = self.gripper_range_m
        if not (math.isfinite(lo) and math.isfinite(hi)) or lo >= hi:
            raise ValueError(f"gripper range [{lo}, {hi}] must be finite and increasing")
        if lo < GRIPPER_RANGE_M[0] or hi > GRIPPER_RANGE_M[1]:
            raise ValueError(f"gripper range [{lo}, {hi}] reaches beyond the SDK's stroke {list(GRIPPER_RANGE_M)}")
        if not 1 <= self.speed_percent <= 100:
            raise ValueError(f"speed_percent {self.speed_percent} is outside 1..100")


# ---------------------------------------------------------------------------------------------- checks


def _finite(what: str, values: Sequence[float]) -> list[float]:
    out = [float(v) for v in values]
    bad = [v for v in out if not math.isfinite(v)]
    if bad:
        raise Refused("non_finite", f"{what} holds a non-finite value ({bad[0]})")
    return out


def check_gripper(width_m: float, limits: SafetyLimits) -> float:
    """A gripper opening (m) within the configured stroke; Refused otherwise."""
    (width,) = _finite("gripper opening", [width_m])
    lo, hi = limits.gripper_range_m
    if not lo <= width <= hi:
        raise Refused("gripper_range", f"gripper opening {width:.4f} m is outside [{lo}, {hi}] m")
    return width


def resolve_joint_targets(names: Sequence[str], positions: Sequence[float],
                          current: Optional[Sequence[float]]) -> tuple[Optional[list[float]], Optional[float]]:
    """Joint targets from a JointState-like command: (six joint targets or None, gripper target or None).

    Joints are given by name (joint1..joint6, gripper); a joint the command leaves out keeps its measured angle.
    With no names, the positions are joint1..joint6 in order, optionally followed by the gripper. Joint targets
    are None when the command names the gripper only.
    """
    names = list(names)
    positions = list(positions)
    if not names:
        if len(positions) not in (JOINT_COUNT, JOINT_COUNT + 1):
            raise Refused("malformed", f"an unnamed joint command needs {JOINT_COUNT} or {JOINT_COUNT + 1} positions, "
                                       f"got {len(positions)}")
        names = list(JOINT_NAMES) + ([GRIPPER_NAME] if len(positions) > JOINT_COUNT else [])
    if len(names) != len(positions):
        raise Refused("malformed", f"{len(names)} joint names for {len(positions)} positions")
    if len(set(names)) != len(names):
        raise Refused("malformed", "a joint is named twice")
    unknown = [n for n in names if n not in JOINT_NAMES and n != GRIPPER_NAME]
    if unknown:
        raise Refused("unknown_joint", f"unknown joint '{str(unknown[0])[:48]}' (expected joint1..joint6, gripper)")
    given = dict(zip(names, _finite("joint command", positions), strict=True))
    gripper = given.pop(GRIPPER_NAME, None)
    if not given:
        return None, gripper
    if current is None:
        raise Refused("no_feedback", "no measured joint angles to check the command against")
    return [given.get(name, current[i]) for i, name in enumerate(JOINT_NAMES)], gripper


def check_joints(target: Sequence[float], current: Optional[Sequence[float]], limits: SafetyLimits) -> list[float]:
    """Six joint targets (rad) within the joint limits and at most one step from the measured angles."""
    if len(target) != JOINT_COUNT:
        raise Refused("malformed", f"expected {JOINT_COUNT} joint targets, got {len(target)}")
    target = _finite("joint command", target)
    for i, value in enumerate(target):
        lo, hi = limits.joint_lower_rad[i], limits.joint_upper_rad[i]
        if not lo <= value <= hi:
            raise Refused("joint_limit", f"joint{i + 1} target {value:.4f} rad is outside [{lo}, {hi}] rad")
    if current is None:
        raise Refused("no_feedback", "no measured joint angles to check the command against")
    for i, (value, now) in enumerate(zip(target, current, strict=True)):
        if abs(value - now) > limits.max_joint_step_rad:
            raise Refused("joint_step", f"joint{i + 1} target {value:.4f} rad is {abs(value - now):.4f} rad from its "
                                        f"measured {now:.4f} rad (at most {limits.max_joint_step_rad})")
    return target


def check_ee_delta(current_pose: Optional[Sequence[float]], translation: Sequence[float], rotation: Sequence[float],
                   limits: SafetyLimits) -> list[float]:
    """The end pose (x, y, z m, roll, pitch, yaw rad) an end-effector delta leads to, checked.

    The delta must be finite, within one step (translation norm, rotation angle), and its target position inside
    the workspace box.
    """
    translation = _finite("end-effector translation", translation)
    rotation = _finite("end-effector rotation", rotation)
    if len(translation) != 3 or len(rotation) != 3:
        raise Refused("malformed", "an end-effector delta needs 3 translation and 3 rotation values")
    length = math.sqrt(sum(v * v for v in translation))
    if length > limits.max_translation_step_m:
        raise Refused("translation_step", f"translation {length:.4f} m is longer than one step "
                                          f"({limits.max_translation_step_m} m)")
    angle = rotation_angle(rpy_to_matrix(*rotation))
    if angle > limits.max_rotation_step_rad:
        raise Refused("rotation_step", f"rotation {angle:.4f} rad is more than one step "
                                       f"({limits.max_rotation_step_rad} rad)")
    if current_pose is None:
        raise Refused("no_feedback", "no measured end pose to apply the delta to")
    target = apply_ee_delta(current_pose, translation, rotation)
    check_workspace(target[:3], limits)
    return target


def check_frame(frame_id: str, expected: str) -> None:
    """Refused('frame') unless `frame_id` is empty (meaning the arm's frame) or `expected`."""
    if frame_id and frame_id != expected:
        raise Refused("frame", f"delta in frame '{frame_id[:48]}', expected '{expected}'")


def check_workspace(position: Sequence[float], limits: SafetyLimits) -> None:
    """Refused('workspace') unless the position (m, base_link) lies inside the workspace box."""
    for axis, value, lo, hi in zip("xyz", position, limits.workspace_min_m, limits.workspace_max_m, strict=True):
        if not lo <= value <= hi:
            raise Refused("workspace", f"target {axis} = {value:.4f} m is outside the workspace [{lo}, {hi}] m")


# ---------------------------------------------------------------------------------------------- geometry


def rpy_to_matrix(roll: float, pitch: float, yaw: float) -> Matrix:
    """Rotation matrix of fixed-axis roll, pitch, yaw (R = Rz(yaw) Ry(pitch) Rx(roll))."""
    cr, sr = math.cos(roll), math.sin(roll)
    cp, sp = math.cos(pitch), math.sin(pitch)
    cy, sy = math.cos(yaw), math.sin(yaw)
    return ((cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr),
            (sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr),
            (-sp, cp * sr, cp * cr))


def matrix_to_rpy(m: Matrix) -> tuple[float, float, float]:
    """Fixed-axis roll, pitch, yaw of a rotation matrix (pitch in [-pi/2, pi/2])."""
    pitch = math.atan2(-m[2][0], math.hypot(m[0][0], m[1][0]))
    if math.hypot(m[0][0], m[1][0]) < 1e-9:  # gimbal lock: yaw and roll share one axis, put it all in roll
        return math.atan2(-m[1][2], m[1][1]), pitch, 0.0
    return math.atan2(m[2][1], m[2][2]), pitch, math.atan2(m[1][0], m[0][0])


def matmul(a: Matrix, b: Matrix) -> Matrix:
    """The product of two 3x3 matrices."""
    return tuple(tuple(sum(a[i][k] * b[k][j] for k in range(3)) for j in range(3)) for i in range(3))  # type: ignore


def rotation_angle(m: Matrix) -> float:
    """The angle (rad, 0..pi) of a rotation matrix."""
    cos = (m[0][0] + m[1][1] + m[2][2] - 1.0) / 2.0
    return math.acos(max(-1.0, min(1.0, cos)))


def apply_ee_delta(pose: Sequence[float], translation: Sequence[float], rotation: Sequence[float]) -> list[float]:
    """End pose (x, y, z, roll, pitch, yaw) moved by a translation (m, base frame) and a rotation (rpy, base frame)."""
    rotated = matmul(rpy_to_matrix(*rotation), rpy_to_matrix(*pose[3:6]))
    return [pose[0] + translation[0], pose[1] + translation[1], pose[2] + translation[2], *matrix_to_rpy(rotated)]


def rpy_to_quaternion(roll: float, pitch: float, yaw: float) -> tuple[float, float, float, float]:
    """Quaternion (x, y, z, w) of fixed-axis roll, pitch, yaw."""
    cr, sr = math.cos(roll / 2), math.sin(roll / 2)
    cp, sp = math.cos(pitch / 2), math.sin(pitch / 2)
    cy, sy = math.cos(yaw / 2), math.sin(yaw / 2)
    return (sr * cp * cy - cr * sp * sy, cr * sp * cy + sr * cp * sy, cr * cp * sy - sr * sp * cy,
            cr * cp * cy + sr * sp * sy)


# ---------------------------------------------------------------------------------------------- timing


class CommandWatchdog:
    """Notices when commands stop arriving: `expired(now)` is True once per lapse of `timeout_s` without a command."""

    def __init__(self, timeout_s: float) -> None:
        if not timeout_s > 0.0:
            raise ValueError(f"timeout_s {timeout_s} must be positive")
        self.timeout_s = timeout_s
        self.last: Optional[float] = None
        self.lapses = 0

    def feed(self, now: float) -> None:
        """A command was accepted at `now` (steady seconds)."""
        self.last = now

    def commanding(self, now: float) -> bool:
        """Commands are arriving: the latest is younger than the timeout."""
        return self.last is not None and now - self.last < self.timeout_s

    def expired(self, now: float) -> bool:
        """True exactly once when the latest command becomes older than the timeout (the time to hold)."""
        if self.last is None or now - self.last < self.timeout_s:
            return False
        self.last = None
        self.lapses += 1
        return True

    def reset(self) -> None:
        """Forget the latest command (nothing to hold after a stop or a fault)."""
        self.last = None


@dataclass
class CommandGate:
    """Whether commands may reach the arm now: active, not stopped by an operator, no fault.

    `refusal()` is the Refused to raise (reason inactive / stopped / fault) or None when commands may pass.
    """

    active: bool = False
    stopped: bool = False
    faults: tuple[str, ...] = ()

    def refusal(self) -> Optional[Refused]:
        """Why commands are refused now, or None."""
        if not self.active:
            return Refused("inactive", "the arm is not active (lifecycle)")
        if self.stopped:
            return Refused("stopped", "emergency stop: commands are refused until ~/resume")
        if self.faults:
            return Refused("fault", f"arm fault: {', '.join(self.faults)}")
        return None

    def check(self) -> None:
        """Raise the current refusal, if any."""
        refusal = self.refusal()
        if refusal is not None:
            raise refusal


class LatestCommands:
    """A newest-only mailbox per command input, and the count of every command it never ran.

    `put` stores a command taken from an input, replacing (and counting as `dropped.<input>.superseded`) one of
    that input not yet run; `pop` hands out the waiting commands, oldest put first. A command's publisher and
    sequence number, when the transport gives them, reveal the commands never taken at all: a jump from n to n + k
    counts k - 1 as `lost.<input>.sequence_gap` (the first command seen from a publisher only starts its count).
    Thread-safe.
    """

    MAX_PUBLISHERS = 64
    """Publishers remembered per input (the least recent is forgotten; a forgotten one starts its count again)."""

    def __init__(self, inputs: Sequence[str]) -> None:
        self.inputs = tuple(inputs)
        self.counts = Counters(n for name in self.inputs
                               for n in (f"taken.{name}", f"dropped.{name}.superseded", f"lost.{name}.sequence_gap"))
        self._waiting: OrderedDict[str, Any] = OrderedDict()
        self._gaps = {name: SequenceGaps(self.MAX_PUBLISHERS) for name in self.inputs}
        self._lock = threading.Lock()

    def put(self, name: str, command: Any, publisher: Optional[Hashable] = None,
            sequence: Optional[int] = None) -> None:
        """A command taken from input `name` (KeyError for an unknown input)."""
        with self._lock:
            self.counts[f"taken.{name}"] += 1
            if publisher is not None and sequence is not None:
                self.counts[f"lost.{name}.sequence_gap"] += self._gaps[name].observe(publisher, sequence)
            if self._waiting.pop(name, None) is not None:
                self.counts[f"dropped.{name}.superseded"] += 1
            self._waiting[name] = command

    def pop(self) -> Optional[tuple[str, Any]]:
        """The oldest waiting (input, command), or None when nothing waits."""
        with self._lock:
            return self._waiting.popitem(last=False) if self._waiting else None

    def pending(self) -> bool:
        """Whether a command waits."""
        with self._lock:
            return bool(self._waiting)

    def dropped(self) -> int:
        """Commands never run: superseded and lost, every input."""
        with self._lock:
            return sum(v for k, v in self.counts.items() if k.startswith(("dropped.", "lost.")))

    def lost(self) -> int:
        """Commands never taken (sequence gaps), every input."""
        return sum(self.counts[f"lost.{name}.sequence_gap"] for name in self.inputs)

    def health(self) -> Health:
        """Taken, superseded and lost commands per input (the node reports new losses as a warning)."""
        with self._lock:
            return self.counts.health()
