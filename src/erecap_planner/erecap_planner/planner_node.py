"""erecap_planner lifecycle node: serves the Replan action with E-RECAP (or a baseline compressor).

Translates parameters, messages and transitions; the call path, inputs, world schema, calls and server watch are its
core. Interfaces and lifecycle in docs/nodes.md, the why in docs/planner.md.
"""

from __future__ import annotations

import sys
import time
from copy import copy
from typing import Optional

from brace_msgs.msg import ContextEntry, Episode, ExecutionOutcome, ReplanCall, ServerLoad, WorldInfo, WorldState
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn

from brace_common import names, qos
from brace_common.clock import steady_timer
from brace_common.config import ConfigError
from brace_common.counted_inputs import CountedInputs
from brace_common.counters import Health
from brace_common.diagnostics import health_array
from brace_common.lifecycle import ReleasingLifecycleNode, serialized
from brace_common.params import declare_parameters, read_config, reject_undeclared
from brace_common.spin import spin_node
from brace_common.validation import InvalidInput, Rejections
from brace_common.world_state import world_state_from_msg

from . import convert
from .call_path import CallPath
from .call_service import CallService, memory_of
from .config import PlannerConfig
from .factory import build_call_path, describe
from .lookahead_client import LookaheadClient
from .planner_inputs import PlannerInputs
from .planner_status import memory_health, planner_health, reported
from .replan_action import ReplanActionServer
from .server_watch import ServerWatch
from .world_schema import WorldSchema

QUEUE_CHECK_PERIOD_S = 0.05  # how often waiting calls are checked against their hard deadlines
EXECUTOR_THREADS = 3  # the running call, the context subscription, goals / cancels / timers


