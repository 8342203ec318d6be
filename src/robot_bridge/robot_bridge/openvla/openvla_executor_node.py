"""openvla_executor lifecycle node: runs its agent's plan steps on the arm with OpenVLA.

Names are relative (launch puts the robot's nodes in its namespace).

Subscribes  plan (brace_msgs/Plan, latched; only plans of `agent_id`), verdicts (brace_msgs/VerifierVerdict:
            the visual verifier's; a confident violation for `agent_id` halts the step), episode (brace_msgs/Episode:
            EVENT_START ends the current plan without an outcome; the arm holds until the next), `image_topic`
            (sensor_msgs/Image, rgb8 or bgr8), joint_states (sensor_msgs/JointState: the `gripper_joint` position is the gripper
            opening, m), end_pose (geometry_msgs/PoseStamped: the end effector in the frame of `locations`)
Publishes   ee_delta_cmd (brace_msgs/EndEffectorDelta: one scaled, limited 7-D action per VLA answer),
            outcomes (brace_msgs/ExecutionOutcome: one per finished step, `step` = this node's control tick,
            `failure` = Table 32's category), context (brace_msgs/ContextEntry, block HISTORY: kind
            action_outcome or failure_trace, for the planner), /diagnostics
Services    the lifecycle services only (~/change_state, ~/get_state, ...)

Parameters  see robot_bridge.openvla.executor_config.ExecutorConfig and config/openvla_executor.yaml: agent_id,
            backend (server | local), server_url, server_timeout_s, model_path, device, unnorm_key
            (bridge_orig), image_topic, image_size, control_period_s (0.2), frame_id, gripper_joint, on_failure,
            instruction_templates, object_aliases, skill_conditions, locations, object_parameter,
            target_parameter, translation_scale, rotation_scale, max_translation_m, max_rotation_rad,
            gripper_mode, gripper_open_value, gripper_closed_value, gripper_threshold, gripper_open_m,
            gripper_closed_m, min_object_width_m, max_object_width_m, closed_command_m, grasp_settle_s,
            settle_tolerance_m, hold_confirm_s, release_margin_m, position_tolerance_m, place_tolerance_m,
            push_contact_m, push_loss_m, step_timeout_s, max_step_actions, max_vla_errors, stale_after_s,
            halt_on_verdict, halt_min_confidence, diagnostics_period_s, autostart.

Lifecycle: configure validates the parameters (a bad one fails naming it) and builds the backend (local: loads
the model, a missing or unloadable checkpoint fails configure; server: nothing is contacted yet), the
publishers and subscriptions; activate starts the control loop (a steady timer every control_period_s); deactivate
stops it: no command is sent while inactive (the current step starts again at the next activate); cleanup frees
the model. With `autostart` the node configures and activates itself.

Control loop: each tick judges the current step (step_monitor) on the latest arm state and, when no VLA call is
in flight, sends the latest image and the step's instruction to the backend in a worker thread (a slow server
never blocks the subscriptions or the ticks). A server request is bounded as a whole by `server_timeout_s`
(connect to the answer's last byte, so a server that drips its answer fails it too), and a request whose step
changed (a new plan, the step ended, deactivate) is cancelled at once, so the next step's request never queues
behind it. Each answer becomes one EndEffectorDelta. When the step ends the
outcome and a context entry are published and the next step starts; after a failure the rest of the plan is
abandoned (on_failure 'abandon', the default: the failure outcome asks the planner for a new plan) or continued.
After the last step the agent is idle until the next plan. A new plan replaces the current one and starts at its
first step, except one that repeats the running step and those after it (brace_common.plan_start): the running step
goes on (plans_unchanged), and where the plan repairs a drift or a loop (Plan.trigger_kind) the VLA is given its
instruction anew (steps_restarted); the step's timeout and action budget still count. A plan with the current
plan's id again is ignored (the latched copy). A malformed plan (parameters
that are not a JSON object, an unknown skill, a missing parameter, an unknown location) is counted as
rejected.plan.<reason> and dropped whole: the current step goes on. VLA errors (server down, "error" answers,
deadlines by phase, malformed or non-real actions) are counted as vla_errors.<reason>; `max_vla_errors` in a row
fail the step with FAILURE_EXECUTOR (so does a step timeout without a single answer) and diagnostics say ERROR
until an answer comes. The executor never touches the replanning topics.

Preemption (OmniAct Sec. 3.3): a VerifierVerdict for `agent_id` with `violation` and at least
`halt_min_confidence` halts the running step in its callback, without waiting for the next tick: the VLA call in
flight is cancelled, a zero EndEffectorDelta makes the arm hold its measured pose, the step ends with
FAILURE_PREEMPTED (its outcome and a failure_trace entry carry the verifier's detail, so the replan reads it) and the
rest of the plan is abandoned whatever `on_failure` says. A verdict while idle is counted, nothing else.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
from brace_msgs.msg import ContextEntry, EndEffectorDelta, Episode, ExecutionOutcome, Plan, VerifierVerdict
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped, Vector3
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn
from sensor_msgs.msg import Image, JointState

from brace_common import names, qos
from brace_common.action_schema import Step, step_from_message
from brace_common.clock import steady_timer
from brace_common.config import ConfigError
from brace_common.diagnostics import diagnostic_array, nonzero
from brace_common.lifecycle import ReleasingLifecycleNode
from brace_common.params import declare_parameters, read_config, reject_undeclared
from brace_common.plan_start import PlanStart, plan_start
from brace_common.spin import spin_node
from brace_common.validation import InvalidInput, Rejections, check_id, shorten
from brace_common.vocabulary import Block, EntryKind, EpisodeEvent, Failure, TriggerKind

from ..orbbec.image_msgs import image_to_array
from .executor_config import ExecutorConfig
from .instructions import InstructionTemplates
from .step_monitor import Observation, StepMonitor, StepResult, StepSpec, outcome_text
from .vla_action import ActionError, ArmScaling, GripperMapping, anchored, to_arm
from .vla_backends import LocalBackend, ServerBackend, VlaError, resize_image

MAX_PLAN_STEPS = 64
"""A plan longer than this is rejected (the planner's schemas allow a handful)."""
EXECUTOR_THREADS = 2  # subscriptions and the control tick share one mutually exclusive group; diagnostics too


@dataclass(frozen=True)
class PlannedStep:
    """One step of the current plan with what the executor derived from it when the plan arrived.

    Not a second step type: it wraps the plan's `Step` with executor state (its index in the plan, the VLA
    instruction, the step monitor's spec), which a Step does not carry.
    """

    index: int
    step: Step
    instruction: str
    spec: StepSpec

    @property
    def action(self) -> str:
        """The step's skill."""
        return self.step.action

    @property
    def parameters(self) -> dict[str, Any]:
        """The step's parameters."""
        return self.step.parameters

    def describe(self) -> str:
        """`pick(object=cup)` for logs and context entries."""
        return self.step.text()

    def call(self) -> str:
        """The skill call as canonical text (what makes two plan steps the same)."""
        return self.step.call()


def build_backend(cfg: ExecutorConfig):
    """The VLA backend of `cfg` (local: the model is loaded now); ConfigError naming the parameter on failure."""
    if cfg.backend == "server":
        return ServerBackend(cfg.server_url, cfg.unnorm_key, cfg.server_timeout_s)
    try:
        backend = LocalBackend(cfg.model_path, cfg.unnorm_key, cfg.device)
        backend.load()
    except VlaError as exc:
        raise ConfigError("unnorm_key" if exc.reason == "unnorm_key" else "model_path", str(exc)) from None
    return backend


class OpenVlaExecutorNode(ReleasingLifecycleNode):
    """Thin lifecycle shell around the VLA backend, the action scaling and the step monitor."""

    def __init__(self, **kwargs) -> None:
        super().__init__("openvla_executor", **kwargs)
        declare_parameters(self, ExecutorConfig, enforce_ranges=False)
        self.config: Optional[ExecutorConfig] = None
        self.backend = None
        self.templates: Optional[InstructionTemplates] = None
        self.monitor: Optional[StepMonitor] = None
        self.scaling: Optional[ArmScaling] = None
        self.gripper_map: Optional[GripperMapping] = None
        self.state_label = "unconfigured"
        self.last_error = ""
        self.last_vla_error = ""
        self.consecutive_vla_errors = 0
        self.counts: Counter[str] = Counter()
        self.rejections = Rejections(self.get_logger())
        # the plan
        self.plan_id = ""
        self.steps: list[PlannedStep] = []
        self.index = 0
        self.generation = 0           # bumped whenever the current step changes: older VLA answers are dropped
        self.ticks = 0
        # the latest inputs
        self.image: Optional[np.ndarray] = None
        self.image_time: Optional[float] = None
        self.gripper_m: Optional[float] = None
        self.joints_time: Optional[float] = None
        self.ee_xyz: Optional[tuple[float, float, float]] = None
        self.pose_time: Optional[float] = None
        self.commanded_gripper_m = math.nan
        # the VLA call in flight: (generation, future, monotonic start); a call of an older generation is cancelled
        self.pool: Optional[ThreadPoolExecutor] = None
        self.in_flight: Optional[tuple[int, Future, float, Optional[tuple[float, float, float]]]] = None
        self.ee_pub = self.outcome_pub = self.context_pub = None
        self._subscriptions: list = []
        self._control_timer = None
        self.group = MutuallyExclusiveCallbackGroup()
        self._lock = threading.Lock()  # transitions against callbacks (lifecycle services run outside the group)
        # Diagnostics live as long as the node, in every lifecycle state (they say which).
        self.diag_pub = self.create_publisher(DiagnosticArray, names.DIAGNOSTICS, qos.DIAGNOSTICS)
        period = self.get_parameter("diagnostics_period_s").value
        period = period if isinstance(period, float) and 0.05 <= period <= 60.0 else 1.0
        steady_timer(self, period, self.publish_diagnostics, MutuallyExclusiveCallbackGroup())

    # ------------------------------------------------------------------ lifecycle

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Validate the parameters, build the backend (local: load the model), create topics."""
        try:
            cfg = read_config(self, ExecutorConfig)
            reject_undeclared(self)
            started = time.monotonic()
            templates, monitor_cfg = cfg.templates(), cfg.monitor_config()
            scaling, gripper = cfg.scaling(), cfg.gripper()
            backend = build_backend(cfg)
        except ConfigError as exc:
            self.last_error = str(exc)
            self.get_logger().error(f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        with self._lock:
            self.config, self.templates, self.scaling, self.gripper_map = cfg, templates, scaling, gripper
            self.monitor = StepMonitor(monitor_cfg)
            self.backend = backend
            self.last_error = ""
            self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vla")
        self.ee_pub = self.create_lifecycle_publisher(EndEffectorDelta, names.EE_DELTA_CMD, qos.EVENTS)
        self.outcome_pub = self.create_lifecycle_publisher(ExecutionOutcome, names.OUTCOMES, qos.EVENTS)
        self.context_pub = self.create_lifecycle_publisher(ContextEntry, names.CONTEXT, qos.EVENTS)
        self._subscriptions = [
            self.create_subscription(Plan, names.PLAN, self.on_plan, qos.PLANS, callback_group=self.group),
            self.create_subscription(Image, cfg.image_topic, self.on_image, qos.STATE, callback_group=self.group),
            self.create_subscription(JointState, names.JOINT_STATES, self.on_joints, qos.STATE,
                                     callback_group=self.group),
            self.create_subscription(PoseStamped, names.END_POSE, self.on_pose, qos.STATE, callback_group=self.group),
            self.create_subscription(VerifierVerdict, names.VERDICTS, self.on_verdict, qos.EVENTS,
                                     callback_group=self.group),
            self.create_subscription(Episode, names.EPISODE, self.on_episode, qos.EVENTS, callback_group=self.group),
        ]
        self.state_label = "inactive"
        self.get_logger().info(f"configured in {time.monotonic() - started:.1f} s: agent '{cfg.agent_id}', "
                               f"{backend.describe()}, image '{cfg.image_topic}', every {cfg.control_period_s:g} s")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Start the control loop (the current step, if any, starts again now)."""
        with self._lock:
            self._control_timer = steady_timer(self, self.config.control_period_s, self.tick, self.group)
            self.state_label = "active"
            self._begin_step()
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop the control loop: no more commands (an answer in flight is dropped)."""
        with self._lock:
            self._stop_control()
            self.state_label = "inactive"
        return super().on_deactivate(state)

    def _stop_control(self) -> None:
        if self._control_timer is not None:
            self._control_timer.destroy()
            self._control_timer = None
        self.generation += 1
        self._abandon_request()
        if self.monitor is not None:
            self.monitor.stop()

    def _release(self) -> None:
        """Cleanup and shutdown: free the backend (the model), the topics and the plan."""
        with self._lock:
            self._stop_control()
            for sub in self._subscriptions:
                sub.destroy()
            self._subscriptions = []
            for pub in (self.ee_pub, self.outcome_pub, self.context_pub):
                if pub is not None:
                    self.destroy_lifecycle_publisher(pub)
            self.ee_pub = self.outcome_pub = self.context_pub = None
            if self.pool is not None:
                self.pool.shutdown(wait=False, cancel_futures=True)
                self.pool = None
            if self.backend is not None:
                self.backend.close()
                self.backend = None
            self.plan_id, self.steps, self.index = "", [], 0
            self.monitor = None

    # ------------------------------------------------------------------ inputs

    def on_plan(self, msg: Plan) -> None:
        """Take a plan of this agent: validated whole, it replaces the current one; a malformed one is counted."""
        with self._lock:
            if self.config is None or msg.agent_id != self.config.agent_id:
                self.counts["plans_other_agents"] += 1
                return
            try:
                plan_id = check_id("plan_id", msg.plan_id)
                steps = self._parse_steps(msg)
            except InvalidInput as exc:  # InstructionError and StepError included
                self.rejections.reject("plan", exc, msg.plan_id)
                return
            if plan_id == self.plan_id:
                self.counts["plans_repeated"] += 1
                return
            running = self.monitor is not None and self.monitor.active
            start = plan_start([s.call() for s in self.steps[self.index:]] if running else [],
                               [s.call() for s in steps], msg.trigger_kind)
            if start != PlanStart.REPLACES:
                # the same steps from the running one on: the running step goes on (its timeout and action budget
                # still count); a drift or loop repair gives the VLA its instruction anew
                self.plan_id, self.steps, self.index = plan_id, steps, 0
                self.counts["plans_unchanged"] += 1
                if start == PlanStart.RESTARTS:
                    self.counts["steps_restarted"] += 1
                    self.generation += 1
                    self._abandon_request()
                self.get_logger().info(f"plan '{shorten(plan_id)}': the same steps from the running one on; it "
                                       + ("repairs a " + TriggerKind(msg.trigger_kind).label + ": the instruction "
                                          "is given anew" if start == PlanStart.RESTARTS else "goes on"))
                return
            if running:
                self.counts["steps_replaced"] += 1
            self.plan_id, self.steps, self.index = plan_id, steps, 0
            self.counts["plans"] += 1
            self.get_logger().info(f"plan '{shorten(plan_id)}': " + (", ".join(s.describe() for s in steps) or "empty"))
            if self.state_label == "active":
                self._begin_step()

    def _parse_steps(self, msg: Plan) -> list[PlannedStep]:
        if len(msg.steps) > MAX_PLAN_STEPS:
            raise InvalidInput("long_steps", f"the plan has {len(msg.steps)} steps (at most {MAX_PLAN_STEPS})")
        steps = []
        for i, raw in enumerate(msg.steps):
            step = step_from_message(raw.action, raw.parameters_json)
            instruction = self.templates.instruction(step.action, step.parameters)
            steps.append(PlannedStep(i, step, instruction, self.monitor.spec(step.action, step.parameters)))
        return steps

    def on_episode(self, msg: Episode) -> None:
        """A new episode ends the current plan without an outcome (it was for the world that ended: its running
        step's outcome, and the timeout it started counting, belong to no step of the new episode); the arm holds
        until the new episode's first plan."""
        if msg.event != EpisodeEvent.START:
            return
        with self._lock:
            if self.monitor is None or not self.steps:
                return
            self.get_logger().info(f"episode {msg.episode} began: plan '{shorten(self.plan_id)}' ended; idle")
            self.plan_id, self.steps, self.index = "", [], 0
            self._begin_step()      # no current step: the monitor stops, the request in flight is dropped
            self.counts["plans_ended_by_episode"] += 1  # last: a reader that sees the count sees the arm idle

    def on_verdict(self, msg: VerifierVerdict) -> None:
        """A confident violation for this agent halts the running step (OmniAct's preemption)."""
        with self._lock:
            cfg = self.config
            if cfg is None or msg.agent_id != cfg.agent_id or not msg.violation:
                return
            confidence = float(msg.confidence)
            if not math.isfinite(confidence) or not 0.0 <= confidence <= 1.0:
                self.rejections.reject("verdict", InvalidInput("confidence", f"confidence {confidence} is not in "
                                                               "[0, 1]"), msg.agent_id)
                return
            if not cfg.halt_on_verdict or confidence < cfg.halt_min_confidence:
                self.counts["verdicts_not_halting"] += 1
                return
            if self._control_timer is None or self.current is None or not self.monitor.active:
                self.counts["verdicts_idle"] += 1
                return
            self._abandon_request()
            self._hold()
            self.counts["halts"] += 1
            self._finish(self.monitor.preempt(time.monotonic(), shorten(msg.detail, 300)))

    def _hold(self) -> None:
        """A zero end-effector step: the arm holds the pose it measures now (the gripper stays as it is)."""
        msg = EndEffectorDelta(translation=Vector3(), rotation=Vector3(), gripper=math.nan)
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.header.frame_id = self.config.frame_id
        self.ee_pub.publish(msg)

    def on_image(self, msg: Image) -> None:
        """Keep the latest camera image (malformed images are counted)."""
        try:
            image = image_to_array(msg)
        except InvalidInput as exc:
            self.rejections.reject("image", exc)
            return
        self.image, self.image_time = image, time.monotonic()
        self.counts["images"] += 1

    def on_joints(self, msg: JointState) -> None:
        """Keep the gripper opening (the `gripper_joint` position)."""
        try:
            index = list(msg.name).index(self.config.gripper_joint)
            opening = float(msg.position[index])
        except (ValueError, IndexError):
            self.rejections.reject("joint_states", InvalidInput("no_gripper", f"joint_states without a "
                                                                f"'{self.config.gripper_joint}' position"))
            return
        if not math.isfinite(opening):
            self.rejections.reject("joint_states", InvalidInput("non_finite", "the gripper position is not finite"))
            return
        self.gripper_m, self.joints_time = opening, time.monotonic()

    def on_pose(self, msg: PoseStamped) -> None:
        """Keep the end effector's position."""
        p = msg.pose.position
        xyz = (float(p.x), float(p.y), float(p.z))
        if not all(math.isfinite(v) for v in xyz):
            self.rejections.reject("end_pose", InvalidInput("non_finite", "the end pose is not finite"))
            return
        self.ee_xyz, self.pose_time = xyz, time.monotonic()

    # ------------------------------------------------------------------ the control loop

    @property
    def current(self) -> Optional[PlannedStep]:
        """The step being executed (None when idle)."""
        return self.steps[self.index] if self.index < len(self.steps) else None

    def _abandon_request(self) -> None:
        """Forget the VLA call in flight (its generation is over, so it cancels itself); counted when it was running."""
        if self.in_flight is not None and not self.in_flight[1].done():
            self.counts["vla_requests_cancelled"] += 1
        self.in_flight = None

    def _begin_step(self) -> None:
        self.generation += 1
        self._abandon_request()
        step = self.current
        if step is None:
            self.monitor.stop()
            return
        self.monitor.start(step.spec, time.monotonic())
        self.get_logger().info(f"step {step.index}: {step.describe()} -> '{step.instruction}'")

    def tick(self) -> None:
        """One control tick: take a finished VLA answer, judge the step, ask for the next action."""
        with self._lock:
            if self._control_timer is None or self.monitor is None:
                return
            self.ticks += 1
            now = time.monotonic()
            # the next request's observation is taken before this tick's step goes out, so the image and the pose
            # it is anchored to are both from before that step, whatever the callbacks on other threads do meanwhile
            image, observed_xyz = self.image, self.ee_xyz
            result = self._take_answer(now)
            state_time = None if self.joints_time is None or self.pose_time is None else \
                min(self.joints_time, self.pose_time)
            judged = self.monitor.observe(Observation(now, self.gripper_m, self.ee_xyz, self.commanded_gripper_m,
                                                      state_time, self.image_time))
            result = result or judged
            if result is not None:
                self._finish(result)
                return
            step = self.current
            if step is not None and self.monitor.active and self.in_flight is None and image is not None:
                generation = self.generation
                future = self.pool.submit(self._predict, self.backend, image, self.config.image_size,
                                          step.instruction, lambda: generation != self.generation)
                self.in_flight = (generation, future, now, observed_xyz)   # the pose the VLA's answer is from
                self.counts["vla_requests"] += 1

    @staticmethod
    def _predict(backend, image: np.ndarray, size: int, instruction: str, cancelled) -> np.ndarray:
        # `cancelled` turns true when the step changes or the loop stops: the request ends within a poll, so the
        # single worker is free for the next step's request at once instead of queueing it behind a slow answer
        return backend.predict(resize_image(np.ascontiguousarray(image), size), instruction, cancelled)

    def _take_answer(self, now: float) -> Optional[StepResult]:
        if self.in_flight is None or not self.in_flight[1].done():
            return None
        generation, future, _, observed_xyz = self.in_flight
        self.in_flight = None
        if generation != self.generation or not self.monitor.active:
            self.counts["answers_dropped"] += 1
            return None
        try:
            arm = to_arm(future.result(), self.scaling, self.gripper_map)
        except (VlaError, ActionError) as exc:
            return self._vla_error(now, exc.reason, str(exc))
        except Exception as exc:  # noqa: BLE001 - a backend bug must not stop the control loop
            return self._vla_error(now, "internal", f"{type(exc).__name__}: {exc}")
        self.consecutive_vla_errors = 0
        if self.config.anchor_actions and observed_xyz is not None and self.ee_xyz is not None:
            arm = anchored(arm, observed_xyz, self.ee_xyz, self.scaling)
            self.counts["actions_anchored"] += 1
        msg = EndEffectorDelta(translation=Vector3(x=arm.translation_m[0], y=arm.translation_m[1],
                                                   z=arm.translation_m[2]),
                               rotation=Vector3(x=arm.rotation_rad[0], y=arm.rotation_rad[1], z=arm.rotation_rad[2]),
                               gripper=arm.gripper_m)
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.header.frame_id = self.config.frame_id
        self.ee_pub.publish(msg)
        self.commanded_gripper_m = arm.gripper_m
        self.monitor.action_sent()
        self.counts["actions"] += 1
        if arm.clipped:
            self.counts["actions_clipped"] += 1
        return None

    def _vla_error(self, now: float, reason: str, detail: str) -> Optional[StepResult]:
        self.counts["vla_errors"] += 1
        self.counts[f"vla_errors.{reason}"] += 1
        self.consecutive_vla_errors += 1
        self.last_vla_error = detail
        self.get_logger().warning(f"VLA error ({reason}): {shorten(detail, 200)}", throttle_duration_sec=2.0)
        return self.monitor.vla_error(now, detail)

    def _finish(self, result: StepResult) -> None:
        step = self.current
        failure = Failure(result.failure)
        stamp = self.get_clock().now().to_msg()
        outcome = ExecutionOutcome(agent_id=self.config.agent_id, step=self.ticks, action=step.action,
                                   success=result.success, detail=result.detail, failure=int(failure))
        outcome.header.stamp = stamp
        text = outcome_text(step.describe(), result)
        entry = ContextEntry(agent_id=self.config.agent_id, step=self.ticks, block=int(Block.HISTORY),
                             kind=(EntryKind.ACTION_OUTCOME if result.success else EntryKind.FAILURE_TRACE).value,
                             text=text)
        entry.header.stamp = stamp
        self.counts["steps_succeeded" if result.success else f"steps_failed.{failure.label}"] += 1
        if result.success:
            self.get_logger().info(f"step {step.index} {text}")
        else:
            self.get_logger().warning(f"step {step.index} {text}")
        if result.success or (self.config.on_failure == "continue" and failure != Failure.PREEMPTED):
            self.index += 1
        else:
            self.index = len(self.steps)  # abandoned: idle until the next plan
        if self.current is None:
            self.get_logger().info(f"plan '{shorten(self.plan_id)}' "
                                   f"{'done' if result.success else 'ended after a failure'}: idle")
        self._begin_step()
        # published once the next step has begun: whoever reads the outcome sees the executor past it
        self.outcome_pub.publish(outcome)
        self.context_pub.publish(entry)

    # ------------------------------------------------------------------ monitoring

    def publish_diagnostics(self) -> None:
        """Lifecycle state, the current step, counts, VLA errors and rejected input on /diagnostics."""
        with self._lock:
            array = self._diagnostics()
        self.diag_pub.publish(array)

    def _diagnostics(self) -> DiagnosticArray:
        cfg = self.config
        step = self.current if self.monitor is not None else None
        gripper = self.monitor.gripper if self.monitor is not None else None
        values = {"state": self.state_label, "agent_id": cfg.agent_id if cfg else "",
                  "backend": self.backend.describe() if self.backend is not None else "",
                  "plan_id": self.plan_id, "step": f"{step.index}: {step.describe()}" if step else "idle",
                  "instruction": step.instruction if step else "", "ticks": self.ticks,
                  "gripper_m": "" if self.gripper_m is None else f"{self.gripper_m:.4f}",
                  "holding": bool(gripper and gripper.holding), "consecutive_vla_errors": self.consecutive_vla_errors,
                  "vla_in_flight_s": "" if self.in_flight is None else f"{time.monotonic() - self.in_flight[2]:.2f}",
                  "last_vla_error": self.last_vla_error, **dict(sorted(self.counts.items())),
                  **{f"rejected.{k}": v for k, v in sorted(self.rejections.counts.items())}}
        warnings = nonzero(self.counts, ("vla_errors", "actions_clipped")) + \
            [f"rejected.{k}" for k in sorted(self.rejections.counts)]
        errors = []
        if self.last_error and self.backend is None:
            errors.append(f"configure failed: {self.last_error}")
        if cfg is not None and self.consecutive_vla_errors >= cfg.max_vla_errors:
            errors.append(f"VLA failing ({self.consecutive_vla_errors} errors in a row): {self.last_vla_error}")
        return diagnostic_array(f"{self.get_name()}: executor", values, self.get_clock().now().to_msg(), warnings,
                                errors)


def main(args=None) -> int:
    """`ros2 run robot_bridge openvla_executor` (configures and activates itself with `autostart`)."""
    return spin_node(OpenVlaExecutorNode, "openvla_executor", args, threads=EXECUTOR_THREADS)


if __name__ == "__main__":
    sys.exit(main())
