"""A CAN-level twin of the AgileX PiPER arm: a peer on a python-can bus that answers the frames piper_sdk 0.6.2
sends the way the arm does, so the real SDK (and the arm node) runs against it unmodified.

`PiperArmModel` is the arm, pure and single-threaded (`handle` command frames, `advance`, `feedback` frames);
`PiperTwin` puts a model on a bus, one thread. What is and is not modelled, the frames and the faults:
docs/piper_twin.md.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Optional

import can
import numpy as np

from brace_common.config import ConfigError, check_fields, param
from brace_common.counters import Counters, Health

from . import piper_frames as pf
from . import piper_units as units
from .piper_kinematics import PiperKinematics

log = logging.getLogger(__name__)

JOINTS = 6
GRIPPER_MOTOR = 7
REACHED_TOLERANCE_RAD = 1e-4
"""A joint this close to its target counts as arrived (motion status 'reached')."""
INTERFACE_LOCAL_PREFIX = "ff01:"
"""IPv6 interface-local multicast scope: groups whose datagrams never leave the host."""


@dataclass
class TwinConfig:
    """How the twin arm behaves (every field is also a parameter of the piper_twin node)."""

    feedback_period_s: float = param(0.005, "seconds between feedback cycles (status, joints, end pose, gripper, "
                                     "high-speed info; the real arm: 200 Hz)", 0.001, 1.0)
    low_speed_every: int = param(10, "low-speed driver info (enable state, voltage, temperature) every n-th cycle",
                                 1, 1000)
    max_joint_speed: list[float] = param([2.0, 2.0, 2.0, 3.0, 3.0, 3.0],
                                         "joint 1-6 speed (rad/s) at 100 % speed; scaled by motion control 2's speed %")
    max_joint_acc: list[float] = param([5.0, 5.0, 5.0, 5.0, 5.0, 5.0],
                                       "joint 1-6 max acceleration (rad/s^2) the twin reports (0x47C); not simulated")
    gripper_speed: float = param(0.05, "gripper opening/closing speed (m/s)", 1e-4, 1.0)
    gripper_max_width: float = param(0.07, "gripper stroke (m); targets are clamped to [0, this]", 1e-3, 0.2)
    gripper_effort_rise_s: float = param(0.1, "time constant (s) of the grip effort rising on an object", 1e-3, 5.0)
    initial_joints: list[float] = param([0.0] * 6, "joint 1-6 angles (rad) at start, inside the SDK's limits")
    initial_gripper: float = param(0.0, "gripper width (m) at start", 0.0, 0.2)
    initially_enabled: bool = param(False, "motors enabled at start (the real arm powers up disabled)")
    dh_offset: bool = param(True, "the DH table with the 2-degree joint 2/3 offset (the SDK's dh_is_offset=1)")
    feedback_noise_rad: float = param(0.0, "standard deviation (rad) of noise on the joint feedback", 0.0, 0.1)
    seed: int = param(0, "seed of the feedback noise", 0, 2**31 - 1)
    firmware: str = param("S-V1.8-1", "firmware text answered to 0x4AF (the SDK reads 8 characters from 'S-V')")
    supply_voltage: float = param(24.0, "driver supply voltage (V) in the low-speed info", 0.0, 60.0)
    driver_temp_c: int = param(35, "driver temperature (deg C) in the low-speed info", -40, 150)
    motor_temp_c: int = param(30, "motor temperature (deg C) in the low-speed info", -40, 127)
    holding_current: float = param(0.3, "motor current (A) of an enabled motor at rest", 0.0, 10.0)
    current_per_speed: float = param(0.5, "extra motor current (A) per rad/s of joint speed", 0.0, 10.0)
    ik_max_iterations: int = param(150, "bound on the damped-least-squares iterations of one end-pose target", 1, 2000)

    def validate(self) -> None:
        """ConfigError naming the first invalid field."""
        check_fields(self)
        for name in ("max_joint_speed", "max_joint_acc", "initial_joints"):
            values = getattr(self, name)
            if len(values) != JOINTS or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
                raise ConfigError(name, f"{list(values)}: expected {JOINTS} finite numbers")
        for name in ("max_joint_speed", "max_joint_acc"):
            if not all(0.0 < v <= 30.0 for v in getattr(self, name)):
                raise ConfigError(name, f"{list(getattr(self, name))}: each must be in (0, 30]")
        for j, (value, (lo, hi)) in enumerate(zip(self.initial_joints, units.JOINT_LIMITS_RAD, strict=True)):
            if not lo <= value <= hi:
                raise ConfigError("initial_joints", f"joint {j + 1} = {value} is outside its limits [{lo}, {hi}]")
        if self.initial_gripper > self.gripper_max_width:
            raise ConfigError("initial_gripper", f"{self.initial_gripper} is wider than gripper_max_width")
        if not self.firmware.isascii() or not 0 < len(self.firmware) <= 64 or self.firmware.startswith("\x01"):
            raise ConfigError("firmware", "must be 1-64 ASCII characters (not starting with 0x01)")


@dataclass(frozen=True)
class TwinState:
    """A snapshot of the twin arm (SI units: rad, rad/s, m, N·m)."""

    joints_rad: tuple[float, ...]
    joint_velocity: tuple[float, ...]
    gripper_m: float
    gripper_effort: float
    enabled: bool
    ctrl_mode: int
    move_mode: int
    arm_status: int
    collision: bool
    over_limit: tuple[bool, ...]
    end_pose: tuple[float, ...]
    motor_enabled: tuple[bool, ...] = (False,) * 7
    speed_pct: int = 0
    emergency_stop: bool = False
    motion_reached: bool = True
    gripper_target_m: float = 0.0
    gripper_blocked: bool = False
    silent: bool = False


class PiperArmModel:
    """The arm behind the twin: takes command frames, moves, reports feedback frames. Not thread-safe."""

    def __init__(self, config: TwinConfig) -> None:
        config.validate()
        self.config = config
        self.kinematics = PiperKinematics(config.dh_offset)
        self.q = np.array(config.initial_joints, dtype=float)
        self.qdot = np.zeros(JOINTS)
        self.target: Optional[np.ndarray] = None  # None: hold where the joints are
        self.motor_enabled = [config.initially_enabled] * GRIPPER_MOTOR  # joints 1-6, gripper
        self.ctrl_mode = pf.CTRL_MODE_STANDBY
        self.move_mode = pf.MOVE_P
        self.speed_pct = 0
        self.estop = False
        self.collision = False
        self.over_limit_joint: Optional[int] = None
        self.refusing_enable = False
        self.limit_refused = False  # the last joint target was outside the joint limits
        self.joint_parts = [units.joint_to_sdk(v) for v in self.q]  # joint target as its frames left it (SDK units)
        self.no_solution = False
        self.pose_parts = [0] * 6  # end-pose target as the three frames left it (SDK units)
        self.last_pose_target: Optional[tuple[int, ...]] = None
        self.gripper = float(config.initial_gripper)
        self.gripper_target = self.gripper
        self.gripper_cmd_effort = 0.0
        self.gripper_effort = 0.0
        self.gripper_blocked = False
        self.rng = random.Random(config.seed)
        self.counts = Counters(("commands", "malformed", "refused_enable", "refused_limit", "no_solution", "ignored"),
                               warn=("malformed",))
        self._lo = np.array([lo for lo, _ in units.JOINT_LIMITS_RAD])
        self._hi = np.array([hi for _, hi in units.JOINT_LIMITS_RAD])

    # ---- faults ------------------------------------------------------------------------------------------------
    def set_collision(self, on: bool) -> None:
        """Collision detected (arm status 0x07): motion stops and holds until cleared."""
        self.collision = bool(on)
        self._hold(gripper=True)

    def set_over_limit(self, joint: Optional[int]) -> None:
        """Joint `joint` (1-6) is over its angle limit (error-code bit); None clears it."""
        if joint is not None and not 1 <= joint <= JOINTS:
            raise ValueError(f"over-limit joint {joint} is not 1-6 (None clears)")
        self.over_limit_joint = joint

    def refuse_enable(self, refuse: bool) -> None:
        """Ignore enable commands (0x471 and the gripper's enable code) while set: the motors stay as they are."""
        self.refusing_enable = bool(refuse)

    # ---- commands ----------------------------------------------------------------------------------------------
    def handle(self, can_id: int, data: bytes) -> list[pf.Frame]:
        """Apply one received frame; the frames the arm answers with (queries), usually none."""
        try:
            cmd = pf.unpack_command(can_id, data)
        except pf.FrameError:
            self.counts["malformed"] += 1
            return []
        if cmd is None:
            return []  # not for the arm (our own feedback echoed back, other devices)
        self.counts["commands"] += 1
        if isinstance(cmd, pf.MotionCtrl1):
            self._motion_ctrl_1(cmd)
        elif isinstance(cmd, pf.MotionCtrl2):
            self._motion_ctrl_2(cmd)
        elif isinstance(cmd, pf.MotorEnable):
            self._enable(cmd.motors(), cmd.enable_flag == pf.ENABLE_FLAG_ENABLE)
        elif isinstance(cmd, pf.PairI32) and cmd.can_id in pf.JOINT_CTRL_IDS:
            self._joint_target(cmd)
        elif isinstance(cmd, pf.PairI32):
            self._pose_part(cmd)
        elif isinstance(cmd, pf.GripperCtrl):
            self._gripper(cmd)
        elif isinstance(cmd, pf.MotorLimitQuery):
            return self._limits(cmd)
        elif isinstance(cmd, pf.FirmwareQuery) and cmd.request == 0x01:
            return pf.firmware_frames(self.config.firmware)
        return []

    def _motion_ctrl_1(self, cmd: pf.MotionCtrl1) -> None:
        if cmd.emergency_stop == pf.ESTOP_STOP:
            self.estop = True
            self._hold(gripper=True)
        elif cmd.emergency_stop == pf.ESTOP_RESUME:
            self.estop = False
            self._hold(gripper=True)

    def _motion_ctrl_2(self, cmd: pf.MotionCtrl2) -> None:
        if cmd.ctrl_mode != self.ctrl_mode or cmd.move_mode != self.move_mode:
            self._hold()
        self.ctrl_mode, self.move_mode = cmd.ctrl_mode, cmd.move_mode
        self.speed_pct = min(int(cmd.speed_pct), 100)

    def _enable(self, motors: tuple[int, ...], enable: bool) -> None:
        if not motors:
            self.counts["ignored"] += 1
            return
        if enable and self.refusing_enable:
            self.counts["refused_enable"] += 1
            return
        for motor in motors:
            if enable and not self.motor_enabled[motor - 1] and motor <= JOINTS and self.target is not None:
                self.target[motor - 1] = self.q[motor - 1]  # a newly enabled joint holds, it does not jump
            self.motor_enabled[motor - 1] = enable
        if GRIPPER_MOTOR in motors:
            self.gripper_target = self.gripper

    def _accepting_motion(self) -> bool:
        return self.ctrl_mode == pf.CTRL_MODE_CAN and not self.estop and not self.collision

    def _joint_target(self, cmd: pf.PairI32) -> None:
        first = 2 * pf.JOINT_CTRL_IDS.index(cmd.can_id)
        self.joint_parts[first:first + 2] = [cmd.first, cmd.second]
        if cmd.can_id != pf.JOINT_CTRL_56:
            return  # the SDK sends 0x155, 0x156, 0x157 in this order; the last one completes the target
        if not self._accepting_motion() or self.move_mode != pf.MOVE_J:
            self.counts["ignored"] += 1
            return
        for j, value in enumerate(self.joint_parts):
            lo, hi = units.joint_limit_millideg(j)
            if not lo <= value <= hi:
                self.limit_refused = True
                self.counts["refused_limit"] += 1
                self._hold()
                return
        self.limit_refused = self.no_solution = False
        self.last_pose_target = None
        self.target = np.array(units.joints_from_sdk(self.joint_parts))
        self.target[~np.array(self.motor_enabled[:JOINTS])] = self.q[~np.array(self.motor_enabled[:JOINTS])]

    def _pose_part(self, cmd: pf.PairI32) -> None:
        first = 2 * pf.END_POSE_CTRL_IDS.index(cmd.can_id)
        self.pose_parts[first:first + 2] = [cmd.first, cmd.second]
        if cmd.can_id != pf.END_POSE_CTRL_RYRZ:
            return  # the SDK sends X/Y, Z/RX, RY/RZ in this order; the last one completes the target
        if not self._accepting_motion() or self.move_mode not in (pf.MOVE_P, pf.MOVE_L):
            self.counts["ignored"] += 1
            return
        parts = tuple(self.pose_parts)
        if parts == self.last_pose_target:
            return  # the same target again: on its way there, or refused already (the IK would answer the same)
        pose = units.pose_from_sdk(parts)
        result = self.kinematics.inverse(pose, self.q, units.JOINT_LIMITS_RAD,
                                         max_iterations=self.config.ik_max_iterations)
        if not result.converged:
            self._hold()
            self.no_solution = True
            self.counts["no_solution"] += 1
        else:
            self.no_solution = self.limit_refused = False
            self.target = np.array(result.joints)
        self.last_pose_target = parts

    def place(self, joints: Sequence[float], gripper_m: float) -> None:
        """Put the arm at `joints` (rad) with the gripper at `gripper_m` (m), holding there: a simulator's reset
        (a real arm is moved there). ValueError outside the joint limits or the gripper stroke."""
        q = np.array(joints, dtype=float)
        if q.shape != (JOINTS,) or not np.all(np.isfinite(q)) or np.any(q < self._lo) or np.any(q > self._hi):
            raise ValueError(f"joints {list(joints)} are not {JOINTS} angles inside the joint limits")
        if not 0.0 <= gripper_m <= self.config.gripper_max_width:
            raise ValueError(f"gripper width {gripper_m} is outside [0, {self.config.gripper_max_width}]")
        self.q, self.qdot = q, np.zeros(JOINTS)
        self.gripper = self.gripper_target = float(gripper_m)
        self.gripper_effort, self.gripper_blocked = 0.0, False
        self.no_solution = self.limit_refused = False
        self._hold()

    def _gripper(self, cmd: pf.GripperCtrl) -> None:
        enable = cmd.enable
        if enable and self.refusing_enable and not self.motor_enabled[GRIPPER_MOTOR - 1]:
            self.counts["refused_enable"] += 1
        else:
            self.motor_enabled[GRIPPER_MOTOR - 1] = enable
        if self.estop or self.collision:
            self.counts["ignored"] += 1
            return
        width = units.gripper_from_sdk(cmd.angle)
        self.gripper_target = units.clamp(width, 0.0, self.config.gripper_max_width)
        self.gripper_cmd_effort = units.gripper_effort_from_sdk(cmd.effort)

    def _limits(self, cmd: pf.MotorLimitQuery) -> list[pf.Frame]:
        if not 1 <= cmd.motor_num <= JOINTS:
            self.counts["ignored"] += 1
            return []
        j = cmd.motor_num - 1
        if cmd.search_content == pf.LIMIT_QUERY_ACC:
            return [pf.MotorAccFeedback(cmd.motor_num, round(self.config.max_joint_acc[j] * 1000)).pack()]
        lo, hi = units.JOINT_LIMITS_RAD[j]
        return [pf.MotorLimitFeedback(cmd.motor_num, round(math.degrees(hi) * 10), round(math.degrees(lo) * 10),
                                      round(self.config.max_joint_speed[j] * 1000)).pack()]

    def _hold(self, gripper: bool = False) -> None:
        """Stop the joints where they are (and the gripper when `gripper`); the next target starts afresh."""
        self.target = None
        self.last_pose_target = None
        if gripper:
            self.gripper_target = self.gripper

    # ---- motion ------------------------------------------------------------------------------------------------
    def advance(self, dt: float, object_width: Optional[float] = None) -> None:
        """Move `dt` seconds; `object_width` (m) is where closing fingers meet an object (None: nothing there)."""
        dt = max(0.0, float(dt))
        previous = self.q.copy()
        if self.target is not None and self._accepting_motion() and dt > 0.0:
            enabled = np.array(self.motor_enabled[:JOINTS])
            error = np.where(enabled, self.target - self.q, 0.0)
            speed = np.array(self.config.max_joint_speed) * max(self.speed_pct, 1) / 100.0
            needed = float(np.max(np.abs(error) / speed))  # seconds for the slowest joint at its top speed
            fraction = 1.0 if needed <= dt else dt / needed
            self.q = np.clip(self.q + error * fraction, self._lo, self._hi)
        self.qdot = (self.q - previous) / dt if dt > 0.0 else np.zeros(JOINTS)
        self._advance_gripper(dt, object_width)

    def _advance_gripper(self, dt: float, object_width: Optional[float]) -> None:
        blocked = False
        if self.motor_enabled[GRIPPER_MOTOR - 1] and not self.estop and not self.collision:
            step = self.config.gripper_speed * dt
            new = self.gripper + units.clamp(self.gripper_target - self.gripper, -step, step)
            if object_width is not None and self.gripper_target < object_width <= self.gripper + 1e-9:
                # closing past an object between the fingers: they stop on it
                new = max(new, object_width)
                blocked = new <= object_width + 1e-9
            self.gripper = new
        self.gripper_blocked = blocked
        goal = self.gripper_cmd_effort if blocked else 0.0
        alpha = 1.0 - math.exp(-dt / self.config.gripper_effort_rise_s) if dt > 0.0 else 0.0
        self.gripper_effort += (goal - self.gripper_effort) * alpha

    # ---- reports -----------------------------------------------------------------------------------------------
    def arm_status(self) -> int:
        """The arm-status code the 0x2A1 frame carries."""
        if self.collision:
            return pf.ARM_COLLISION
        if self.estop:
            return pf.ARM_EMERGENCY_STOP
        if self.no_solution:
            return pf.ARM_NO_SOLUTION
        if self.limit_refused:
            return pf.ARM_TARGET_EXCEEDS_LIMIT
        return pf.ARM_NORMAL

    def over_limit(self) -> tuple[bool, ...]:
        """Per joint: over its angle limit."""
        return tuple(self.over_limit_joint == j + 1 for j in range(JOINTS))

    def reached(self) -> bool:
        """Whether the joints are at their target (or holding)."""
        return self.target is None or float(np.max(np.abs(self.target - self.q))) <= REACHED_TOLERANCE_RAD

    def snapshot(self) -> TwinState:
        """The current state."""
        return TwinState(
            joints_rad=tuple(float(v) for v in self.q), joint_velocity=tuple(float(v) for v in self.qdot),
            gripper_m=self.gripper, gripper_effort=self.gripper_effort, enabled=all(self.motor_enabled[:JOINTS]),
            ctrl_mode=self.ctrl_mode, move_mode=self.move_mode, arm_status=self.arm_status(),
            collision=self.collision, over_limit=self.over_limit(),
            end_pose=tuple(float(v) for v in self.kinematics.forward_pose(self.q)),
            motor_enabled=tuple(self.motor_enabled), speed_pct=self.speed_pct, emergency_stop=self.estop,
            motion_reached=self.reached(), gripper_target_m=self.gripper_target, gripper_blocked=self.gripper_blocked)

    def feedback(self, cycle: int) -> list[pf.Frame]:
        """The frames of feedback cycle `cycle` (low-speed driver info every `low_speed_every`-th cycle)."""
        cfg = self.config
        measured = self.q
        if cfg.feedback_noise_rad > 0.0:
            measured = self.q + np.array([self.rng.gauss(0.0, cfg.feedback_noise_rad) for _ in range(JOINTS)])
        status = pf.ArmStatus(ctrl_mode=self.ctrl_mode, arm_status=self.arm_status(), mode_feed=self.move_mode,
                              motion_status=pf.MOTION_REACHED if self.reached() else pf.MOTION_NOT_REACHED,
                              err_code=pf.err_code(angle_limit=self.over_limit()))
        pose = self.kinematics.forward_pose(measured)
        frames = [status.pack(), *pf.end_pose_feedback_frames(self._sdk_pose(pose)),
                  *pf.joint_feedback_frames([units.joint_to_sdk(v) for v in measured])]
        grip_status = pf.DRIVER_STALL | (pf.DRIVER_ENABLED if self.motor_enabled[GRIPPER_MOTOR - 1] else 0)
        frames.append(pf.GripperFeedback(units.gripper_to_sdk(self.gripper), _i16(self.gripper_effort * 1000.0),
                                         grip_status).pack())
        for j in range(JOINTS):
            current = self._current(j)
            frames.append(pf.HighSpeed(j + 1, _i16(self.qdot[j] * 1000.0), _i16(current * 1000.0),
                                       round(float(measured[j]) * 1000.0)).pack())
        if cycle % cfg.low_speed_every == 0:
            for j in range(JOINTS):
                driver = (pf.DRIVER_ENABLED if self.motor_enabled[j] else 0) | (
                    pf.DRIVER_COLLISION if self.collision else 0)
                frames.append(pf.LowSpeed(j + 1, round(cfg.supply_voltage * 10), cfg.driver_temp_c, cfg.motor_temp_c,
                                          driver, min(round(self._current(j) * 1000.0), units.UINT16_MAX)).pack())
        return frames

    def _current(self, j: int) -> float:
        if not self.motor_enabled[j]:
            return 0.0
        return self.config.holding_current + self.config.current_per_speed * abs(float(self.qdot[j]))

    @staticmethod
    def _sdk_pose(pose) -> list[int]:
        x, y, z, roll, pitch, yaw = pose
        return [units.position_to_sdk(x), units.position_to_sdk(y), units.position_to_sdk(z),
                units.rad_to_millideg(roll), units.rad_to_millideg(pitch), units.rad_to_millideg(yaw)]


def _i16(value: float) -> int:
    return int(units.clamp(round(value), units.INT16_MIN, units.INT16_MAX))


class PiperTwin:
    """The twin arm on a python-can bus: a thread receives command frames and sends feedback every `feedback_period_s`.

    `can_interface` "virtual" shares the bus within one process (tests); across processes use "udp_multicast"
    with `can_port` an interface-local IPv6 group such as "ff01::74:1" (docs/piper_twin.md). `grasp(state)`
    returns the width (m) of an object the closing gripper meets, or None.
    """

    def __init__(self, can_port: str, can_interface: str = "virtual", config: Optional[TwinConfig] = None,
                 grasp: Optional[Callable[[TwinState], Optional[float]]] = None) -> None:
        if not can_port:
            raise ValueError("can_port is empty")
        self.can_port = can_port
        self.can_interface = can_interface
        self.config = config or TwinConfig()
        self.model = PiperArmModel(self.config)
        self.grasp = grasp
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._bus: Optional[can.BusABC] = None
        self._silent = False
        self.stats = Counters(("frames_sent", "frames_received", "frames_lost_silent", "send_errors", "receive_errors",
                               "grasp_errors", "late_cycles", "cycles"), warn=("send_errors", "receive_errors", "grasp_errors"))
        self.last_error = ""

    # ---- lifecycle ---------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Open the bus and start the thread (raises what python-can raises when the bus cannot be opened)."""
        if self._thread is not None:
            return
        self._bus = can.Bus(interface=self.can_interface, channel=self.can_port, receive_own_messages=False)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"piper_twin[{self.can_port}]", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (joined) and close the bus."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
        if self._bus is not None:
            self._bus.shutdown()
            self._bus = None

    def __enter__(self) -> PiperTwin:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        """Whether the thread runs."""
        return self._thread is not None and self._thread.is_alive()

    # ---- state and faults --------------------------------------------------------------------------------------
    def state(self) -> TwinState:
        """A snapshot of the arm."""
        with self._lock:
            snapshot = self.model.snapshot()
        return _with_silent(snapshot, self._silent)

    def counts(self) -> dict[str, int]:
        """Bus and command counters (frames sent/received, malformed, refused, ...)."""
        with self._lock:
            return {**self.stats, **self.model.counts}

    def health(self) -> Health:
        """The arm's state and the counters; malformed frames and bus or grasp errors are warnings."""
        state = self.state()
        values = {"joints_rad": [round(v, 4) for v in state.joints_rad], "gripper_m": round(state.gripper_m, 5),
                  "gripper_effort_nm": round(state.gripper_effort, 3), "enabled": state.enabled,
                  "motor_enabled": list(state.motor_enabled), "ctrl_mode": state.ctrl_mode,
                  "move_mode": state.move_mode, "speed_pct": state.speed_pct, "arm_status": state.arm_status,
                  "emergency_stop": state.emergency_stop, "end_pose": [round(v, 4) for v in state.end_pose]}
        with self._lock:
            return Health(values) + self.model.counts.health() + self.stats.health()

    def place(self, joints: Sequence[float], gripper_m: float) -> None:
        """Put the arm at `joints` (rad), the gripper at `gripper_m` (m), holding: the scene's reset between
        episodes (see PiperArmModel.place)."""
        with self._lock:
            self.model.place(joints, gripper_m)

    def set_silent(self, silent: bool) -> None:
        """Bus silence: no feedback frames while set, and frames sent to the arm are lost (a cut cable)."""
        self._silent = bool(silent)

    def set_collision(self, on: bool) -> None:
        """Collision in the arm-status frame; motion stops and holds while set."""
        with self._lock:
            self.model.set_collision(on)

    def set_over_limit(self, joint: Optional[int]) -> None:
        """Joint `joint` (1-6, as the SDK numbers them) over its angle limit in the status bits; None clears."""
        with self._lock:
            self.model.set_over_limit(joint)

    def refuse_enable(self, refuse: bool) -> None:
        """Enable frames are ignored while set (motors stay disabled)."""
        with self._lock:
            self.model.refuse_enable(refuse)

    # ---- the thread --------------------------------------------------------------------------------------------
    def _run(self) -> None:
        period = self.config.feedback_period_s
        last = time.monotonic()
        next_tick = last
        cycle = 0
        while not self._stop.is_set():
            wait = next_tick - time.monotonic()
            if wait > 0.0:
                self._receive(min(wait, 0.05))
                continue
            now = time.monotonic()
            self._cycle(now - last, cycle)
            last = now
            cycle += 1
            next_tick += period
            if next_tick < now - period:  # fell behind (a loaded machine): skip, do not burst
                self.stats["late_cycles"] += 1
                next_tick = now + period

    def _receive(self, timeout: float) -> None:
        try:
            msg = self._bus.recv(timeout=timeout)
        except (can.CanError, OSError, ValueError) as exc:
            self.stats["receive_errors"] += 1
            self.last_error = f"receive: {exc}"
            self._stop.wait(timeout)
            return
        if msg is None or msg.is_error_frame or msg.is_remote_frame:
            return
        if self._silent:
            self.stats["frames_lost_silent"] += 1
            return
        self.stats["frames_received"] += 1
        with self._lock:
            replies = self.model.handle(msg.arbitration_id, bytes(msg.data))
        self._send(replies)

    def _cycle(self, dt: float, cycle: int) -> None:
        width = None
        if self.grasp is not None:
            with self._lock:
                snapshot = self.model.snapshot()
            try:
                width = self.grasp(snapshot)
                if width is not None and not (math.isfinite(width) and width >= 0.0):
                    raise ValueError(f"grasp returned {width!r}")
            except Exception as exc:  # noqa: BLE001 - a faulty callback must not stop the arm
                if not self.stats["grasp_errors"]:
                    log.error("grasp callback failed (treated as no object; logged once): %s", exc)
                self.stats["grasp_errors"] += 1
                self.last_error = f"grasp: {exc}"
                width = None
        with self._lock:
            self.model.advance(min(dt, 0.1), width)
            frames = [] if self._silent else self.model.feedback(cycle)
        self.stats["cycles"] += 1
        self._send(frames)

    def _send(self, frames: list[pf.Frame]) -> None:
        for can_id, data in frames:
            try:
                self._bus.send(can.Message(arbitration_id=can_id, data=data, is_extended_id=False))
                self.stats["frames_sent"] += 1
            except (can.CanError, OSError) as exc:
                if not self.stats["send_errors"]:
                    log.error("sending a frame failed (counted from now on): %s", exc)
                self.stats["send_errors"] += 1
                self.last_error = f"send: {exc}"


def _with_silent(state: TwinState, silent: bool) -> TwinState:
    return replace(state, silent=silent)


def is_interface_local_group(channel: str) -> bool:
    """Whether `channel` is an IPv6 interface-local multicast group (ff01::/16), which never leaves the host."""
    return channel.lower().startswith(INTERFACE_LOCAL_PREFIX)
