"""erecap_planner lifecycle node: serves the Replan action with E-RECAP (or a baseline compressor).

Subscribes context, outcomes, episode (and world_state, world_info where the memory modules or the schema need
them); publishes replan_calls, server_load (backend openai) and /diagnostics; serves `replan_action` while active
(with a planner server, once it answered). Interfaces and lifecycle in docs/nodes.md, the why in docs/planner.md.
"""

from __future__ import annotations

import sys
import time
import traceback
from typing import Optional

from brace_msgs.action import Replan
from brace_msgs.msg import ContextEntry, Episode, ExecutionOutcome, ReplanCall, ServerLoad, WorldInfo, WorldState
from diagnostic_msgs.msg import DiagnosticArray
from rclpy._rclpy_pybind11 import InvalidHandle, RCLError
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn
from rclpy.qos import HistoryPolicy, QoSProfile
from rclpy.time import Time

from brace_common import names, qos
from brace_common.clock import seconds_of, steady_timer
from brace_common.config import ConfigError
from brace_common.counted_inputs import CountedInputs
from brace_common.counters import Health
from brace_common.diagnostics import health_array
from brace_common.lifecycle import ReleasingLifecycleNode, serialized
from brace_common.params import declare_parameters, read_config, reject_undeclared
from brace_common.spin import spin_node, stopping
from brace_common.validation import InvalidInput, Rejections
from brace_common.vocabulary import CallStatus, EpisodeEvent
from brace_common.world_state import world_state_from_msg

from . import convert
from .call_aborted import CallAborted
from .call_path import CallPath
from .call_service import CallService, memory_of
from .config import PlannerConfig
from .factory import build_call_path, describe
from .lookahead_client import LookaheadClient
from .planner_inputs import PlannerInputs
from .server_watch import ServerWatch
from .world_schema import WorldSchema

QUEUE_CHECK_PERIOD_S = 0.05  # how often waiting calls are checked against their hard deadlines
EXECUTOR_THREADS = 3  # the running call, the context subscription, goals / cancels / timers


def _goal_key(goal_handle) -> bytes:
    return bytes(goal_handle.goal_id.uuid)


