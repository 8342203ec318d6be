"""erecap_planner lifecycle node: serves the Replan action with E-RECAP (or a baseline compressor).

Names are relative (the stack's namespace, /brace by default, comes from launch).

Subscribes  context (ContextEntry), episode (Episode: at EVENT_START every entry
            stamped before the episode's start is forgotten)
Publishes   replan_calls (ReplanCall, one per call; lifecycle publisher), /diagnostics
Action server  `replan_action` (Replan), present only while the node is active,
            so a client that sees the server can be served: feedback per
            phase; result = Plan + ReplanCall. One model serves one call at a
            time; accepted calls wait in an earliest-deadline-first queue
            (call_queue.py), where a newer call for an agent supersedes its
            waiting older one and a call past its hard deadline leaves
            unserved. A waiting goal holds no executor thread.

Lifecycle: configure loads the model, the predictor and the action schema and
fails (naming the parameter) on an unknown model path, a keep ratio outside
(0, 1], a pruning layer beyond the model's depth or a predictor made for
another architecture; activate creates the action server; deactivate removes
it (running calls finish); cleanup frees the model. With `autostart` the node
configures and activates itself (brace_common.spin). Stamps are ROS time
(/clock with use_sim_time); latencies and deadlines run on the steady clock.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
from typing import Optional

from brace_msgs.action import Replan
from brace_msgs.msg import ContextEntry, Episode, ReplanCall
from diagnostic_msgs.msg import DiagnosticArray
from rclpy._rclpy_pybind11 import InvalidHandle, RCLError
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.time import Time

from brace_common import names, qos
from brace_common.clock import seconds_of, steady_timer
from brace_common.config import ConfigError, resolve_path
from brace_common.diagnostics import diagnostic_array, nonzero
from brace_common.params import declare_parameters, read_config, reject_undeclared
from brace_common.spin import spin_node
from brace_common.validation import Rejections
from brace_common.vocabulary import CallStatus, EpisodeEvent

from . import convert
from .call_path import CallOutcome, PlannerCallPath, unserved_outcome
from .call_queue import CallQueue, QueuedCall
from .config import PlannerConfig
from .context import ContextBuffer
from .plan_parser import ActionSchema
from .predictor import PredictorBank, PredictorMismatchError
from .pruned_forward import CallAborted
from .pruning import PruneSchedule, table8_layers

QUEUE_CHECK_PERIOD_S = 0.05  # how often waiting calls are checked against their hard deadlines
EXECUTOR_THREADS = 3  # the running call, the context subscription, goals / cancels / timers


def _goal_key(goal_handle) -> bytes:
    return bytes(goal_handle.goal_id.uuid)


def build_call_path(cfg: PlannerConfig, logger=None) -> PlannerCallPath:
    """Load model, predictor and schema for `cfg`; ConfigError naming the parameter on failure."""
    import yaml

    from .models import load_model
    from .precision import resolve

    try:
        schema = ActionSchema.from_dict(yaml.safe_load(cfg.schema_path().read_text()) or {})
    except (OSError, ValueError, AttributeError, yaml.YAMLError) as exc:
        raise ConfigError("action_schema_file", f"cannot load {cfg.schema_path()}: {exc}") from None
    try:
        precision = resolve(cfg.device, cfg.dtype, cfg.decode_weights)
    except ValueError as exc:
        raise ConfigError("device" if "device" in str(exc) else "decode_weights", str(exc)) from None
    if logger is not None:
        logger.info(f"precision: {precision.device}, {precision.reason}")
    try:
        model, tokenizer = load_model(cfg.model_path, precision.device, precision.dtype)
    except (FileNotFoundError, OSError, ValueError) as exc:
        raise ConfigError("model_path", str(exc)) from None
    if cfg.adapter_path:
        from .adapter import AdapterMismatchError, merge_adapter

        try:
            merge_adapter(model, resolve_path(cfg.adapter_path))
        except (AdapterMismatchError, FileNotFoundError, OSError) as exc:
            raise ConfigError("adapter_path", str(exc)) from None
    depth = model.config.num_hidden_layers
    layers = cfg.pruning_layers or table8_layers(depth)
    schedule = PruneSchedule(tuple(layers), cfg.keep_ratio, cfg.head_tokens, cfg.tail_min, cfg.tail_frac, cfg.first_cut)
    try:
        schedule.validate(depth)
    except ValueError as exc:
        raise ConfigError("pruning_layers", str(exc)) from None
    predictors: Optional[PredictorBank] = None
    if cfg.compressor == "erecap":
        if cfg.predictor_path:
            try:
                predictors = PredictorBank.load(resolve_path(cfg.predictor_path), model.config)
                predictors.check_compatible(model.config, layers)
            except (PredictorMismatchError, FileNotFoundError) as exc:
                raise ConfigError("predictor_path", str(exc)) from None
        else:
            predictors = PredictorBank.for_model(model.config, layers)
            if logger is not None:
                logger.warning("no predictor_path: E-RECAP runs with an UNTRAINED predictor (random token scores)")
    try:
        return PlannerCallPath(model, tokenizer, schema, cfg.compressor, schedule, predictors, cfg.max_new_tokens,
                               cfg.system_prompt, protect_blocks=cfg.protect_blocks, model_name=cfg.model_path,
                               decoding=cfg.decoding, decode_weights=precision.decode_weights,
                               plan_steps={mode: n for mode, n in enumerate(cfg.plan_steps) if n},
                               layout=cfg.context_layout, prefix_reuse=cfg.prefix_reuse,
                               max_context_tokens=cfg.max_context_tokens)
    except ValueError as exc:
        raise ConfigError("decoding" if "decoding" in str(exc) else "compressor", str(exc)) from None


class ErecapPlannerNode(LifecycleNode):
    """Thin lifecycle shell around PlannerCallPath."""

    def __init__(self, **kwargs) -> None:
        super().__init__("erecap_planner", **kwargs)
        declare_parameters(self, PlannerConfig, enforce_ranges=False)
        self.config: Optional[PlannerConfig] = None
        self.call_path: Optional[PlannerCallPath] = None
        self.buffer = ContextBuffer()
        self.buffer_lock = threading.Lock()
        self.queue = CallQueue()  # one model: calls run one at a time, earliest deadline first
        self.calls: dict[bytes, QueuedCall] = {}  # goal id -> its call
        self.state_label = "unconfigured"
        self.last_error = ""
        self.ids = itertools.count(1)
        self.counts = {"calls": 0, "malformed_context": 0, "context_entries": 0, "goals_rejected": 0,
                       "entries_forgotten": 0, "goal_wait_before_acceptance_ms": 0.0,
                       **{f"status.{s.label}": 0 for s in CallStatus}}
        self.rejections = Rejections(self.get_logger())
        self.action_server: Optional[ActionServer] = None
        self.calls_pub = None
        self._subscriptions: list = []
        self._queue_timer = None
        # Diagnostics live as long as the node, in every lifecycle state (they say which).
        self.diag_pub = self.create_publisher(DiagnosticArray, names.DIAGNOSTICS, qos.DIAGNOSTICS)
        self._timers_group = MutuallyExclusiveCallbackGroup()  # not the default group (see brace_common.clock)
        steady_timer(self, self.get_parameter("diagnostics_period_s").value, self.publish_diagnostics,
                     self._timers_group)

    # ------------------------------------------------------------------ lifecycle

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Validate parameters, load model / predictor / schema, create the topics."""
        try:
            self.config = read_config(self, PlannerConfig)
            reject_undeclared(self)
            started = time.monotonic()
            self.call_path = build_call_path(self.config, self.get_logger())
        except ConfigError as exc:
            self.last_error = str(exc)
            self.get_logger().error(f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        self.buffer = ContextBuffer(self.config.max_history)
        self.calls_pub = self.create_lifecycle_publisher(ReplanCall, names.REPLAN_CALLS, qos.EVENTS)
        context_group = MutuallyExclusiveCallbackGroup()  # entries and episode starts in arrival order
        self._subscriptions = [
            self.create_subscription(ContextEntry, names.CONTEXT, self.on_context, qos.INPUTS,
                                     callback_group=context_group),
            self.create_subscription(Episode, names.EPISODE, self.on_episode, qos.INPUTS,
                                     callback_group=context_group)]
        self._queue_timer = steady_timer(self, QUEUE_CHECK_PERIOD_S, self.expire_waiting, self._timers_group)
        self.state_label = "inactive"
        self.get_logger().info(
            f"configured in {time.monotonic() - started:.1f} s: model '{self.config.model_path}' on "
            f"{self.call_path.plain.device}, compressor '{self.config.compressor}', keep ratio {self.config.keep_ratio}, "
            f"pruning layers {list(self.call_path.pruned.schedule.layers) if self.call_path.pruned else []}")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Serve the Replan action (a client that sees the server is served from now on)."""
        self.action_server = ActionServer(
            self, Replan, self.config.replan_action, self.execute, goal_callback=self.on_goal,
            handle_accepted_callback=self.on_accepted, cancel_callback=self.on_cancel,
            callback_group=ReentrantCallbackGroup(), goal_service_qos_profile=qos.ACTION_SERVICES,
            result_service_qos_profile=qos.ACTION_SERVICES, cancel_service_qos_profile=qos.ACTION_SERVICES,
        )
        self.state_label = "active"
        self.get_logger().info(f"serving Replan on '{self.config.replan_action}'")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop serving (a running call finishes; waiting calls are answered when their deadline passes)."""
        self._destroy_server()
        self.state_label = "inactive"
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Release the model and the topics."""
        self._release()
        self.state_label = "unconfigured"
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Same as cleanup."""
        self._release()
        self.state_label = "finalized"
        return TransitionCallbackReturn.SUCCESS

    def _destroy_server(self) -> None:
        if self.action_server is not None:
            self.action_server.destroy()
            self.action_server = None

    def _release(self) -> None:
        self._destroy_server()
        for entity in (*self._subscriptions, self._queue_timer):
            if entity is not None:
                entity.destroy()
        if self.calls_pub is not None:
            self.destroy_lifecycle_publisher(self.calls_pub)
        self._subscriptions, self.calls_pub, self._queue_timer = [], None, None
        self.call_path = None
        # Waiting goals belonged to the destroyed server: their callers see no result and cancel at their deadlines.
        self.queue, self.calls = CallQueue(), {}

    # ------------------------------------------------------------------ context

    def on_context(self, msg: ContextEntry) -> None:
        """Add a context entry; malformed entries are counted and dropped."""
        try:
            entry = convert.entry_from_msg(msg, self.config.max_entry_chars)
        except ValueError as exc:
            self.counts["malformed_context"] += 1
            self.rejections.reject("context_entry", exc, msg.agent_id)
            return
        with self.buffer_lock:
            self.buffer.add(entry)
        self.counts["context_entries"] += 1

    def on_episode(self, msg: Episode) -> None:
        """A new episode: forget what was said before it began (entries of the new one may already be in)."""
        if msg.event != EpisodeEvent.START:
            return
        with self.buffer_lock:
            self.counts["entries_forgotten"] += self.buffer.forget_before(seconds_of(msg.header.stamp))

    # ------------------------------------------------------------------ calls

    def on_goal(self, goal) -> GoalResponse:
        """Accept a goal while active when every field is within bounds (rejections counted by reason)."""
        if self.action_server is None or self.call_path is None:
            self.counts["goals_rejected"] += 1
            return GoalResponse.REJECT
        try:
            convert.request_from_goal(goal)
        except ValueError as exc:
            self.counts["goals_rejected"] += 1
            self.rejections.reject("goal", exc, goal.decision_id or goal.agent_id)
            return GoalResponse.REJECT
        return GoalResponse.ACCEPT

    def on_accepted(self, goal_handle) -> None:
        """Queue an accepted goal (EDF); answer the agent's older waiting call it supersedes; start one if idle.

        The call's clock starts when the goal was sent (its stamp), not when it was accepted: a wait before
        acceptance counts in its latency and uses up its deadline, as the queue does.
        """
        request = convert.request_from_goal(goal_handle.request)
        now = self.get_clock().now()
        sent = Time.from_msg(goal_handle.request.header.stamp, clock_type=now.clock_type)
        before_ms = (now - sent).nanoseconds / 1e6 if sent.nanoseconds > 0 else 0.0
        before_ms = min(max(0.0, before_ms), request.hard_deadline_ms)  # a clock that disagrees counts nothing
        self.counts["goal_wait_before_acceptance_ms"] = round(before_ms, 1)
        call = QueuedCall(f"{self.get_name()}/{next(self.ids)}", request.agent_id,
                          time.monotonic() - before_ms / 1000.0, request.slo_ms, request.hard_deadline_ms,
                          handle=(goal_handle, request, goal_handle.request.header.stamp if before_ms else now.to_msg()))
        self.calls[_goal_key(goal_handle)] = call
        older = self.queue.submit(call)
        if older is not None:
            older.handle[0].execute()  # answered at once: superseded
        self._dispatch()

    def on_cancel(self, goal_handle) -> CancelResponse:
        """Accept every cancel: a waiting call is answered at once, the running one stops at its next check."""
        call = self.calls.get(_goal_key(goal_handle))
        if call is not None and self.queue.remove(call.call_id, "cancelled") is not None:
            goal_handle.execute()
        return CancelResponse.ACCEPT

    def expire_waiting(self) -> None:
        """Answer every waiting call whose hard deadline has passed (it would only be cancelled later)."""
        for call in self.queue.expired(time.monotonic()):
            call.handle[0].execute()

    def _dispatch(self) -> None:
        call = self.queue.start_next()
        if call is not None:
            call.handle[0].execute()

    def execute(self, goal_handle) -> Replan.Result:
        """Run (or answer without running) one call: feedback per phase, record on replan_calls."""
        call = self.calls.pop(_goal_key(goal_handle))
        _, request, accepted = call.handle
        try:
            if call.outcome == "running":
                outcome = self._run(goal_handle, call, request)
            else:
                outcome = unserved_outcome(call, self.config.compressor)
        finally:
            if call.outcome == "running":
                self.queue.finish(call)
                self._dispatch()
        self.counts["calls"] += 1
        self.counts[f"status.{CallStatus(outcome.status).label}"] += 1
        if outcome.status != CallStatus.OK:
            self.get_logger().warning(f"call {call.call_id} for {request.agent_id}: {outcome.error}",
                                      throttle_duration_sec=1.0)
        record = convert.call_to_msg(outcome, request, call.call_id, self.config.model_path, accepted)
        result = Replan.Result(call=record)
        result.plan = convert.plan_to_msg(outcome, request, f"{call.call_id}/plan", self.get_clock().now().to_msg())
        try:
            if self.calls_pub is not None and self.calls_pub.is_activated:
                self.calls_pub.publish(record)
            if outcome.status == CallStatus.CANCELLED and goal_handle.is_cancel_requested:
                goal_handle.canceled()
            else:
                goal_handle.succeed()
        except (RCLError, InvalidHandle) as exc:
            if self.context.ok():
                raise
            self.get_logger().info(f"shutting down: call {call.call_id} not answered ({exc})")
        return result

    def _run(self, goal_handle, call: QueuedCall, request) -> CallOutcome:
        def feedback(phase: str, elapsed_ms: float) -> None:
            if not self.context.ok():
                raise CallAborted("the node is shutting down")
            fb = Replan.Feedback(phase=phase, elapsed_ms=float(elapsed_ms))
            fb.header.stamp = self.get_clock().now().to_msg()
            try:
                goal_handle.publish_feedback(fb)
            except (RCLError, InvalidHandle) as exc:
                if self.context.ok():
                    raise
                raise CallAborted("the node is shutting down") from exc

        with self.buffer_lock:
            snapshot = self.buffer.snapshot()  # the newest context: a call that waited plans from what is known now
        return self.call_path.run(snapshot, request,
                                  cancelled=lambda: goal_handle.is_cancel_requested or not self.context.ok(),
                                  on_phase=feedback, queued_at=call.accepted_at)

    # ------------------------------------------------------------------ monitoring

    def publish_diagnostics(self) -> None:
        """Lifecycle state, call counts by status, the queue, prefix reuse and malformed input on /diagnostics."""
        values = {"state": self.state_label, "model": self.config.model_path if self.config else "",
                  "compressor": self.config.compressor if self.config else "", **self.counts,
                  **{f"rejected.{k}": v for k, v in sorted(self.rejections.counts.items())},
                  "queue.waiting": len(self.queue), **{f"queue.{k}": v for k, v in self.queue.counts.items()}}
        path = self.call_path
        if path is not None:
            values.update({"dtype": str(path.stack.dtype).replace("torch.", ""),
                           "decode_weights": path.stack.decode_weights, "context_layout": path.layout})
            if path.prefix is not None:
                stats = path.prefix.stats
                values.update({"prefix.hit_rate": round(stats.hit_rate, 3), "prefix.reused_share":
                               round(stats.reuse_share, 3), "prefix.tokens_reused": stats.tokens_reused})
        warnings = nonzero(self.counts, ("malformed_context", "goals_rejected", "status.planner_error",
                                         "status.deadline"))
        errors = [f"configure failed: {self.last_error}"] if self.last_error and self.call_path is None else []
        self.diag_pub.publish(diagnostic_array(f"{self.get_name()}: replanning calls", values,
                                               self.get_clock().now().to_msg(), warnings, errors))


def main(args=None) -> int:
    """`ros2 run erecap_planner erecap_planner` (configures and activates itself with `autostart`)."""
    return spin_node(ErecapPlannerNode, "erecap_planner", args, threads=EXECUTOR_THREADS)


if __name__ == "__main__":
    sys.exit(main())
