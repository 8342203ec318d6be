"""One arm's command path and supervision, ROS-free: the gate, watchdog, reconnection backoff and counters around a
PiperDriver. The piper_arm node turns messages, services and transitions into these calls; the rules they follow
(faults, holds, reconnection, what is never sent) are in docs/piper_arm.md.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Optional

from brace_common.backoff import Backoff
from brace_common.counters import Counters, Health
from brace_common.validation import InvalidInput, Rejections

from . import arm_safety as safety
from .arm_safety import CommandGate, CommandWatchdog, LatestCommands, Refused
from .piper_arm_config import PiperArmConfig
from .piper_driver import CtrlMode, DriverConfig, DriverError, Feedback, MoveMode, PiperDriver, wait_feedback

CAN_SILENT = "can_silent"
MOTORS_DISABLED = "motors_disabled"
COMMAND_INPUTS = ("joint_cmd", "ee_delta_cmd", "gripper_cmd")
COUNTERS = (*(f"commands.{name}" for name in COMMAND_INPUTS), "holds.watchdog", "holds.fault", "faults_raised",
            "recoveries", "reconnects", "reconnect_failures", "stops", "resumes", "enables")
"""Every event the arm counts (its diagnostics keys)."""


class ArmControl:
    """What may reach one arm, when it holds and when it reconnects; every method is safe on a released arm.

    `logger` is rclpy's or any logger taking `throttle_duration_sec`; `driver_factory` builds the driver at
    `connect` (the real PiperDriver unless a test passes another).
    """

    def __init__(self, logger, driver_factory: Callable[[DriverConfig], PiperDriver] = PiperDriver) -> None:
        self.log = logger
        self.driver_factory = driver_factory
        self.counts = Counters(COUNTERS)
        self.rejections = Rejections(logger)
        self.commands = LatestCommands(COMMAND_INPUTS)
        self.gate = CommandGate()
        self.config: Optional[PiperArmConfig] = None
        self.limits: Optional[safety.SafetyLimits] = None
        self.driver: Optional[PiperDriver] = None
        self.watchdog: Optional[CommandWatchdog] = None
        self.backoff: Optional[Backoff] = None
        self.feedback: Optional[Feedback] = None
        self.silent_since: Optional[float] = None
        self.lock = threading.RLock()  # gate, watchdog and command sending: one at a time
        self._reported_rejections = 0
        self._reported_lost = 0

    # ------------------------------------------------------------------ connection and lifecycle

    def connect(self, config: PiperArmConfig, limits: safety.SafetyLimits) -> None:
        """Open the CAN bus (nothing is sent to the arm); DriverError when it does not open."""
        driver = self.driver_factory(config.driver())
        driver.connect()
        with self.lock:
            self.config, self.limits, self.driver = config, limits, driver
            self.watchdog = CommandWatchdog(config.command_timeout_s)
            self.backoff = Backoff(config.reconnect_initial_s, config.reconnect_max_s)

    def activate(self) -> int:
        """Wait for the arm's frames, refuse a faulted arm, take control; the enable attempt (DriverError otherwise)."""
        cfg = self.config
        feedback = wait_feedback(self.driver, cfg.feedback_timeout_s)
        if feedback is None:
            raise DriverError(f"no frames from the arm on CAN port '{cfg.can_port}' within {cfg.feedback_timeout_s} s "
                              "(arm powered? CAN port and interface right?)")
        if feedback.faults:
            raise DriverError(f"the arm reports {', '.join(feedback.faults)}: clear it by hand first (docs/piper_arm.md)")
        attempt = self._take_control()
        self.counts.add("enables")
        with self.lock:
            self.watchdog.reset()
            self.gate.active = True
        return attempt

    def deactivate(self, why: str) -> None:
        """Refuse commands and hold the measured joints; the motors stay enabled (a disabled arm drops)."""
        with self.lock:
            self.gate.active = False
            if self.watchdog is not None:
                self.watchdog.reset()
            self._hold(why)

    def release(self) -> None:
        """Disconnect from the CAN bus (the arm is left as it is) and forget the connection's state."""
        with self.lock:
            if self.driver is not None:
                self.driver.disconnect()
            self.driver = None
            self.feedback = None
            self.gate = CommandGate()
            self.silent_since = None

    def exit(self) -> None:
        """Process exit, whatever the lifecycle state: hold if active, then disconnect."""
        if self.driver is None:
            return
        if self.gate.active:
            self.deactivate("exit")
        self.release()

    # ------------------------------------------------------------------ feedback

    def read(self) -> Optional[Feedback]:
        """The arm's latest feedback (kept for diagnostics), None when not connected."""
        driver = self.driver
        if driver is None:
            return None
        self.feedback = driver.read()
        return self.feedback

    def commanding(self, now: float) -> bool:
        """Whether accepted commands are arriving (the latest younger than command_timeout_s)."""
        return self.watchdog is not None and self.watchdog.commanding(now)

    # ------------------------------------------------------------------ commands

    def run_waiting(self, handlers: dict[str, Callable]) -> None:
        """Run the newest waiting command of each input through `handlers[input]`, oldest input first."""
        while (item := self.commands.pop()) is not None:
            name, msg = item
            handlers[name](msg)

    def _command(self, what: str, run: Callable[[Feedback], None]) -> None:
        """Run one command under the gate; a refusal is counted by reason, never raised."""
        try:
            with self.lock:
                self.gate.check()
                if self.driver is None:
                    raise Refused("inactive", "not connected")
                feedback = self.driver.read()
                if not feedback.can_ok:  # silence noticed before the supervisor's next look
                    raise Refused("fault", "the CAN bus is silent")
                run(feedback)
                self.watchdog.feed(time.monotonic())
                self.counts.add(f"commands.{what}")
        except (InvalidInput, ValueError) as exc:
            self.rejections.reject(what, exc)
        except DriverError as exc:
            self.rejections.reject(what, InvalidInput("driver_error", str(exc)))

    def joints(self, names: Sequence[str], positions: Sequence[float]) -> None:
        """Joint (and gripper) targets by name, checked against the limits and one step from the measured angles."""
        def run(feedback: Feedback) -> None:
            joints, gripper = safety.resolve_joint_targets(names, positions, feedback.joints_rad)
            if joints is not None:
                joints = safety.check_joints(joints, feedback.joints_rad, self.limits)
            if gripper is not None:
                gripper = safety.check_gripper(gripper, self.limits)
            if joints is not None:
                self.driver.send_joints(joints)
            if gripper is not None:
                self.driver.send_gripper(gripper)
        self._command("joint_cmd", run)

    def ee_delta(self, frame_id: str, translation: Sequence[float], rotation: Sequence[float], gripper: float) -> None:
        """An end-effector step applied to the measured end pose (and a gripper target unless NaN)."""
        def run(feedback: Feedback) -> None:
            safety.check_frame(frame_id, self.config.frame_id)
            target = safety.check_ee_delta(feedback.end_pose, translation, rotation, self.limits)
            width = None if math.isnan(gripper) else safety.check_gripper(gripper, self.limits)
            self.driver.send_end_pose(target)
            if width is not None:
                self.driver.send_gripper(width)
        self._command("ee_delta_cmd", run)

    def gripper(self, width_m: float) -> None:
        """A gripper opening (m) within the configured stroke."""
        self._command("gripper_cmd", lambda feedback: self.driver.send_gripper(safety.check_gripper(width_m,
                                                                                                    self.limits)))

    # ------------------------------------------------------------------ operator requests (services)

    def enable(self) -> tuple[bool, str]:
        """Enable the motors (bounded retry), select MOVE J and hold; refused unless active and not stopped."""
        if not self.gate.active or self.driver is None:
            return False, "not active"
        if self.gate.stopped:
            return False, "emergency stop: call ~/resume"
        try:
            attempt = self._take_control()
            with self.lock:
                self.gate.faults = tuple(self._faults(self.driver.read()))
        except DriverError as exc:
            return False, str(exc)
        self.counts.add("enables")
        return True, f"motors enabled (attempt {attempt})"

    def stop(self) -> tuple[bool, str]:
        """The SDK's emergency stop (damped); every command is refused until `resume`."""
        if self.driver is None:
            return False, "not connected"
        with self.lock:
            self.gate.stopped = True
            self.watchdog.reset()
            try:
                self.driver.emergency_stop()
            except DriverError as exc:
                return False, f"emergency stop not sent: {exc}"
        self.counts.add("stops")
        self.log.warning("emergency stop: commands refused until ~/resume")
        return True, "emergency stop sent (the arm stops, damped); commands are refused until ~/resume"

    def resume(self) -> tuple[bool, str]:
        """After `stop`: the SDK's resume frame, re-enable (bounded), MOVE J, hold; then commands pass again."""
        if self.driver is None or not self.gate.stopped:
            return False, "not stopped"
        try:
            with self.lock:
                self.driver.resume()
            end = time.monotonic() + self.config.feedback_timeout_s
            while self.driver.read().arm_status_name == "emergency_stop":
                if time.monotonic() > end:
                    raise DriverError(f"the arm still reports the emergency stop after "
                                      f"{self.config.feedback_timeout_s} s")
                time.sleep(0.01)
            attempt = self._take_control()
            with self.lock:
                self.watchdog.reset()
                self.gate.stopped = False
                self.gate.faults = tuple(self._faults(self.driver.read()))
        except DriverError as exc:
            return False, f"still stopped: {exc}"
        self.counts.add("resumes")
        self.log.info("resumed after the emergency stop")
        return True, f"resumed: motors enabled (attempt {attempt}), holding position"

    # ------------------------------------------------------------------ supervision

    def _hold(self, why: str) -> None:
        """Command the measured joints, only with fresh feedback (without it the arm keeps its last checked target)
        and only in CAN control (a hold would take the arm back from a teach pendant)."""
        driver = self.driver
        if driver is None:
            return
        try:
            feedback = driver.read()
            if feedback.can_ok and feedback.ctrl_mode == CtrlMode.CAN and driver.hold() is not None:
                self.log.info(f"holding position ({why})", throttle_duration_sec=1.0)
        except (DriverError, ValueError) as exc:
            self.log.error(f"hold failed ({why}): {exc}")

    def _faults(self, feedback: Feedback) -> list[str]:
        """What forbids commanding the arm now, by name (can_silent until the arm's feedback is back for good)."""
        recovering = CAN_SILENT in self.gate.faults and feedback.alive_s < self.config.silence_recovery_s
        if not feedback.can_ok or recovering:
            return [CAN_SILENT]
        faults = feedback.faults
        if self.gate.active and not feedback.enabled:
            faults.append(MOTORS_DISABLED)
        if self.gate.active and feedback.ctrl_mode != CtrlMode.CAN:  # a teach pendant or a reset took the arm over
            faults.append(f"ctrl_mode_{feedback.ctrl_mode_name}")
        return faults

    def _take_control(self) -> int:
        """Enable (bounded retry), select CAN control in MOVE J, wait until the arm reports it, hold; the attempt."""
        cfg = self.config
        attempt = self.driver.enable(cfg.enable_attempts, cfg.enable_interval_s)
        with self.lock:
            self.driver.select_mode(MoveMode.J)
        if not self.driver.wait_ctrl_mode(CtrlMode.CAN, cfg.feedback_timeout_s):
            raise DriverError(f"the arm does not report CAN control within {cfg.feedback_timeout_s} s "
                              f"(it reports {self.driver.read().ctrl_mode_name})")
        with self.lock:
            self._hold("taking control")
        return attempt

    def supervise(self) -> None:
        """Faults from the feedback, the command watchdog, and reconnection while the CAN bus is silent."""
        driver = self.driver
        if driver is None:
            return
        feedback = driver.read()
        now = time.monotonic()
        reconnect = False
        with self.lock:
            if self.driver is not driver:  # released meanwhile
                return
            faults = self._faults(feedback)
            had = self.gate.faults
            self.gate.faults = tuple(faults)
            if faults and not had:
                self.counts.add("faults_raised")
                self.watchdog.reset()
                self.log.error(f"arm fault: {', '.join(faults)}: commands refused")
                if self.gate.active and not self.gate.stopped and feedback.can_ok:
                    self.counts.add("holds.fault")
                    self._hold("fault")
            elif had and not faults:
                self.counts.add("recoveries")
                self.log.info(f"arm fault cleared ({', '.join(had)}): commands accepted again")
            elif set(had) != set(faults):
                self.log.error(f"arm fault now: {', '.join(faults)} (was {', '.join(had)}): commands refused")
            if CAN_SILENT not in faults:
                self.silent_since = None
                self.backoff.succeeded()
            elif not feedback.can_ok:  # silent (not merely recovering): reconnect, with growing waits
                if self.silent_since is None:
                    self.silent_since = now
                    self.backoff.failed(now)  # the first attempt after reconnect_initial_s of silence
                reconnect = self.backoff.due(now)
            if self.gate.refusal() is None and self.watchdog.expired(now):
                self.counts.add("holds.watchdog")
                self._hold(f"no command for {self.config.command_timeout_s} s")
        if reconnect:
            self._reconnect(driver)

    def _reconnect(self, driver: PiperDriver) -> None:
        self.counts.add("reconnects")
        self.log.warning(f"no feedback from the arm on CAN port '{self.config.can_port}': reconnecting "
                         f"(attempt {self.backoff.attempts}; the arm is not disabled)")
        try:
            driver.reconnect()
        except DriverError as exc:
            self.counts.add("reconnect_failures")
            self.log.error(f"reconnect failed: {exc}", throttle_duration_sec=5.0)
        with self.lock:
            wait = self.backoff.failed(time.monotonic())  # success is counted when frames arrive again
        self.log.info(f"next reconnection in {wait:.2f} s unless the arm's feedback returns")

    # ------------------------------------------------------------------ health

    def health(self) -> Health:
        """Arm status, error bits, enable state, CAN health, stop, reconnections, counts and refused commands;
        warnings for a warning status and for commands refused or lost since the previous report."""
        driver, backoff = self.driver, self.backoff
        feedback = self.feedback if driver is not None else None
        values = {"stopped": self.gate.stopped, "faults": ", ".join(self.gate.faults)}
        if feedback is not None:
            values.update(feedback_values(feedback))
            values["commanding"] = self.commanding(time.monotonic())
        health = Health(values) + self.counts.health()
        if driver is not None:
            health += driver.health()
        if backoff is not None:
            silent = self.silent_since is not None
            health += Health({"reconnect_attempt": backoff.attempts if silent else 0,
                              "reconnect_delay_s": round(min(backoff.max_s, backoff.initial_s * 2.0 ** backoff.attempts),
                                                         3) if silent else 0.0})
        health += self.commands.health() + Health(self.rejections.health().values)
        errors = (["emergency stop (call ~/resume)"] if self.gate.stopped else []) + \
            ([f"fault: {', '.join(self.gate.faults)}"] if self.gate.faults else [])
        warnings = feedback.warnings if feedback is not None and feedback.can_ok else []
        refused, lost = self.rejections.total, self.commands.lost()
        if refused > self._reported_rejections:
            warnings.append(f"{refused - self._reported_rejections} commands refused")
        if lost > self._reported_lost:
            warnings.append(f"{lost - self._reported_lost} commands lost before they were taken")
        self._reported_rejections, self._reported_lost = refused, lost
        return health + Health({}, tuple(warnings), tuple(errors))


def feedback_values(feedback: Feedback) -> dict[str, object]:
    """What the arm reports, as diagnostics values."""
    return {"can_ok": feedback.can_ok, "feedback_age_s": _age(feedback.feedback_age_s),
            "joints_age_s": _age(feedback.joints_age_s), "alive_s": round(feedback.alive_s, 3),
            "arm_status": feedback.arm_status_name, "ctrl_mode": feedback.ctrl_mode_name,
            "move_mode": feedback.move_mode_name, "error_code": f"0x{feedback.err_code:04x}",
            "errors": ", ".join(feedback.errors), "motor_faults": ", ".join(feedback.motor_faults),
            "enabled": feedback.enabled, "motors_enabled": " ".join(str(int(m)) for m in feedback.motors_enabled)}


def _age(seconds: float) -> float | str:
    """An age for /diagnostics: seconds to the millisecond, 'never' for none."""
    return round(seconds, 3) if math.isfinite(seconds) else "never"