class ErecapPlannerNode(ReleasingLifecycleNode):
    """Thin lifecycle shell around the call path and the planner's core (inputs, world schema, calls)."""

    def __init__(self, **kwargs) -> None:
        super().__init__("erecap_planner", **kwargs)
        declare_parameters(self, PlannerConfig, enforce_ranges=False)
        self.config: Optional[PlannerConfig] = None
        self.call_path: Optional[CallPath] = None
        self.intake = PlannerInputs(lambda: memory_of(self.call_path))
        self.world = WorldSchema()
        self.service = CallService(self.intake, self.world, self.get_name(), self.get_logger())
        self.inputs = CountedInputs()
        self.rejections = Rejections(self.get_logger())
        self.watch: Optional[ServerWatch] = None  # backend openai: whether the server answers, and its load
        self.lookahead: Optional[LookaheadClient] = None  # the world's transition model (memory module lookahead)
        self.action_server: Optional[ActionServer] = None
        self.calls_pub = self.load_pub = self._queue_timer = self._probe_timer = self._load_timer = None
        # Diagnostics live as long as the node, in every lifecycle state (they say which).
        self.diag_pub = self.create_publisher(DiagnosticArray, names.DIAGNOSTICS, qos.DIAGNOSTICS)
        self._timers_group = MutuallyExclusiveCallbackGroup()  # not the default group (see brace_common.clock)
        steady_timer(self, self.get_parameter("diagnostics_period_s").value, self.publish_diagnostics,
                     self._timers_group)

    # ------------------------------------------------------------------ lifecycle

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Validate parameters, load model / predictor / schema, create the topics and timers."""
        try:
            self.config = cfg = read_config(self, PlannerConfig)
            reject_undeclared(self)
            started = time.monotonic()
            self.call_path = build_call_path(cfg, self.get_logger())
        except ConfigError as exc:
            self.last_error = str(exc)
            self.get_logger().error(f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        self.intake.reset(cfg.context_limits())
        self.world.use(self.call_path, cfg.planner_schema)
        self.service.use(self.call_path)
        self.inputs.forget()  # the subscriptions are new: their publishers' numbering starts again
        self.calls_pub = self.configured(self.create_lifecycle_publisher(ReplanCall, names.REPLAN_CALLS, qos.EVENTS))
        group = MutuallyExclusiveCallbackGroup()  # entries and episode starts in arrival order
        # Keep-last (qos.INPUTS with the node's depth): a flood overwrites, and the gap it leaves is counted.
        context_qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=cfg.context_queue_depth,
                                 reliability=qos.INPUTS.reliability, durability=qos.INPUTS.durability)
        subscribe = self.inputs.subscribe
        self.configured(subscribe(self, ContextEntry, names.CONTEXT, self.on_context, "context", context_qos,
                                  callback_group=group))
        self.configured(subscribe(self, Episode, names.EPISODE, self.on_episode, "episode", callback_group=group))
        self.configured(subscribe(self, ExecutionOutcome, names.OUTCOMES, self.on_outcome, "outcomes",
                                  callback_group=group))
        memory = self.memory()
        if memory is not None and memory.reads_world_states():  # GiG's session graphs and experience bank
            self.configured(subscribe(self, WorldState, names.WORLD_STATE, self.on_world_state, "world_state",
                                      qos.WORLD_STATE, callback_group=group))
        if memory is not None and memory.on("lookahead"):  # GiG's Bounded Lookahead through the world's service
            self.lookahead = LookaheadClient(self, cfg.lookahead_timeout_s, memory.graphs.where)
            self.configured(self.lookahead.client)
            memory.predict = self.lookahead
        if cfg.schema_from_world():  # latched: the current episode's, however late this node starts
            self.configured(self.create_subscription(WorldInfo, names.WORLD_INFO, self.on_world_info,
                                                     qos.WORLD_INFO, callback_group=MutuallyExclusiveCallbackGroup()))
        # Runs only while calls wait (on_accepted restarts it): idle, the planner wakes only for its diagnostics.
        self._queue_timer = self.configured(steady_timer(self, QUEUE_CHECK_PERIOD_S, self.expire_waiting,
                                                         self._timers_group))
        if cfg.backend == "openai":
            self.watch = ServerWatch(self.call_path.backend, cfg.connect_timeout_s + 1.0, cfg.server_probe_period_s,
                                     load=cfg.server_load_period_s > 0)
            # a probe blocks up to connect_timeout_s + 1 s: a group of its own; both timers run while active
            self._probe_timer = self._idle_timer(cfg.server_probe_period_s, self.probe_server)
            if self.watch.load_probe is not None:
                self.load_pub = self.configured(self.create_lifecycle_publisher(ServerLoad, names.SERVER_LOAD,
                                                                                qos.STATE))
                self._load_timer = self._idle_timer(cfg.server_load_period_s, self.publish_server_load)
        self.state_label = "inactive"
        self.get_logger().info(f"configured in {time.monotonic() - started:.1f} s: {describe(cfg, self.call_path)}")
        return TransitionCallbackReturn.SUCCESS

    def _idle_timer(self, period_s: float, callback):
        timer = self.configured(steady_timer(self, period_s, callback, MutuallyExclusiveCallbackGroup()))
        timer.cancel()  # activate starts it
        return timer

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Serve the Replan action; with a planner server, once that server has answered."""
        self.state_label = "active"
        for timer in (self._probe_timer, self._load_timer):
            if timer is not None:
                timer.reset()
        if self.watch is not None:
            self.probe_server()
        else:
            self._serve()
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop serving (a running call finishes; waiting calls are answered when their deadline passes)."""
        self._stop_serving()
        self.state_label = "inactive"
        return super().on_deactivate(state)

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        """From any state: stop serving as deactivate does, then release (the base's rule)."""
        self._stop_serving()
        return super().on_shutdown(state)

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        """A transition raised: stop serving, then release."""
        self._stop_serving()
        return super().on_error(state)

    def _serve(self) -> None:
        # Activate's entity: deactivate (and shutdown or error from active) destroy it, so a client that sees the
        # action server is served.
        self.action_server = ActionServer(
            self, Replan, self.config.replan_action, self.execute, goal_callback=self.on_goal,
            handle_accepted_callback=self.on_accepted, cancel_callback=self.on_cancel,
            callback_group=ReentrantCallbackGroup(), goal_service_qos_profile=qos.ACTION_SERVICES,
            result_service_qos_profile=qos.ACTION_SERVICES, cancel_service_qos_profile=qos.ACTION_SERVICES)
        self.get_logger().info(f"serving Replan on '{self.config.replan_action}'")

    def _stop_serving(self) -> None:
        for timer in (self._probe_timer, self._load_timer):
            if timer is not None:
                timer.cancel()
        if self.action_server is not None:
            self.action_server.destroy()
            self.action_server = None

    def _release(self) -> None:
        """Cleanup and shutdown: the memory system (its summary worker, then its store), the model, the calls."""
        memory = self.memory()
        if memory is not None:
            memory.close()
        self.call_path, self.watch, self.lookahead = None, None, None
        self.calls_pub = self.load_pub = self._queue_timer = self._probe_timer = self._load_timer = None
        self.service.release()

    def memory(self):
        """The call path's memory system (None before configure)."""
        return memory_of(self.call_path)

    # ------------------------------------------------------------------ the planner server (backend openai)

    def probe_server(self) -> None:
        """GET /models on the planner server; the first answer starts serving the action."""
        if self.watch is None or self.state_label != "active":
            return
        said = self.watch.check()
        if said is not None:
            text, first = said
            (self.get_logger().info(text) if first else self.get_logger().warning(text, throttle_duration_sec=10.0))
        if self.watch.probe.answered and self.action_server is None:
            self._serve()

    def publish_server_load(self) -> None:
        """Read the planner server's load and publish it with this node's own requests there."""
        watch = self.watch
        if watch is None or not watch.reports_load() or self.state_label != "active":
            return
        load, none_published = watch.load()
        url = watch.backend.client.base_url
        if none_published:
            self.get_logger().info(f"planner server {url} publishes no load (GET /metrics): each controller sees "
                                   "only its own calls there")
            self._load_timer.cancel()  # asked once
        msg = ServerLoad(server_url=url, reported=load is not None, own_requests=watch.backend.at_server)
        msg.header.stamp = self.get_clock().now().to_msg()
        if load is not None:
            msg.engine, msg.requests_running, msg.requests_waiting = load.engine, load.running, load.waiting
        if self.load_pub is not None and self.load_pub.is_activated:
            self.load_pub.publish(msg)

    # ------------------------------------------------------------------ inputs (converted, then the core's)

    @serialized
    def on_context(self, msg: ContextEntry) -> None:
        """Add a context entry; malformed entries are counted and dropped."""
        try:
            entry = convert.entry_from_msg(msg, self.config.max_entry_chars)
        except ValueError as exc:
            self.intake.malformed("context")
            self.rejections.reject("context_entry", exc, msg.agent_id)
            return
        self.intake.entry(entry)

    @serialized
    def on_outcome(self, msg: ExecutionOutcome) -> None:
        """An executed step: memory's goal stacks advance, a failure writes a reflection (malformed: counted)."""
        try:
            outcome = convert.outcome_from_msg(msg)
        except ValueError as exc:
            self.rejections.reject("outcome", exc, msg.agent_id)
            return
        self.intake.outcome(outcome)

    @serialized
    def on_world_state(self, msg: WorldState) -> None:
        """A world's state: each agent's scene graph joins its session graph (malformed: counted)."""
        try:
            state = world_state_from_msg(msg)
        except ValueError as exc:
            self.intake.malformed("world_states")
            self.rejections.reject("world_state", exc, msg.world)
            return
        self.intake.world_state(state)

    @serialized
    def on_episode(self, msg: Episode) -> None:
        """An episode's start forgets what was said before it; a successful end keeps its trajectories."""
        stamp_s = seconds_of(msg.header.stamp)
        if msg.event == EpisodeEvent.END:
            self.intake.episode_ended(f"{msg.world}/{msg.seed}/{msg.episode}/{stamp_s:.3f}", msg.success,
                                      int(msg.steps), stamp_s, (msg.world, msg.episode))
        elif msg.event == EpisodeEvent.START:
            self.intake.episode_started(stamp_s)

    @serialized
    def on_world_info(self, msg: WorldInfo) -> None:
        """The world's action schema, used from the next call on; a refused one is counted and the current kept."""
        where = f"{msg.world}/{msg.episode}"
        try:
            said = self.world.offer(msg.world, msg.episode, msg.action_schema_json, len(msg.agents))
        except InvalidInput as exc:
            self.rejections.reject("world_info", exc, where)
            return
        except Exception as exc:  # noqa: BLE001 - a schema no check foresaw must not kill the planner (latched:
            # every restart would meet it again); counted apart and logged with its trace, so the gap is seen
            self.rejections.reject("world_info", InvalidInput("unexpected_error", f"{type(exc).__name__}: {exc}"),
                                   where)
            self.get_logger().error("world_info: schema refused by an unexpected error\n"
                                    + "".join(traceback.format_exception(exc)))
            return
        if said is not None:
            (self.get_logger().info if said[1] else self.get_logger().debug)(said[0])

    # ------------------------------------------------------------------ calls

    def on_goal(self, goal) -> GoalResponse:
        """Accept a goal while active when every field is within bounds (rejections counted by reason)."""
        if self.action_server is None or self.call_path is None:
            self.service.rejected()
            return GoalResponse.REJECT
        try:
            convert.request_from_goal(goal)
        except ValueError as exc:
            self.service.rejected()
            self.rejections.reject("goal", exc, goal.decision_id or goal.agent_id)
            return GoalResponse.REJECT
        return GoalResponse.ACCEPT

    def on_accepted(self, goal_handle) -> None:
        """Queue an accepted goal; its clock starts when the goal was sent (its stamp), not when it was accepted."""
        request = convert.request_from_goal(goal_handle.request)
        now = self.get_clock().now()
        sent = Time.from_msg(goal_handle.request.header.stamp, clock_type=now.clock_type)
        before_ms = (now - sent).nanoseconds / 1e6 if sent.nanoseconds > 0 else 0.0
        before_ms = min(max(0.0, before_ms), request.hard_deadline_ms)  # a clock that disagrees counts nothing
        self.service.accept(_goal_key(goal_handle), request, before_ms, goal_handle.execute,
                            goal_handle.request.header.stamp if before_ms else now.to_msg())
        timer = self._queue_timer
        if len(self.service.queue) and timer is not None and timer.is_canceled():
            timer.reset()

    def on_cancel(self, goal_handle) -> CancelResponse:
        """Accept every cancel: a waiting call is answered at once, the running one stops at its next check."""
        if self.service.cancel(_goal_key(goal_handle)):
            goal_handle.execute()
        return CancelResponse.ACCEPT

    def expire_waiting(self) -> None:
        """Answer every waiting call whose hard deadline has passed; idle, the timer stops."""
        self.service.expire()
        timer = self._queue_timer
        if timer is not None and not len(self.service.queue):
            timer.cancel()
            if len(self.service.queue):  # a call queued meanwhile (on_accepted saw the timer still running)
                timer.reset()

    def execute(self, goal_handle) -> Replan.Result:
        """Run (or answer without running) one call: feedback per phase, the record on replan_calls."""
        call = self.service.take(_goal_key(goal_handle))

        def feedback(phase: str, elapsed_ms: float) -> None:
            fb = Replan.Feedback(phase=phase, elapsed_ms=float(elapsed_ms))
            fb.header.stamp = self.get_clock().now().to_msg()
            try:
                if not self.context.ok():
                    raise CallAborted("the node is shutting down")
                goal_handle.publish_feedback(fb)
            except (RCLError, InvalidHandle) as exc:
                if self.context.ok():
                    raise
                raise CallAborted("the node is shutting down") from exc

        outcome = self.service.outcome(call, lambda: goal_handle.is_cancel_requested or stopping()
                                       or not self.context.ok(), feedback)
        model = self.call_path.model_name if self.call_path is not None else self.config.model_path
        record = convert.call_to_msg(outcome, call.request, call.call_id, model, call.stamp)
        result = Replan.Result(call=record)
        result.plan = convert.plan_to_msg(outcome, call.request, f"{call.call_id}/plan",
                                          self.get_clock().now().to_msg())
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

    # ------------------------------------------------------------------ monitoring

    def publish_diagnostics(self) -> None:
        """Lifecycle state and what each owner reports (inputs, calls, backend, server, memory) on /diagnostics."""
        cfg, path = self.config, self.call_path
        schema = ((self.world.source or "none yet") if cfg.schema_from_world() else cfg.action_schema_file) if cfg else ""
        health = Health({"state": self.state_label, "model": cfg.model_path if cfg else "", "action_schema": schema,
                         "compressor": cfg.compressor if cfg else ""},
                        errors=(f"configure failed: {self.last_error}",) if self.last_error and path is None else ())
        health += self.intake.health() + self.service.health() + self.world.health() + self.inputs.health()
        health += Health(self.rejections.health().values)  # named in the warnings by their owners' counters
        if path is not None:
            health += path.backend.health()
        if self.watch is not None:
            health += self.watch.health(self.state_label == "active")
        memory = self.memory()
        if memory is not None:
            health += Health({"memory.modules": ",".join(memory.modules) or "none",
                              "memory.summariser": cfg.memory_summariser_url or "templates"}) + memory.health()
        if self.lookahead is not None:
            health += self.lookahead.health()
        self.diag_pub.publish(health_array(f"{self.get_name()}: replanning calls", health,
                                           self.get_clock().now().to_msg()))


def main(args=None) -> int:
    """`ros2 run erecap_planner erecap_planner` (configures and activates itself with `autostart`)."""
    return spin_node(ErecapPlannerNode, "erecap_planner", args, threads=EXECUTOR_THREADS)


if __name__ == "__main__":
    sys.exit(main())
