"""piper_arm lifecycle node: one AgileX PiPER arm over piper_sdk (PiperDriver), every command through arm_safety.

Names are relative (launch puts each robot in its namespace); /diagnostics is global.

Publishes   joint_states (sensor_msgs/JointState: joint1..joint6 rad, gripper m; effort N·m) and
            end_pose (geometry_msgs/PoseStamped in `frame_id`) at most every `feedback_period_s` while active, once
            per new joint feedback frame, stamped with that frame's arrival (never republished as fresh);
            agent_states (brace_msgs/AgentState: `agent_id`, position = end-effector position,
            tracking_error NaN, has_goal = commands are arriving, step = this node's publication counter) every
            `agent_state_period_s`; /diagnostics (arm status and error bits by name, enable state, CAN health,
            emergency stop, liveness, reconnections, refused commands as rejected.<input>.<reason>, commands
            never run as dropped.<input>.superseded and lost.<input>.sequence_gap), in every state
Subscribes  ee_delta_cmd (brace_msgs/EndEffectorDelta: applied to the measured end pose; gripper NaN = leave it),
            joint_cmd (sensor_msgs/JointState: positions by joint name, unnamed = joint1..6 [, gripper]),
            gripper_cmd (std_msgs/Float64: opening in m). Best-effort; every sample is taken at once and the
            newest of each input is run (a command is never run late): one replaced before it ran is counted
            superseded, one its publisher's sequence numbers show was never taken is counted lost
Services    ~/enable (enable the motors, bounded retry), ~/stop (the SDK's damped emergency stop; commands are
            refused until ~/resume), ~/resume (the SDK's resume, re-enable, hold) - std_srvs/Trigger

Parameters  can_port, can_interface, agent_id, frame_id, autostart, feedback_period_s, agent_state_period_s,
            diagnostics_period_s, supervision_period_s, command_timeout_s, feedback_timeout_s,
            silence_timeout_s, silence_recovery_s, enable_attempts,
            enable_interval_s, reconnect_initial_s, reconnect_max_s, speed_percent, gripper_effort_nm,
            joint_lower_rad, joint_upper_rad, workspace_min_m, workspace_max_m, max_joint_step_rad,
            max_translation_step_m, max_rotation_step_rad, gripper_min_m, gripper_max_m
            (piper_arm_config.PiperArmConfig; defaults in config/piper_arm.yaml)

Lifecycle: configure validates the parameters (a bad one fails naming it) and connects (CreateCanBus +
ConnectPort); activate waits for the arm's frames, refuses an arm that reports a fault, enables the motors
(bounded retry: failure fails the transition with the reason), selects CAN control in MOVE J and holds the
measured joints; deactivate holds position (the motors stay enabled); cleanup disconnects.

Safety layers: (1) every command checked by arm_safety (finite, joint limits, one step from the measured state,
workspace box, gripper stroke) and refused whole, counted by reason; (2) a command gate: inactive, stopped
(~/stop until ~/resume) or faulted (CAN silence, an arm error status or error bits, motor faults, motors
disabled) refuses every command; (3) a watchdog: no accepted command for `command_timeout_s` holds the measured
joints; (4) on an arm fault the node holds position once; on CAN silence (no frame the arm itself sends for
`silence_timeout_s`: the node's own frames echoed back never count) it reconnects with capped exponential backoff
and sends nothing else, and clears the fault only after `silence_recovery_s` of the arm's feedback without a gap.
The node never disables or resets the arm (the SDK documents that the arm then drops): recovering from a fault is
the operator's (docs/piper_arm.md).
"""

from __future__ import annotations

import math
import sys
import threading
import time
from functools import partial
from typing import Any, Optional

from brace_msgs.msg import AgentState, EndEffectorDelta
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.duration import Duration
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64
from std_srvs.srv import Trigger

from brace_common import names, qos
from brace_common.clock import steady_timer
from brace_common.config import ConfigError
from brace_common.diagnostics import diagnostic_array
from brace_common.lifecycle import ReleasingLifecycleNode
from brace_common.params import declare_parameters, read_config, reject_undeclared
from brace_common.spin import spin_node
from brace_common.validation import InvalidInput, Rejections

from . import arm_safety as safety
from .arm_safety import GRIPPER_NAME, JOINT_NAMES, Backoff, CommandGate, CommandWatchdog, LatestCommands, Refused
from .piper_arm_config import PiperArmConfig
from .piper_driver import CtrlMode, DriverError, Feedback, MoveMode, PiperDriver, wait_feedback