class ErecapPlannerNode(ReleasingLifecycleNode):
    """Thin lifecycle shell around the call path and the planner's core (inputs, world schema, calls)."""

    def __init__(self, **kwargs) -> None:
        super().__init__("erecap_planner", **kwargs)
        declare_parameters(self, PlannerConfig, enforce_ranges=False)
        self.config: Optional[PlannerConfig] = None
        self.call_path: Optional[CallPath] = None
        self.inputs, self.rejections = CountedInputs(), Rejections(self.get_logger())
        self.intake = PlannerInputs(lambda: memory_of(self.call_path), self.rejections)
        self.world = WorldSchema(self.get_logger())
        self.service = CallService(self.intake, self.world, self.get_name(), self.get_logger())
        self.watch: Optional[ServerWatch] = None  # backend openai: whether the server answers, and its load
        self.lookahead: Optional[LookaheadClient] = None  # the world's transition model (memory module lookahead)
        self.action_server: Optional[ReplanActionServer] = None  # exists exactly while serving (`_serve`)
        self.calls_pub = self.load_pub = self._queue_timer = self._load_timer = None
        self._watch_timers: list = []  # backend openai: the probe's and the load's, running while active
        # Diagnostics live as long as the node, in every lifecycle state (they say which).
        self.diag_pub = self.create_publisher(DiagnosticArray, names.DIAGNOSTICS, qos.DIAGNOSTICS)
        self._timers_group = MutuallyExclusiveCallbackGroup()  # not the default group (see brace_common.clock)
        steady_timer(self, self.get_parameter("diagnostics_period_s").value, self.publish_diagnostics,
                     self._timers_group)

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
        group, memory = MutuallyExclusiveCallbackGroup(), self.memory()  # entries and episode starts in arrival order
        context_qos = copy(qos.INPUTS)  # keep-last: a flood overwrites, and the gap it leaves is counted
        context_qos.depth = cfg.context_queue_depth
        inputs = [(ContextEntry, names.CONTEXT, self.on_context, "context", context_qos),
                  (Episode, names.EPISODE, self.on_episode, "episode", qos.INPUTS),
                  (ExecutionOutcome, names.OUTCOMES, self.on_outcome, "outcomes", qos.INPUTS)]
        gig = memory is not None and memory.reads_world_states()
        if gig or cfg.veto_lost:  # GiG's session graphs and experience bank; the state the veto's projections name
            inputs.append((WorldState, names.WORLD_STATE, self.on_world_state, "world_state", qos.WORLD_STATE))
        for msg_type, topic, callback, label, profile in inputs:
            self.configured(self.inputs.subscribe(self, msg_type, topic, callback, label, profile, callback_group=group))
        looks = memory is not None and memory.on("lookahead")  # GiG's Bounded Lookahead through the world's service
        if looks or cfg.veto_lost:  # the veto projects through the same service
            self.lookahead = LookaheadClient(self, cfg.lookahead_timeout_s, memory.graphs.where if gig
                                             else self.intake.where)
            self.configured(self.lookahead.client)
            if looks:
                memory.predict = self.lookahead
            self.call_path.predict = self.lookahead if cfg.veto_lost else None
        if cfg.schema_from_world():  # latched: the current episode's, however late this node starts
            self.configured(self.create_subscription(WorldInfo, names.WORLD_INFO, self.on_world_info,
                                                     qos.WORLD_INFO, callback_group=MutuallyExclusiveCallbackGroup()))
        # Runs only while calls wait (the action server restarts it): idle, the planner wakes only for its diagnostics.
        self._queue_timer = self.configured(steady_timer(self, QUEUE_CHECK_PERIOD_S, self.expire_waiting,
                                                         self._timers_group))
        if cfg.backend == "openai":  # a probe blocks up to connect_timeout_s + 1 s: its timers have groups of their own
            self.watch = ServerWatch(self.call_path.backend, cfg.connect_timeout_s + 1.0, cfg.server_probe_period_s,
                                     cfg.server_load_period_s > 0, self.get_logger())
            self._idle_timer(cfg.server_probe_period_s, self.probe_server)
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
        self._watch_timers.append(timer)
        return timer

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Serve the Replan action; with a planner server, once that server has answered (`probe_server`)."""
        self.state_label = "active"
        for timer in self._watch_timers:
            timer.reset()
        self._serve(self.watch is None or self.watch.check())
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop serving (a running call finishes; waiting calls are answered when their deadline passes)."""
        self._stop_serving()
        self.state_label = "inactive"
        return super().on_deactivate(state)

    def _serve(self, on: bool) -> None:
        """The one place the Replan action server is created (activate; backend openai: the server's first answer,
        `on` False until then) and destroyed (`on` False after activate: deactivate, shutdown, error), so a client
        that sees it is served."""
        if on and self.action_server is None:
            self.action_server = ReplanActionServer(self, self.service, self.rejections, self.config, self.publish_call,
                                                    self._queue_timer)
            self.get_logger().info(f"serving Replan on '{self.config.replan_action}'")
        elif not on and self.action_server is not None:
            self.action_server.destroy()
            self.action_server = None

    def _stop_serving(self) -> None:
        """Leaving active: no action server, no server watch timers (activate restarts them)."""
        for timer in self._watch_timers:
            timer.cancel()
        self._serve(False)

    def _release(self) -> None:
        """Cleanup, shutdown and error (the base's rule): stop serving, then the memory system (its summary worker,
        then its store), the model, the calls."""
        self._stop_serving()
        self.service.release()
        self.call_path, self.watch, self.lookahead = None, None, None
        self.calls_pub = self.load_pub = self._queue_timer = self._load_timer = None
        self._watch_timers = []

    def memory(self):
        """The call path's memory system (None before configure)."""
        return memory_of(self.call_path)

    def probe_server(self) -> None:
        """GET /models on the planner server (ServerWatch); the first answer starts serving the action."""
        if self.watch is not None and self.state_label == "active" and self.watch.check():
            self._serve(True)

    def publish_server_load(self) -> None:
        """Read the planner server's load and publish it with this node's own requests there."""
        if self.watch is None or not self.watch.reports_load() or self.state_label != "active":
            return
        report = self.watch.report()
        if not self.watch.reports_load():
            self._load_timer.cancel()  # asked once
        if self.load_pub is not None and self.load_pub.is_activated:
            self.load_pub.publish(convert.server_load_to_msg(report, self.get_clock().now().to_msg()))

    @serialized
    def on_context(self, msg: ContextEntry) -> None:
        """Add a context entry; malformed entries are counted and dropped."""
        self.intake.take(lambda: convert.entry_from_msg(msg, self.config.max_entry_chars), self.intake.entry,
                         "context_entry", msg.agent_id)

    @serialized
    def on_outcome(self, msg: ExecutionOutcome) -> None:
        """An executed step: memory's goal stacks advance, a failure writes a reflection (malformed: counted)."""
        self.intake.take(lambda: convert.outcome_from_msg(msg), self.intake.outcome, "outcome", msg.agent_id)

    @serialized
    def on_world_state(self, msg: WorldState) -> None:
        """A world's state: each agent's scene graph joins its session graph (malformed: counted)."""
        self.intake.take(lambda: world_state_from_msg(msg), self.intake.world_state, "world_state", msg.world)

    @serialized
    def on_episode(self, msg: Episode) -> None:
        """An episode's start forgets what was said before it; a successful end keeps its trajectories."""
        self.intake.episode(convert.episode_from_msg(msg))

    @serialized
    def on_world_info(self, msg: WorldInfo) -> None:
        """The world's action schema, used from the next call on; a refused one is counted and the current kept."""
        try:
            self.world.offer(msg.world, msg.episode, msg.action_schema_json, len(msg.agents))
        except InvalidInput as exc:
            self.rejections.reject("world_info", exc, f"{msg.world}/{msg.episode}")

    def expire_waiting(self) -> None:
        """Answer every waiting call whose hard deadline has passed; idle, the timer stops."""
        if not self.service.expire() and self._queue_timer is not None:
            self._queue_timer.cancel()
            if len(self.service.queue):  # a call queued meanwhile (its acceptance saw the timer still running)
                self._queue_timer.reset()

    def publish_call(self, record: ReplanCall) -> None:
        """A finished call's record on replan_calls."""
        if self.calls_pub is not None and self.calls_pub.is_activated:
            self.calls_pub.publish(record)

    def publish_diagnostics(self) -> None:
        """Lifecycle state and what each owner reports (inputs, calls, backend, server, memory) on /diagnostics."""
        cfg, path, memory = self.config, self.call_path, self.memory()
        owners = [*reported(self.intake, self.service, self.world, self.inputs, path and path.backend, self.lookahead),
                  Health(self.rejections.health().values)]  # named in the warnings by their owners' counters
        owners += [self.watch.health(self.state_label == "active")] if self.watch is not None else []
        owners += [memory_health(memory, cfg.memory_summariser_url)] if memory is not None else []
        health = planner_health(self.state_label, cfg, self.world.source, self.last_error if path is None else "",
                                owners)
        self.diag_pub.publish(health_array(f"{self.get_name()}: replanning calls", health,
                                           self.get_clock().now().to_msg()))


def main(args=None) -> int:
    """`ros2 run erecap_planner erecap_planner` (configures and activates itself with `autostart`)."""
    return spin_node(ErecapPlannerNode, "erecap_planner", args, threads=EXECUTOR_THREADS)


if __name__ == "__main__":
    sys.exit(main())
