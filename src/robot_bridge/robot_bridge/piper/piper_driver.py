"""ROS-free driver of one AgileX PiPER arm over piper_sdk 0.6.2 (`C_PiperInterface_V2`), in SI units.

It only translates (SI values to the SDK's units, the SDK's feedback into a `Feedback` snapshot with codes by
name) and checks nothing: arm_safety does. It never disables or resets the arm. The SDK behaviour it works with
(one instance per CAN name, the unopened bus, `isOk()` and echoed frames) is in docs/piper_arm.md.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Optional

from brace_common.counters import Counters, Health

from . import piper_frames as pf
from . import piper_units as units
from .arm_safety import apply_ee_delta

READER_EXIT_S = 1.2
"""How long a reconnection waits after DisconnectPort: the SDK's reader receives with a 1 s timeout."""
SILENCE_S = 0.25
"""Default bound on the age of the arm's latest own feedback frame before the driver calls the bus silent."""

ARM_FEEDBACK_IDS: frozenset[int] = frozenset({pf.ARM_STATUS, *pf.END_POSE_FB_IDS, *pf.JOINT_FB_IDS, pf.GRIPPER_FB})
"""Frames only the arm sends, every cycle (status, end pose, joints, gripper): the only proof that it is alive."""
HOST_COMMAND_IDS: frozenset[int] = frozenset({
    pf.MOTION_CTRL_1, pf.MOTION_CTRL_2, *pf.END_POSE_CTRL_IDS, *pf.JOINT_CTRL_IDS, pf.GRIPPER_CTRL, pf.MOTOR_ENABLE,
    pf.MOTOR_LIMIT_QUERY, pf.FIRMWARE})
"""Frames the host sends (the firmware answer shares its ID with the query): seen on the reader they are echoes."""


class DriverError(RuntimeError):
    """A CAN or arm operation that did not succeed (the bus did not open, the motors did not enable...)."""


class Severity(IntEnum):
    """How bad a reported state is for the diagnostics level."""

    OK = 0
    WARN = 1
    ERROR = 2


class CtrlMode(IntEnum):
    """Control mode of MotionCtrl_2 (0x151) and of the arm-status feedback (0x2A1)."""

    STANDBY = 0x00
    CAN = 0x01
    TEACH = 0x02
    ETHERNET = 0x03
    WIFI = 0x04
    REMOTE = 0x05
    LINKAGE_TEACH = 0x06
    OFFLINE_TRAJECTORY = 0x07


class MoveMode(IntEnum):
    """Move mode of MotionCtrl_2: P = end pose (the arm plans), J = joints, L = linear, C = circular, M = MIT."""

    P = 0x00
    J = 0x01
    L = 0x02
    C = 0x03
    M = 0x04
    CPV = 0x05


EMERGENCY_STOP = 0x01
"""MotionCtrl_1 emergency_stop: quick stop, the arm descends slowly (damped)."""
RESUME = 0x02
"""MotionCtrl_1 emergency_stop: resume (the same frame as ResetPiper: the SDK says the arm loses power and falls)."""
ALL_MOTORS = 7
"""EnableArm motor number meaning every motor."""
POSITION_VELOCITY = 0x00
"""MotionCtrl_2 is_mit_mode: position-velocity control (not MIT)."""
GRIPPER_ENABLE = 0x01
"""GripperCtrl gripper_code: gripper enabled (the command moves it)."""

# ---------------------------------------------------------------------------------------------- the code tables

ARM_STATUS: dict[int, tuple[str, Severity]] = {
    0x00: ("normal", Severity.OK),
    0x01: ("emergency_stop", Severity.ERROR),
    0x02: ("no_solution", Severity.WARN),
    0x03: ("singularity", Severity.WARN),
    0x04: ("target_beyond_limit", Severity.WARN),
    0x05: ("joint_communication_error", Severity.ERROR),
    0x06: ("joint_brake_not_released", Severity.ERROR),
    0x07: ("collision", Severity.ERROR),
    0x08: ("teach_drag_overspeed", Severity.ERROR),
    0x09: ("joint_status_error", Severity.ERROR),
    0x0A: ("other_error", Severity.ERROR),
    0x0B: ("teach_recording", Severity.WARN),
    0x0C: ("teach_executing", Severity.WARN),
    0x0D: ("teach_paused", Severity.WARN),
    0x0E: ("controller_over_temperature", Severity.ERROR),
    0x0F: ("resistor_over_temperature", Severity.ERROR),
}
"""Arm status byte of the status feedback (0x2A1): name and severity. A warning means the arm refused a target
(no solution, singularity, beyond a limit) or is in a teach mode; an error means it cannot be commanded."""