EXECUTOR_THREADS = 6  # feedback, supervision (a reconnection blocks it), taking commands, running them, services,
#                      reports
CAN_SILENT = "can_silent"
MOTORS_DISABLED = "motors_disabled"
COMMAND_INPUTS = ("joint_cmd", "ee_delta_cmd", "gripper_cmd")


class PiperArmNode(ReleasingLifecycleNode):
    """Thin lifecycle shell around PiperDriver, arm_safety's checks and its command gate."""

    def __init__(self, **kwargs) -> None:
        super().__init__("piper_arm", **kwargs)
        declare_parameters(self, PiperArmConfig, enforce_ranges=False)
        self.config: Optional[PiperArmConfig] = None
        self.limits: Optional[safety.SafetyLimits] = None
        self.driver: Optional[PiperDriver] = None
        self.feedback: Optional[Feedback] = None
        self.gate = CommandGate()
        self.watchdog: Optional[CommandWatchdog] = None
        self.backoff: Optional[Backoff] = None
        self.silent_since: Optional[float] = None
        self.state_label = "unconfigured"
        self.last_error = ""
        self.hardware_fault = False  # the last transition failed on the CAN bus or the arm (brace_common.spin)
        self.agent_step = 0
        self.counts = {"commands.joint_cmd": 0, "commands.ee_delta_cmd": 0, "commands.gripper_cmd": 0,
                       "holds.watchdog": 0, "holds.fault": 0, "faults_raised": 0, "recoveries": 0, "reconnects": 0,
                       "reconnect_failures": 0, "stops": 0, "resumes": 0, "enables": 0}
        self.rejections = Rejections(self.get_logger())
        self._reported_rejections = 0
        self.commands = LatestCommands(COMMAND_INPUTS)
        self._reported_lost = 0
        self._published_joint_frames = -1
        self._state_lock = threading.RLock()  # gate, watchdog and command sending: one at a time
        # Every topic, service and timer lives as long as the node: configure re-times the timers and cleanup
        # cancels them (destroying entities while another executor thread waits on them races in rclpy).
        self.diag_pub = self.create_publisher(DiagnosticArray, names.DIAGNOSTICS, qos.DIAGNOSTICS)
        self.joint_pub = self.create_lifecycle_publisher(JointState, names.JOINT_STATES, qos.ROBOT_FEEDBACK)
        self.pose_pub = self.create_lifecycle_publisher(PoseStamped, names.END_POSE, qos.ROBOT_FEEDBACK)
        self.agent_pub = self.create_lifecycle_publisher(AgentState, names.AGENT_STATES, qos.EVENTS)
        reports = MutuallyExclusiveCallbackGroup()
        services = MutuallyExclusiveCallbackGroup()
        takes = MutuallyExclusiveCallbackGroup()
        period = self.get_parameter("diagnostics_period_s").value
        steady_timer(self, period if isinstance(period, float) and 0.05 <= period <= 60.0 else 1.0,
                     self.publish_diagnostics, reports)
        self.feedback_timer = steady_timer(self, 1.0, self.publish_feedback, MutuallyExclusiveCallbackGroup())
        self.supervision_timer = steady_timer(self, 1.0, self.supervise, MutuallyExclusiveCallbackGroup())
        self.agent_timer = steady_timer(self, 1.0, self.publish_agent_state, reports)
        self._timers_of_config = (self.feedback_timer, self.supervision_timer, self.agent_timer)
        for timer in self._timers_of_config:
            timer.cancel()
        # Taking a command only files it (cheap, in order, one input after another); a guard condition then runs the
        # newest of each input in its own group, so a command stream faster than the arm is counted, not lost unseen.
        self._handlers = {"joint_cmd": self.on_joint_cmd, "ee_delta_cmd": self.on_ee_delta,
                          "gripper_cmd": self.on_gripper_cmd}
        self._runner = self.create_guard_condition(self.run_commands, MutuallyExclusiveCallbackGroup())
        for kind, topic, name in ((EndEffectorDelta, names.EE_DELTA_CMD, "ee_delta_cmd"),
                                  (JointState, names.JOINT_CMD, "joint_cmd"), (Float64, names.GRIPPER_CMD, "gripper_cmd")):
            self.create_subscription(kind, topic, partial(self.take_command, name), qos.ROBOT_COMMANDS,
                                     callback_group=takes)
        self.create_service(Trigger, "~/enable", self.on_enable, callback_group=services)
        self.create_service(Trigger, "~/stop", self.on_stop, callback_group=services)
        self.create_service(Trigger, "~/resume", self.on_resume, callback_group=services)

    # ------------------------------------------------------------------ lifecycle

    def _fail(self, what: str, exc: Exception) -> TransitionCallbackReturn:
        self.hardware_fault = isinstance(exc, DriverError)  # the CAN bus or the arm, not the parameters
        self.last_error = f"{what}: {exc}"
        self.get_logger().error(self.last_error)
        return TransitionCallbackReturn.FAILURE

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Validate the parameters and connect to the CAN bus (no frame is sent to the arm)."""
        try:
            self.config = read_config(self, PiperArmConfig)
            reject_undeclared(self)
            self.limits = self.config.limits()
        except (ConfigError, ValueError) as exc:
            return self._fail("configure failed", exc)
        cfg = self.config
        driver = PiperDriver(cfg.can_port, cfg.can_interface, cfg.speed_percent, cfg.gripper_effort_nm,
                             cfg.silence_timeout_s)
        try:
            driver.connect()
        except DriverError as exc:
            return self._fail("configure failed", exc)
        self.driver = driver
        self.last_error = ""
        self.watchdog = CommandWatchdog(cfg.command_timeout_s)
        self.backoff = Backoff(cfg.reconnect_initial_s, cfg.reconnect_max_s)
        for timer, period in zip(self._timers_of_config, (cfg.feedback_period_s, cfg.supervision_period_s,
                                                          cfg.agent_state_period_s), strict=True):
            timer.timer_period_ns = int(period * 1e9)
            timer.reset()
        self.state_label = "inactive"
        self.get_logger().info(f"connected to CAN port '{cfg.can_port}' ({cfg.can_interface})")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Wait for the arm's frames, enable the motors (bounded retry), select MOVE J and hold the measured joints."""
        cfg = self.config
        feedback = wait_feedback(self.driver, cfg.feedback_timeout_s)
        if feedback is None:
            return self._fail("activate failed", DriverError(
                f"no frames from the arm on CAN port '{cfg.can_port}' within {cfg.feedback_timeout_s} s "
                "(arm powered? CAN port and interface right?)"))
        if feedback.faults:
            return self._fail("activate failed", DriverError(
                f"the arm reports {', '.join(feedback.faults)}: clear it by hand first (docs/piper_arm.md)"))
        try:
            attempt = self._take_control()
        except DriverError as exc:
            return self._fail("activate failed", exc)
        self.counts["enables"] += 1
        with self._state_lock:
            self.watchdog.reset()
            self.gate.active = True
        self.last_error = ""
        self.state_label = "active"
        self.get_logger().info(f"arm enabled (attempt {attempt}); holding the measured joints")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Refuse commands and hold the measured joints; the motors stay enabled (a disabled arm drops)."""
        with self._state_lock:
            self.gate.active = False
            self.watchdog.reset()
            self._hold("deactivate")
        self.state_label = "inactive"
        return super().on_deactivate(state)

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Hold if active, then disconnect."""
        if self.gate.active:
            with self._state_lock:
                self.gate.active = False
                self._hold("shutdown")
        return super().on_shutdown(state)

    def _release(self) -> None:
        """Cleanup and shutdown: disconnect from the CAN bus (the arm is left as it is) and drop the topics."""
        for timer in self._timers_of_config:
            timer.cancel()
        if self.driver is not None:
            self.driver.disconnect()
        self.driver = None
        self.feedback = None
        self.gate = CommandGate()
        self.silent_since = None
        self._published_joint_frames = -1

    def release(self) -> None:
        """Process exit, whatever the lifecycle state: hold if active, then disconnect (no ROS call)."""
        if self.driver is None:
            return
        if self.gate.active:
            with self._state_lock:
                self.gate.active = False
                self._hold("exit")
        self.driver.disconnect()
        self.driver = None

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
                self.get_logger().info(f"holding position ({why})", throttle_duration_sec=1.0)
        except (DriverError, ValueError) as exc:
            self.get_logger().error(f"hold failed ({why}): {exc}")

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
        with self._state_lock:
            self.driver.select_mode(MoveMode.J)
        if not self.driver.wait_ctrl_mode(CtrlMode.CAN, cfg.feedback_timeout_s):
            raise DriverError(f"the arm does not report CAN control within {cfg.feedback_timeout_s} s "
                              f"(it reports {self.driver.read().ctrl_mode_name})")
        with self._state_lock:
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
        with self._state_lock:
            faults = self._faults(feedback)
            had = self.gate.faults
            self.gate.faults = tuple(faults)
            if faults and not had:
                self.counts["faults_raised"] += 1
                self.watchdog.reset()
                self.get_logger().error(f"arm fault: {', '.join(faults)}: commands refused")
                if self.gate.active and not self.gate.stopped and feedback.can_ok:
                    self.counts["holds.fault"] += 1
                    self._hold("fault")
            elif had and not faults:
                self.counts["recoveries"] += 1
                self.get_logger().info(f"arm fault cleared ({', '.join(had)}): commands accepted again")
            elif set(had) != set(faults):
                self.get_logger().error(f"arm fault now: {', '.join(faults)} (was {', '.join(had)}): commands refused")
            if CAN_SILENT not in faults:
                self.silent_since = None
                self.backoff.reset()
            elif not feedback.can_ok:  # silent (not merely recovering): reconnect, with growing waits
                if self.silent_since is None:
                    self.silent_since = now
                    self.backoff.failed(now)  # the first attempt after reconnect_initial_s of silence
                reconnect = self.backoff.due(now)
            if self.gate.refusal() is None and self.watchdog.expired(now):
                self.counts["holds.watchdog"] += 1
                self._hold(f"no command for {self.config.command_timeout_s} s")
        if reconnect:
            self._reconnect()

    def _reconnect(self) -> None:
        self.counts["reconnects"] += 1
        self.get_logger().warning(f"no feedback from the arm on CAN port '{self.config.can_port}': reconnecting "
                                  f"(attempt {self.backoff.attempts}; the arm is not disabled)")
        try:
            self.driver.reconnect()
        except DriverError as exc:
            self.counts["reconnect_failures"] += 1
            self.get_logger().error(f"reconnect failed: {exc}", throttle_duration_sec=5.0)
        with self._state_lock:
            wait = self.backoff.failed(time.monotonic())  # success is counted when frames arrive again
        self.get_logger().info(f"next reconnection in {wait:.2f} s unless the arm's feedback returns")

    # ------------------------------------------------------------------ feedback

    def publish_feedback(self) -> None:
        """joint_states and end_pose once per new joint feedback frame, stamped when it arrived (nothing while silent)."""
        driver = self.driver
        if driver is None:
            return
        feedback = self.feedback = driver.read()
        if not feedback.can_ok or not self.joint_pub.is_activated:
            return
        if feedback.joint_frames == self._published_joint_frames or not math.isfinite(feedback.joints_age_s):
            return  # nothing new from the arm: a republished state would pass stale joints off as fresh
        self._published_joint_frames = feedback.joint_frames
        stamp = (self.get_clock().now() - Duration(nanoseconds=round(feedback.joints_age_s * 1e9))).to_msg()
        joints = JointState()
        joints.header.stamp = stamp
        joints.header.frame_id = self.config.frame_id
        joints.name = [*JOINT_NAMES, GRIPPER_NAME]
        joints.position = [*feedback.joints_rad, feedback.gripper_m]
        joints.effort = [*feedback.joint_effort_nm, feedback.gripper_effort_nm]
        self.joint_pub.publish(joints)
        pose = PoseStamped()
        pose.header.stamp = stamp
        pose.header.frame_id = self.config.frame_id
        x, y, z, roll, pitch, yaw = feedback.end_pose
        pose.pose.position.x, pose.pose.position.y, pose.pose.position.z = x, y, z
        q = safety.rpy_to_quaternion(roll, pitch, yaw)
        pose.pose.orientation.x, pose.pose.orientation.y, pose.pose.orientation.z, pose.pose.orientation.w = q
        self.pose_pub.publish(pose)

    def publish_agent_state(self) -> None:
        """The arm as an agent: end-effector position; has_goal while commands arrive."""
        feedback = self.feedback
        if feedback is None or not feedback.can_ok or not self.agent_pub.is_activated:
            return
        self.agent_step += 1
        msg = AgentState(agent_id=self.config.agent_id, step=self.agent_step, tracking_error=math.nan,
                         has_goal=self.watchdog.commanding(time.monotonic()))
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.header.frame_id = self.config.frame_id
        msg.position.x, msg.position.y, msg.position.z = feedback.end_pose[:3]
        self.agent_pub.publish(msg)

    # ------------------------------------------------------------------ commands

    def take_command(self, name: str, msg: Any, info: dict) -> None:
        """File a command taken from input `name` (its publisher and sequence number reveal commands never taken)."""
        # rclpy passes the message info only to a callback with exactly two required parameters
        gid = info.get("publisher_gid")
        publisher = bytes(gid["data"]) if isinstance(gid, dict) and gid.get("data") is not None else None
        self.commands.put(name, msg, publisher, info.get("publication_sequence_number"))
        self._runner.trigger()

    def run_commands(self) -> None:
        """Run the newest waiting command of each input, oldest input first, until none waits."""
        while (item := self.commands.pop()) is not None:
            name, msg = item
            self._handlers[name](msg)

    def _command(self, what: str, run) -> None:
        """Run one command under the gate; a refusal is counted by reason, never raised."""
        try:
            with self._state_lock:
                self.gate.check()
                if self.driver is None:
                    raise Refused("inactive", "not connected")
                feedback = self.driver.read()
                if not feedback.can_ok:  # silence noticed before the supervisor's next look
                    raise Refused("fault", "the CAN bus is silent")
                run(feedback)
                self.watchdog.feed(time.monotonic())
                self.counts[f"commands.{what}"] += 1
        except (InvalidInput, ValueError) as exc:
            self.rejections.reject(what, exc)
        except DriverError as exc:
            self.rejections.reject(what, InvalidInput("driver_error", str(exc)))

    def on_joint_cmd(self, msg: JointState) -> None:
        """Joint (and gripper) targets by name, checked against the limits and one step from the measured angles."""
        def run(feedback: Feedback) -> None:
            joints, gripper = safety.resolve_joint_targets(msg.name, msg.position, feedback.joints_rad)
            if joints is not None:
                joints = safety.check_joints(joints, feedback.joints_rad, self.limits)
            if gripper is not None:
                gripper = safety.check_gripper(gripper, self.limits)
            if joints is not None:
                self.driver.send_joints(joints)
            if gripper is not None:
                self.driver.send_gripper(gripper)
        self._command("joint_cmd", run)

    def on_ee_delta(self, msg: EndEffectorDelta) -> None:
        """An end-effector step applied to the measured end pose (and a gripper target unless NaN)."""
        def run(feedback: Feedback) -> None:
            safety.check_frame(msg.header.frame_id, self.config.frame_id)
            t, r = msg.translation, msg.rotation
            target = safety.check_ee_delta(feedback.end_pose, (t.x, t.y, t.z), (r.x, r.y, r.z), self.limits)
            gripper = None if math.isnan(msg.gripper) else safety.check_gripper(msg.gripper, self.limits)
            self.driver.send_end_pose(target)
            if gripper is not None:
                self.driver.send_gripper(gripper)
        self._command("ee_delta_cmd", run)

    def on_gripper_cmd(self, msg: Float64) -> None:
        """A gripper opening (m) within the configured stroke."""
        def run(feedback: Feedback) -> None:
            self.driver.send_gripper(safety.check_gripper(msg.data, self.limits))
        self._command("gripper_cmd", run)

    # ------------------------------------------------------------------ services

    def on_enable(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        """Enable the motors (bounded retry), select MOVE J and hold; refused unless active and not stopped."""
        if not self.gate.active or self.driver is None:
            response.success, response.message = False, "not active"
            return response
        if self.gate.stopped:
            response.success, response.message = False, "emergency stop: call ~/resume"
            return response
        try:
            attempt = self._take_control()
            with self._state_lock:
                self.gate.faults = tuple(self._faults(self.driver.read()))
        except DriverError as exc:
            response.success, response.message = False, str(exc)
            return response
        self.counts["enables"] += 1
        response.success, response.message = True, f"motors enabled (attempt {attempt})"
        return response

    def on_stop(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        """The SDK's emergency stop (damped); every command is refused until ~/resume."""
        if self.driver is None:
            response.success, response.message = False, "not connected"
            return response
        with self._state_lock:
            self.gate.stopped = True
            self.watchdog.reset()
            try:
                self.driver.emergency_stop()
            except DriverError as exc:
                response.success, response.message = False, f"emergency stop not sent: {exc}"
                return response
        self.counts["stops"] += 1
        self.get_logger().warning("emergency stop: commands refused until ~/resume")
        response.success = True
        response.message = "emergency stop sent (the arm stops, damped); commands are refused until ~/resume"
        return response

    def on_resume(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        """After ~/stop: the SDK's resume frame, re-enable (bounded), MOVE J, hold; then commands pass again."""
        if self.driver is None or not self.gate.stopped:
            response.success, response.message = False, "not stopped"
            return response
        try:
            with self._state_lock:
                self.driver.resume()
            end = time.monotonic() + self.config.feedback_timeout_s
            while self.driver.read().arm_status_name == "emergency_stop":
                if time.monotonic() > end:
                    raise DriverError(f"the arm still reports the emergency stop after "
                                      f"{self.config.feedback_timeout_s} s")
                time.sleep(0.01)
            attempt = self._take_control()
            with self._state_lock:
                self.watchdog.reset()
                self.gate.stopped = False
                self.gate.faults = tuple(self._faults(self.driver.read()))
        except DriverError as exc:
            response.success, response.message = False, f"still stopped: {exc}"
            return response
        self.counts["resumes"] += 1
        self.get_logger().info("resumed after the emergency stop")
        response.success, response.message = True, f"resumed: motors enabled (attempt {attempt}), holding position"
        return response

    # ------------------------------------------------------------------ monitoring

    def publish_diagnostics(self) -> None:
        """Arm status, error bits, enable state, CAN health, stop, reconnections and refused commands."""
        cfg = self.config
        feedback = self.feedback if self.driver is not None else None
        values = {"state": self.state_label, "can_port": cfg.can_port if cfg else "",
                  "can_interface": cfg.can_interface if cfg else "", "stopped": self.gate.stopped,
                  "faults": ", ".join(self.gate.faults)}
        if feedback is not None:
            values.update({
                "can_ok": feedback.can_ok, "feedback_age_s": _age(feedback.feedback_age_s),
                "joints_age_s": _age(feedback.joints_age_s), "alive_s": round(feedback.alive_s, 3),
                "arm_status": feedback.arm_status_name, "ctrl_mode": feedback.ctrl_mode_name,
                "move_mode": feedback.move_mode_name, "error_code": f"0x{feedback.err_code:04x}",
                "errors": ", ".join(feedback.errors), "motor_faults": ", ".join(feedback.motor_faults),
                "enabled": feedback.enabled, "motors_enabled": " ".join(str(int(m)) for m in feedback.motors_enabled),
                "commanding": self.watchdog.commanding(time.monotonic()) if self.watchdog else False})
        values.update(self.counts)
        if self.driver is not None:
            values["driver_reconnects"] = self.driver.reconnects
            values.update({f"frames.{k}": v for k, v in self.driver.frames.counts.items()})
        if self.backoff is not None:
            silent = self.silent_since is not None
            values["reconnect_attempt"] = self.backoff.attempts if silent else 0
            values["reconnect_delay_s"] = round(self.backoff.delay_s, 3) if silent else 0.0
        values.update(self.commands.counts)
        values.update({f"rejected.{k}": v for k, v in sorted(self.rejections.counts.items())})
        errors: list[str] = []
        if self.last_error:
            errors.append(self.last_error)
        if self.gate.stopped:
            errors.append("emergency stop (call ~/resume)")
        if self.gate.faults:
            errors.append(f"fault: {', '.join(self.gate.faults)}")
        warnings = feedback.warnings if feedback is not None and feedback.can_ok else []
        total = self.rejections.total
        if total > self._reported_rejections:
            warnings.append(f"{total - self._reported_rejections} commands refused")
        self._reported_rejections = total
        lost = sum(v for k, v in self.commands.counts.items() if k.startswith("lost."))
        if lost > self._reported_lost:
            warnings.append(f"{lost - self._reported_lost} commands lost before they were taken")
        self._reported_lost = lost
        self.diag_pub.publish(diagnostic_array(
            f"{self.get_name()}: PiPER arm on {cfg.can_port if cfg else '?'}", values,
            self.get_clock().now().to_msg(), warnings, errors))


def _age(seconds: float) -> float | str:
    """An age for /diagnostics: seconds to the millisecond, 'never' for none."""
    return round(seconds, 3) if math.isfinite(seconds) else "never"


def main(args=None) -> int:
    """`ros2 run robot_bridge piper_arm` (configures and activates itself with `autostart`)."""
    return spin_node(PiperArmNode, "piper_arm", args, on_exit=lambda node: node.release(), threads=EXECUTOR_THREADS)


if __name__ == "__main__":
    sys.exit(main())