ERROR_BITS: dict[int, str] = {
    **{bit: f"joint{bit + 1}_communication_error" for bit in range(6)},
    **{bit + 8: f"joint{bit + 1}_angle_limit" for bit in range(6)},
}
"""Bits of the status feedback's 16-bit error code (as piper_sdk assembles it): every one is an error."""

MOTOR_FAULT_BITS: dict[int, str] = {
    0: "low_voltage",
    1: "motor_over_temperature",
    2: "driver_overcurrent",
    3: "driver_over_temperature",
    4: "collision_protection",
    5: "driver_error",
    7: "stall_protection",
}
"""Fault bits of a motor driver's status in the low-speed feedback (bit 6 is the enable state, not a fault)."""
MOTOR_ENABLED_BIT = 6

CTRL_MODE_NAMES = {m.value: m.name.lower() for m in CtrlMode}
MOVE_MODE_NAMES = {m.value: f"move_{m.name.lower()}" for m in MoveMode}


def arm_status_name(code: int) -> str:
    """The name of an arm status byte ('unknown_0xNN' for a code the table lacks)."""
    return ARM_STATUS.get(int(code), (f"unknown_0x{int(code):02x}", Severity.ERROR))[0]


def arm_status_severity(code: int) -> Severity:
    """The severity of an arm status byte (unknown codes are errors)."""
    return ARM_STATUS.get(int(code), ("", Severity.ERROR))[1]


def error_names(err_code: int) -> list[str]:
    """The names of the bits set in the status feedback's error code (unnamed bits as 'error_bit_N')."""
    return [ERROR_BITS.get(bit, f"error_bit_{bit}") for bit in range(16) if err_code & (1 << bit)]


def motor_fault_names(joint: int, status: int) -> list[str]:
    """The fault names of motor `joint` (1-based) from its driver status byte."""
    return [f"joint{joint}_{name}" for bit, name in MOTOR_FAULT_BITS.items() if status & (1 << bit)]


@dataclass(frozen=True)
class Feedback:
    """One snapshot of what the arm reports, in SI units (rad, m, N·m)."""

    joints_rad: tuple[float, ...]
    gripper_m: float
    joint_effort_nm: tuple[float, ...]
    gripper_effort_nm: float
    end_pose: tuple[float, ...]          # x, y, z (m), roll, pitch, yaw (rad), base_link
    arm_status: int
    ctrl_mode: int
    move_mode: int
    err_code: int
    motor_faults: tuple[str, ...]
    motors_enabled: tuple[bool, ...]
    received: bool                       # joint feedback has arrived since the SDK instance exists
    can_ok: bool                         # connected and the arm's own feedback is younger than the silence bound
    feedback_age_s: float = math.inf     # age of the arm's latest own feedback frame (inf: none since connect)
    joints_age_s: float = math.inf       # age of the latest joint feedback frame (what joint_states are stamped by)
    alive_s: float = 0.0                 # how long the arm's feedback has arrived without a silent gap (0: silent)
    joint_frames: int = 0                # joint feedback frames received (a new one: fresh joints to publish)

    @property
    def arm_status_name(self) -> str:
        """The arm status by name."""
        return arm_status_name(self.arm_status)

    @property
    def ctrl_mode_name(self) -> str:
        """The control mode by name."""
        return CTRL_MODE_NAMES.get(self.ctrl_mode, f"unknown_0x{self.ctrl_mode:02x}")

    @property
    def move_mode_name(self) -> str:
        """The move mode by name."""
        return MOVE_MODE_NAMES.get(self.move_mode, f"unknown_0x{self.move_mode:02x}")

    @property
    def errors(self) -> list[str]:
        """Names of the error-code bits set."""
        return error_names(self.err_code)

    @property
    def enabled(self) -> bool:
        """All six motors report enabled."""
        return len(self.motors_enabled) == units.JOINT_COUNT and all(self.motors_enabled)

    @property
    def faults(self) -> list[str]:
        """Everything the arm reports that forbids commanding it: an error status, error bits, motor faults."""
        faults = [self.arm_status_name] if arm_status_severity(self.arm_status) == Severity.ERROR else []
        return faults + self.errors + list(self.motor_faults)

    @property
    def warnings(self) -> list[str]:
        """Reported states worth a warning (a refused target, a teach mode)."""
        return [self.arm_status_name] if arm_status_severity(self.arm_status) == Severity.WARN else []


@dataclass(frozen=True)
class Liveness:
    """What the frames on the bus say about the arm at one instant (steady seconds)."""

    feedback_age_s: float
    joints_age_s: float
    alive_s: float
    joint_frames: int


class FrameMonitor:
    """Sorts every frame the SDK's reader receives by who sent it and times the arm's own feedback.

    Only a frame with an ID in ARM_FEEDBACK_IDS, received from the bus (`is_rx`), proves the arm alive: the host's
    command IDs coming back (an echo: the SDK's own two buses, multicast loopback, an echoing adapter) and other IDs
    are counted, never timed. `alive_s` is how long feedback has arrived with no gap longer than `silence_s`, so a
    single stray frame after a silence does not make the arm alive for long.
    """

    def __init__(self, silence_s: float = SILENCE_S, clock: Callable[[], float] = time.monotonic) -> None:
        if not silence_s > 0.0:
            raise ValueError(f"silence_s {silence_s} must be positive")
        self.silence_s = silence_s
        self.clock = clock
        self.counts = Counters(("feedback", "own", "other"))
        self._last_feedback: Optional[float] = None
        self._last_joints: Optional[float] = None
        self._alive_since: Optional[float] = None
        self._joint_frames = 0
        self._lock = threading.Lock()

    def observe(self, arbitration_id: int, is_rx: bool = True) -> None:
        """One frame arrived now (called on the SDK's reader thread before the SDK parses it)."""
        now = self.clock()
        with self._lock:
            if not is_rx or arbitration_id in HOST_COMMAND_IDS:
                self.counts["own"] += 1
                return
            if arbitration_id not in ARM_FEEDBACK_IDS:
                self.counts["other"] += 1
                return
            self.counts["feedback"] += 1
            if self._last_feedback is None or now - self._last_feedback > self.silence_s:
                self._alive_since = now
            self._last_feedback = now
            if arbitration_id in pf.JOINT_FB_IDS:
                self._last_joints = now
                self._joint_frames += 1

    def wrap(self, parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """The SDK's frame callback `parse`, observed first."""
        def observed(message: Any) -> Any:
            self.observe(int(message.arbitration_id), bool(getattr(message, "is_rx", True)))
            return parse(message)
        observed.observed = True
        return observed

    def liveness(self) -> Liveness:
        """The ages of the arm's latest feedback and joint frames, and how long it has been alive, now."""
        now = self.clock()
        with self._lock:
            age = math.inf if self._last_feedback is None else max(0.0, now - self._last_feedback)
            joints = math.inf if self._last_joints is None else max(0.0, now - self._last_joints)
            alive = 0.0 if age > self.silence_s or self._alive_since is None else now - self._alive_since
            return Liveness(age, joints, alive, self._joint_frames)

    def health(self) -> Health:
        """The frames seen, by sender, as frames.<feedback | own | other>."""
        return self.counts.health("frames.")


@dataclass(frozen=True)
class DriverConfig:
    """Where the arm is and how commands move it (PiperArmConfig.driver() builds it from the node's parameters)."""

    can_port: str
    can_interface: str = "socketcan"
    speed_percent: int = 50
    gripper_effort_nm: float = 1.0
    silence_s: float = SILENCE_S

    def __post_init__(self) -> None:
        if not 1 <= int(self.speed_percent) <= 100:
            raise ValueError(f"speed_percent {self.speed_percent} is outside 1..100")
        if not 0.0 <= self.gripper_effort_nm <= units.GRIPPER_EFFORT_MAX_NM:
            raise ValueError(f"gripper effort {self.gripper_effort_nm} N·m is outside [0, {units.GRIPPER_EFFORT_MAX_NM}]")


class PiperDriver:
    """One PiPER arm on one CAN port through the real piper_sdk; thread-safe (one lock around the SDK)."""

    def __init__(self, config: DriverConfig) -> None:
        self.can_port = config.can_port
        self.can_interface = config.can_interface
        self.speed_percent = int(config.speed_percent)
        self.gripper_effort = units.gripper_effort_to_sdk(config.gripper_effort_nm)
        self.sdk = None
        self.connected = False
        self.counts = Counters(("reconnects",))
        self.frames = FrameMonitor(config.silence_s)
        self._lock = threading.RLock()
        self._stop = threading.Event()  # interrupts a running enable retry (shutdown)

    # ------------------------------------------------------------------ connection

    def connect(self) -> None:
        """Open the CAN bus and start the SDK's reader (ConnectPort); DriverError when the bus does not open."""
        # optional SDK: piper_sdk is needed only to talk to a real arm (or the CAN twin)
        from piper_sdk import C_PiperInterface_V2

        with self._lock:
            self._stop.clear()
            if self.sdk is None:
                self.sdk = C_PiperInterface_V2(can_name=self.can_port, can_auto_init=False)
            self._open_bus()
            self.sdk.ConnectPort()
            self.connected = True

    def _open_bus(self) -> None:
        try:
            self.sdk.CreateCanBus(self.can_port, bustype=self.can_interface)
        except ConnectionError as exc:
            raise DriverError(f"cannot open CAN port '{self.can_port}' ({self.can_interface}): {exc}") from None
        bus = self.sdk.GetCanBus()
        status = bus.Init() if bus is not None else None
        if status is None or status != bus.CAN_STATUS.INIT_CAN_BUS_IS_EXIST:
            raise DriverError(f"cannot open CAN port '{self.can_port}' ({self.can_interface}): "
                              f"{getattr(status, 'name', status)}")
        if not getattr(bus.callback_function, "observed", False):  # CreateCanBus made a bus with the SDK's parser
            bus.callback_function = self.frames.wrap(bus.callback_function)

    def reconnect(self) -> None:
        """Close and reopen the CAN bus and restart the SDK's reader; DriverError when the bus does not open.

        Nothing is sent to the arm: it stays enabled and holds whatever it was holding.
        """
        with self._lock:
            if self.sdk is None:
                raise DriverError("not connected")
            self.counts.add("reconnects")
            self.sdk.DisconnectPort()
            self.connected = False
            if self._stop.wait(READER_EXIT_S):
                raise DriverError("shutting down")
            self._open_bus()
            self.sdk.ConnectPort()
            self.connected = True

    def disconnect(self) -> None:
        """Stop the SDK's reader and close the bus (the arm is left as it is: enabled motors stay enabled)."""
        self._stop.set()
        with self._lock:
            if self.sdk is not None and self.connected:
                self.sdk.DisconnectPort()
            self.connected = False

    def health(self) -> Health:
        """Reconnections (driver_reconnects) and the frames seen by sender."""
        return self.counts.health("driver_") + self.frames.health()

    # ------------------------------------------------------------------ state

    def read(self) -> Feedback:
        """The latest feedback the SDK holds, in SI units."""
        sdk = self._sdk(connected=False)
        joints = sdk.GetArmJointMsgs()
        js = joints.joint_state
        pose = sdk.GetArmEndPoseMsgs().end_pose
        gripper = sdk.GetArmGripperMsgs().gripper_state
        status = sdk.GetArmStatus().arm_status
        high = sdk.GetArmHighSpdInfoMsgs()
        low = sdk.GetArmLowSpdInfoMsgs()
        motors_low = [getattr(low, f"motor_{i}") for i in range(1, 7)]
        motor_faults: list[str] = []
        for i, motor in enumerate(motors_low, start=1):
            motor_faults += motor_fault_names(i, int(motor.foc_status_code))
        received = joints.time_stamp != 0
        live = self.frames.liveness()
        return Feedback(
            joints_rad=tuple(units.joints_from_sdk([js.joint_1, js.joint_2, js.joint_3, js.joint_4, js.joint_5,
                                                    js.joint_6])),
            gripper_m=units.gripper_from_sdk(gripper.grippers_angle),
            joint_effort_nm=tuple(units.milli_from_sdk(getattr(high, f"motor_{i}").effort) for i in range(1, 7)),
            gripper_effort_nm=units.gripper_effort_from_sdk(gripper.grippers_effort),
            end_pose=tuple(units.pose_from_sdk([pose.X_axis, pose.Y_axis, pose.Z_axis, pose.RX_axis, pose.RY_axis,
                                                pose.RZ_axis])),
            arm_status=int(status.arm_status),
            ctrl_mode=int(status.ctrl_mode),
            move_mode=int(status.mode_feed),
            err_code=int(status.err_code),
            motor_faults=tuple(motor_faults),
            motors_enabled=tuple(bool(int(m.foc_status_code) & (1 << MOTOR_ENABLED_BIT)) for m in motors_low),
            received=received,
            can_ok=received and self.connected and live.feedback_age_s <= self.frames.silence_s,
            feedback_age_s=live.feedback_age_s,
            joints_age_s=live.joints_age_s,
            alive_s=live.alive_s if self.connected else 0.0,
            joint_frames=live.joint_frames,
        )

    def _sdk(self, connected: bool = True):
        if self.sdk is None or (connected and not self.connected):
            raise DriverError(f"not connected to CAN port '{self.can_port}'")
        return self.sdk

    # ------------------------------------------------------------------ enable

    def enable(self, attempts: int, interval_s: float) -> int:
        """Enable all motors, retrying at most `attempts` times `interval_s` apart; the attempt that saw them enabled.

        DriverError (naming the motors still disabled) when they are not all enabled after the last attempt.
        """
        if attempts < 1 or interval_s < 0:
            raise ValueError("attempts must be >= 1 and interval_s >= 0")
        for attempt in range(1, attempts + 1):
            with self._lock:
                if self._sdk().EnablePiper():  # True when every motor reported enabled before this enable frame
                    return attempt
            if self._stop.wait(interval_s):
                raise DriverError("shutting down")
        enabled = self.read().motors_enabled
        if all(enabled):
            return attempts
        disabled = [f"joint{i + 1}" for i, on in enumerate(enabled) if not on]
        raise DriverError(f"motors not enabled after {attempts} attempts {interval_s} s apart: "
                          f"{', '.join(disabled)} still report disabled")

    # ------------------------------------------------------------------ commands (SI units, unchecked)

    def select_mode(self, move_mode: MoveMode) -> None:
        """Put the arm in CAN command control with `move_mode` at the driver's speed percentage."""
        with self._lock:
            self._sdk().MotionCtrl_2(CtrlMode.CAN, int(move_mode), self.speed_percent, POSITION_VELOCITY)

    def wait_ctrl_mode(self, mode: CtrlMode, timeout_s: float, poll_s: float = 0.01) -> bool:
        """Whether the arm reports control mode `mode` within `timeout_s` (fresh frames only)."""
        end = time.monotonic() + timeout_s
        while True:
            feedback = self.read()
            if feedback.can_ok and feedback.ctrl_mode == mode:
                return True
            if time.monotonic() >= end or self._stop.wait(poll_s):
                return False

    def send_joints(self, joints_rad: Sequence[float]) -> None:
        """Command six joint angles (rad) in joint mode (MOVE J)."""
        values = units.joints_to_sdk(list(joints_rad))
        with self._lock:
            self.select_mode(MoveMode.J)
            self._sdk().JointCtrl(*values)

    def send_end_pose(self, pose: Sequence[float]) -> None:
        """Command an end pose (x, y, z m, roll, pitch, yaw rad; base_link) in end-pose mode (MOVE P)."""
        values = units.pose_to_sdk(list(pose))
        with self._lock:
            self.select_mode(MoveMode.P)
            self._sdk().EndPoseCtrl(*values)

    def send_ee_delta(self, translation: Sequence[float], rotation: Sequence[float]) -> list[float]:
        """Command the measured end pose moved by a delta (m, rad rpy, base frame); the target sent."""
        feedback = self.read()
        if not feedback.received:
            raise DriverError("no end-pose feedback to apply a delta to")
        target = apply_ee_delta(feedback.end_pose, translation, rotation)
        self.send_end_pose(target)
        return target

    def send_gripper(self, width_m: float) -> None:
        """Command the gripper opening (m) with the driver's gripper effort."""
        value = units.gripper_to_sdk(width_m)
        with self._lock:
            self._sdk().GripperCtrl(value, self.gripper_effort, GRIPPER_ENABLE, 0)

    def hold(self) -> Optional[list[float]]:
        """Command the measured joint angles (the arm stops where it is); the joints held, None without feedback."""
        feedback = self.read()
        if not feedback.received:
            return None
        joints = list(feedback.joints_rad)
        self.send_joints(joints)
        return joints

    def emergency_stop(self) -> None:
        """The SDK's quick stop (MotionCtrl_1 emergency_stop 0x01): the arm stops and descends slowly (damped)."""
        with self._lock:
            self._sdk().MotionCtrl_1(EMERGENCY_STOP, 0, 0)

    def resume(self) -> None:
        """The SDK's resume after an emergency stop (MotionCtrl_1 0x02, the frame of ResetPiper: operator only)."""
        with self._lock:
            self._sdk().MotionCtrl_1(RESUME, 0, 0)


def wait_feedback(driver: PiperDriver, timeout_s: float, poll_s: float = 0.01) -> Optional[Feedback]:
    """The first feedback with frames arriving (can_ok) within `timeout_s`, else None."""
    end = time.monotonic() + timeout_s
    while True:
        feedback = driver.read()
        if feedback.can_ok:
            return feedback
        if time.monotonic() >= end:
            return None
        time.sleep(poll_s)
