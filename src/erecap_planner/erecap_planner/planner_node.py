"""erecap_planner lifecycle node: serves the Replan action with E-RECAP (or a baseline compressor).

Names are relative (the stack's namespace, /brace by default, comes from launch).

Subscribes  outcomes (ExecutionOutcome: the memory modules' step outcomes, failure reflections and
            the ReCAP goal stack's progress), context (ContextEntry, reliable keep-last `context_queue_depth`: a sample
            the subscription's history overwrote, or its publisher discarded,
            shows as a gap in that publisher's sequence numbers and is counted
            `lost.context.sequence_gap`; the rmw's own message_lost events are
            counted `lost.context.message_lost`), episode (Episode: at
            EVENT_START every entry stamped before the episode's start is forgotten;
            EVENT_END of a successful episode keeps its trajectories in the experience bank),
            world_state (WorldState; only with memory module state_graph or
            experience: every agent's session graph),
            world_info (WorldInfo, latched; only with `action_schema_file` empty:
            the world's action schema, used from the next call on)
Publishes   replan_calls (ReplanCall, one per call; lifecycle publisher), /diagnostics,
            server_load (ServerLoad, qos.STATE; backend openai with server_load_period_s > 0: the
            server's requests running and waiting from its /metrics, and this node's own there; a server
            without load gauges is asked once)
Action server  `replan_action` (Replan), present only while the node is active,
            so a client that sees the server can be served: feedback per
            phase; result = Plan + ReplanCall. One model serves one call at a
            time; accepted calls wait in an earliest-deadline-first queue
            (call_queue.py), where a newer call for an agent supersedes its
            waiting older one and a call past its hard deadline leaves
            unserved. A waiting goal holds no executor thread.

Action schema: the file `action_schema_file` names (robot stacks, tests), or,
with it empty, the one the world publishes on world_info at each episode start
(K and the schema live only in the world's parameters). A changed schema
replaces the call path's validator, JSON Schema and constrained decoder at
once; a running call keeps the one it started with. A call that starts
before any schema is known waits for it within its hard deadline (counted
`calls_waited_for_schema`; none by then: a planner error saying so). The
action server is served regardless, so a world that waits for it starts its
episode and publishes its WorldInfo, and no wait is circular; a call waits
only while the planner builds the schema the world published with the
episode's first triggers.

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
from brace_common.action_schema import ActionSchema
from brace_common.clock import seconds_of, steady_timer
from brace_common.config import ConfigError
from brace_common.counted_inputs import CountedInputs
from brace_common.diagnostics import diagnostic_array, nonzero
from brace_common.episode_boundary import before_episode
from brace_common.lifecycle import ReleasingLifecycleNode
from brace_common.params import declare_parameters, read_config, reject_undeclared
from brace_common.spin import spin_node, stopping
from brace_common.validation import InvalidInput, Rejections
from brace_common.vocabulary import CallState, CallStatus, EpisodeEvent
from brace_common.world_state import received_world_state
from brace_memory.memory_write import split_memory_writes

from . import convert
from .call_path import INTERNAL_ERROR, CallOutcome, internal_error_outcome, unserved_outcome
from .call_queue import CallQueue, QueuedCall
from .config import PlannerConfig
from .context import ContextBuffer
from .factory import CallPath, build_call_path
from .lookahead_client import LookaheadClient
from .pruned_forward import CallAborted
from .server_call_path import ServerCallPath, ServerProbe
from .server_load import ServerLoadProbe

QUEUE_CHECK_PERIOD_S = 0.05  # how often waiting calls are checked against their hard deadlines
EXECUTOR_THREADS = 3  # the running call, the context subscription, goals / cancels / timers


def _goal_key(goal_handle) -> bytes:
    return bytes(goal_handle.goal_id.uuid)


class ErecapPlannerNode(ReleasingLifecycleNode):
    """Thin lifecycle shell around PlannerCallPath."""

    def __init__(self, **kwargs) -> None:
        super().__init__("erecap_planner", **kwargs)
        declare_parameters(self, PlannerConfig, enforce_ranges=False)
        self.config: Optional[PlannerConfig] = None
        self.call_path: Optional[CallPath] = None
        self.server = ServerProbe()  # backend openai: whether the server answers, and the model it serves
        self._probe_timer = None
        self.load_probe: Optional[ServerLoadProbe] = None  # backend openai: the server's load (GET /metrics)
        self.load_pub = None
        self._load_timer = None
        self.buffer = ContextBuffer()
        self.buffer_lock = threading.Lock()
        self.episode_start_s = 0.0  # the world's stamp of the latest episode start (0: none, or unstamped)
        self.inputs = CountedInputs()
        self.queue = CallQueue()  # one model: calls run one at a time, earliest deadline first
        self.calls: dict[bytes, QueuedCall] = {}  # goal id -> its call
        self.state_label = "unconfigured"
        self.last_error = ""
        self.last_internal_error = ""  # the latest exception the planner raised in a call (diagnostics ERROR)
        self.ids = itertools.count(1)
        self.counts = {"calls": 0, "malformed_context": 0, "malformed_world_states": 0, "context_entries": 0,
                       "goals_rejected": 0,
                       "entries_forgotten": 0, "stale_context": 0, "stale_outcomes": 0, "goal_wait_before_acceptance_ms": 0.0,
                       "schema_updates": 0,
                       "calls_waited_for_schema": 0, "memory_writes": 0, "respelled_values": 0,
                       "internal_errors": 0,
                       **{f"status.{s.label}": 0 for s in CallStatus}}
        self.rejections = Rejections(self.get_logger())
        self.action_server: Optional[ActionServer] = None
        self.calls_pub = None
        self._topic_subs: list = []  # not rclpy's own Node._subscriptions, which this name would replace
        self.lookahead: Optional[LookaheadClient] = None  # the world's transition model (memory module lookahead)
        self._queue_timer = None
        self.world_schema_json = ""  # the world's schema in use (WorldInfo.action_schema_json); "" = none yet
        self.world_schema_from = ""  # "<world> episode <n>" of that WorldInfo
        self.schema_logged: tuple = ()  # (world, episode, actions, agents) last logged at INFO
        self.schema_known = threading.Event()  # set once the call path has a schema (a file's or the world's)
        # Diagnostics live as long as the node, in every lifecycle state (they say which).
        self.diag_pub = self.create_publisher(DiagnosticArray, names.DIAGNOSTICS, qos.DIAGNOSTICS)
        self._timers_group = MutuallyExclusiveCallbackGroup()  # not the default group (see brace_common.clock)
        self._probe_group = MutuallyExclusiveCallbackGroup()  # a probe blocks up to connect_timeout_s + 1 s
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
        self.buffer = ContextBuffer(limits=self.config.context_limits())
        self.inputs.forget()  # the subscriptions are new: their publishers' numbering starts again
        self.calls_pub = self.create_lifecycle_publisher(ReplanCall, names.REPLAN_CALLS, qos.EVENTS)
        context_group = MutuallyExclusiveCallbackGroup()  # entries and episode starts in arrival order
        # Keep-last (qos.INPUTS with the node's depth): a flood overwrites, and the gap it leaves is counted.
        context_qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=self.config.context_queue_depth,
                                 reliability=qos.INPUTS.reliability, durability=qos.INPUTS.durability)
        self._topic_subs = [
            self.inputs.subscribe(self, ContextEntry, names.CONTEXT, self.on_context, "context", context_qos,
                                  callback_group=context_group),
            self.inputs.subscribe(self, Episode, names.EPISODE, self.on_episode, "episode",
                                  callback_group=context_group),
            self.inputs.subscribe(self, ExecutionOutcome, names.OUTCOMES, self.on_outcome, "outcomes",
                                  callback_group=context_group)]
        self.world_schema_json, self.world_schema_from = "", ""
        if self.call_path.schema is not None:
            self.schema_known.set()
        else:
            self.schema_known.clear()
        memory = self.memory()
        if memory is not None and memory.reads_world_states():  # GiG's session graphs and experience bank
            self._topic_subs.append(self.inputs.subscribe(
                self, WorldState, names.WORLD_STATE, self.on_world_state, "world_state", qos.WORLD_STATE,
                callback_group=context_group))
        if memory is not None and memory.on("lookahead"):  # GiG's Bounded Lookahead through the world's service
            self.lookahead = LookaheadClient(self, self.config.lookahead_timeout_s, memory.graphs.where)
            memory.predict = self.lookahead
        if self.config.schema_from_world():  # latched: the current episode's, however late this node starts
            self._topic_subs.append(self.create_subscription(
                WorldInfo, names.WORLD_INFO, self.on_world_info, qos.WORLD_INFO,
                callback_group=MutuallyExclusiveCallbackGroup()))
        # Runs only while calls wait (on_accepted restarts it): idle, the planner wakes only for its diagnostics.
        self._queue_timer = steady_timer(self, QUEUE_CHECK_PERIOD_S, self.expire_waiting, self._timers_group)
        if isinstance(self.call_path, ServerCallPath) and self.config.server_load_period_s > 0:
            self.load_probe = ServerLoadProbe(self.call_path.client, self.config.connect_timeout_s + 1.0)
            self.load_pub = self.create_lifecycle_publisher(ServerLoad, names.SERVER_LOAD, qos.STATE)
        self.state_label = "inactive"
        if isinstance(self.call_path, ServerCallPath):
            self.get_logger().info(
                f"configured in {time.monotonic() - started:.1f} s: planner server {self.call_path.client.base_url} "
                f"({self.config.endpoint}, structured output {self.config.structured_output}), compressor "
                f"'{self.config.compressor}' here (tokenizer of '{self.config.model_path}')")
        else:
            self.get_logger().info(
                f"configured in {time.monotonic() - started:.1f} s: model '{self.config.model_path}' on "
                f"{self.call_path.plain.device}, compressor '{self.config.compressor}', keep ratio "
                f"{self.config.keep_ratio}, pruning layers "
                f"{list(self.call_path.pruned.schedule.layers) if self.call_path.pruned else []}")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Serve the Replan action; with a planner server, once that server has answered (a client that sees
        the action server is served from then on)."""
        self.state_label = "active"
        if isinstance(self.call_path, ServerCallPath):
            self._probe_timer = steady_timer(self, self.config.server_probe_period_s, self.probe_server,
                                             self._probe_group)
            self.probe_server()
            if self.load_probe is not None:
                self._load_timer = steady_timer(self, self.config.server_load_period_s, self.publish_server_load,
                                                MutuallyExclusiveCallbackGroup())
        else:
            self._serve()
        return super().on_activate(state)

    def probe_server(self) -> None:
        """GET /models on the planner server; the first answer starts serving the action (backend openai)."""
        path = self.call_path
        if not isinstance(path, ServerCallPath) or self.state_label != "active":
            return
        if self.server.answered and time.monotonic() < self.server.checked_at + 4 * self.config.server_probe_period_s:
            return  # serving: probe 5x less often (calls report failures themselves)
        first = not self.server.answered
        self.server.probe(path, self.config.connect_timeout_s + 1.0)
        if self.server.answered and first:
            if not path.server_model:
                path.server_model = self.server.models[0] if self.server.models else ""
            self.get_logger().info(f"planner server {path.client.base_url} answers, serving model "
                                   f"'{path.server_model}' (listed: {self.server.models[:5]})")
        elif not self.server.answered:
            self.get_logger().warning(f"planner server {path.client.base_url}: {self.server.error}",
                                      throttle_duration_sec=10.0)
        if self.server.answered and self.action_server is None:
            self._serve()

    def publish_server_load(self) -> None:
        """Read the planner server's load and publish it with this node's own requests there (backend openai)."""
        path, probe = self.call_path, self.load_probe
        if not isinstance(path, ServerCallPath) or probe is None or probe.reports is False \
                or self.state_label != "active":
            return
        load = probe.read()
        if probe.reports is False:
            self.get_logger().info(f"planner server {path.client.base_url} publishes no load (GET /metrics): each "
                                   "controller sees only its own calls there")
            if self._load_timer is not None:
                self._load_timer.cancel()  # asked once
        msg = ServerLoad(server_url=path.client.base_url, reported=load is not None, own_requests=path.at_server)
        msg.header.stamp = self.get_clock().now().to_msg()
        if load is not None:
            msg.engine, msg.requests_running, msg.requests_waiting = load.engine, load.running, load.waiting
        if self.load_pub is not None and self.load_pub.is_activated:
            self.load_pub.publish(msg)

    def _serve(self) -> None:
        self.action_server = ActionServer(
            self, Replan, self.config.replan_action, self.execute, goal_callback=self.on_goal,
            handle_accepted_callback=self.on_accepted, cancel_callback=self.on_cancel,
            callback_group=ReentrantCallbackGroup(), goal_service_qos_profile=qos.ACTION_SERVICES,
            result_service_qos_profile=qos.ACTION_SERVICES, cancel_service_qos_profile=qos.ACTION_SERVICES,
        )
        self.get_logger().info(f"serving Replan on '{self.config.replan_action}'")

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop serving (a running call finishes; waiting calls are answered when their deadline passes)."""
        self._destroy_server()
        self.state_label = "inactive"
        return super().on_deactivate(state)

    def _destroy_server(self) -> None:
        for timer in (self._probe_timer, self._load_timer):
            if timer is not None:
                timer.destroy()
        self._probe_timer = self._load_timer = None
        if self.action_server is not None:
            self.action_server.destroy()
            self.action_server = None

    def _release(self) -> None:
        """Cleanup and shutdown: release the model and the topics."""
        self._destroy_server()
        for sub in self._topic_subs:
            self.destroy_subscription(sub)
        if self._queue_timer is not None:
            self._queue_timer.destroy()
        for pub in (self.calls_pub, self.load_pub):
            if pub is not None:
                self.destroy_lifecycle_publisher(pub)
        self._topic_subs, self.calls_pub, self.load_pub, self._queue_timer = [], None, None, None
        self.load_probe = None
        if self.lookahead is not None:
            self.destroy_client(self.lookahead.client)
            self.lookahead = None
        memory = self.memory()
        if memory is not None:
            memory.close()  # the summary worker (bounded), then the store
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
            if before_episode(entry.stamp, entry.step, self.episode_start_s):
                self.counts["stale_context"] += 1  # the previous episode's, arrived after this one's start
                return
            self.buffer.add(entry)
            teammates = frozenset(self.buffer.state)
        self.counts["context_entries"] += 1
        memory = self.memory()
        if memory is not None:
            memory.on_context_entry(entry, teammates)

    def memory(self):
        """The call path's memory system (None before configure)."""
        path = self.call_path
        return path.memory.system if path is not None and path.memory is not None else None

    def on_outcome(self, msg: ExecutionOutcome) -> None:
        """An executed step: memory's goal stacks advance, a failure writes a reflection (malformed: counted)."""
        try:
            outcome = convert.outcome_from_msg(msg)
        except ValueError as exc:
            self.rejections.reject("outcome", exc, msg.agent_id)
            return
        if before_episode(outcome.stamp, outcome.step, self.episode_start_s):
            self.counts["stale_outcomes"] += 1
            return
        memory = self.memory()
        if memory is not None:
            memory.on_outcome(outcome.agent_id, outcome.step, outcome.action, outcome.success, outcome.detail,
                              outcome.failure, outcome.stamp)

    def on_world_state(self, msg: WorldState) -> None:
        """A world's state: each agent's scene graph joins its session graph (malformed: counted)."""
        state = received_world_state(msg, self.counts, self.rejections)
        memory = self.memory()
        if state is not None and memory is not None:
            memory.on_world_state(state)

    def on_episode(self, msg: Episode) -> None:
        """A new episode: forget what was said before it began (entries of the new one may already be in); later
        entries from before it are dropped and counted (stale_context). An episode's end that succeeded keeps its
        agents' trajectories in the experience bank."""
        if msg.event == EpisodeEvent.END:
            memory = self.memory()
            if memory is not None:
                memory.end_episode(f"{msg.world}/{msg.seed}/{msg.episode}/{seconds_of(msg.header.stamp):.3f}",
                                   msg.success, int(msg.steps), seconds_of(msg.header.stamp), (msg.world, msg.episode))
            return
        if msg.event != EpisodeEvent.START:
            return
        with self.buffer_lock:
            self.episode_start_s = seconds_of(msg.header.stamp)
            self.counts["entries_forgotten"] += self.buffer.forget_before(self.episode_start_s)
        memory = self.memory()
        if memory is not None:
            memory.start_episode()

    def on_world_info(self, msg: WorldInfo) -> None:
        """The world's action schema: used from the next call on when it changed. Untrusted input: a malformed,
        oversized or combinatorial one (or none, when the world has none of its own) is counted and the current
        one kept; being latched, it comes once per subscription and never again until the world changes it."""
        if msg.action_schema_json == self.world_schema_json:
            return
        try:
            if not msg.action_schema_json:
                raise InvalidInput("no_action_schema", f"world '{msg.world}' publishes no action schema: set "
                                   "action_schema_file")
            schema = ActionSchema.from_json(msg.action_schema_json)  # bounded before it is parsed
            path = self.call_path
            if path is None:
                return
            path.set_schema(self.config.planner_schema(schema))  # ValueError: a store_memory skill, too many calls
        except ValueError as exc:  # InvalidInput, PlanError, CandidateLimit are ValueErrors
            self.rejections.reject("world_info", exc if isinstance(exc, InvalidInput) else
                                   InvalidInput("malformed_schema", str(exc)), f"{msg.world}/{msg.episode}")
            return
        except Exception as exc:  # noqa: BLE001 - a schema no check foresaw must not kill the planner (latched:
            # every restart would meet it again); counted apart and logged with its trace, so the gap is seen
            self.rejections.reject("world_info", InvalidInput("unexpected_error", f"{type(exc).__name__}: {exc}"),
                                   f"{msg.world}/{msg.episode}")
            self.get_logger().error("world_info: schema refused by an unexpected error\n"
                                    + "".join(traceback.format_exception(exc)))
            return
        self.world_schema_json, self.world_schema_from = msg.action_schema_json, f"{msg.world} episode {msg.episode}"
        self.counts["schema_updates"] += 1
        self.schema_known.set()
        # A world whose choices follow its state (TextWorld's admissible commands) republishes every step: INFO only
        # when the world, episode, actions or agents change.
        described = (msg.world, msg.episode, tuple(schema.actions), len(msg.agents))
        log = self.get_logger().info if described != self.schema_logged else self.get_logger().debug
        self.schema_logged = described
        log(f"action schema of {self.world_schema_from}: {len(msg.agents)} agents, actions {', '.join(schema.actions)}")

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
        timer = self._queue_timer
        if len(self.queue) and timer is not None and timer.is_canceled():
            timer.reset()

    def on_cancel(self, goal_handle) -> CancelResponse:
        """Accept every cancel: a waiting call is answered at once, the running one stops at its next check."""
        call = self.calls.get(_goal_key(goal_handle))
        if call is not None and self.queue.remove(call.call_id, CallState.CANCELLED) is not None:
            goal_handle.execute()
        return CancelResponse.ACCEPT

    def expire_waiting(self) -> None:
        """Answer every waiting call whose hard deadline has passed (it would only be cancelled later)."""
        for call in self.queue.expired(time.monotonic()):
            call.handle[0].execute()
        timer = self._queue_timer
        if timer is not None and not len(self.queue):
            timer.cancel()
            if len(self.queue):  # a call queued meanwhile (on_accepted saw the timer still running)
                timer.reset()

    def _dispatch(self) -> None:
        call = self.queue.start_next()
        if call is not None:
            call.handle[0].execute()

    def execute(self, goal_handle) -> Replan.Result:
        """Run (or answer without running) one call: feedback per phase, record on replan_calls.

        Whatever fails on the way, the goal ends with a record saying why: a call whose run raised is a planner
        error `internal_error`; a failure in the bookkeeping after it keeps the validated plan and says so in the
        record's error. Both are counted (`internal_errors`) and logged with their trace.
        """
        call = self.calls.pop(_goal_key(goal_handle))
        _, request, accepted = call.handle
        try:
            outcome = self._outcome(goal_handle, call, request)
        except Exception as exc:  # noqa: BLE001 - a bug must not make a call vanish from the audit
            outcome = internal_error_outcome(call, self.config.compressor, exc)
            self._report_internal_error(call, "run", exc)
        try:
            self._account(call, request, outcome)
        except Exception as exc:  # noqa: BLE001 - the validated plan stands; the failed bookkeeping is reported
            outcome.error = f"{INTERNAL_ERROR} after the plan was validated: {type(exc).__name__}: {exc}"
            self._report_internal_error(call, "bookkeeping", exc)
        model = self.call_path.model_name if self.call_path is not None else self.config.model_path
        record = convert.call_to_msg(outcome, request, call.call_id, model, accepted)
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

    def _outcome(self, goal_handle, call: QueuedCall, request) -> CallOutcome:
        """The call run, or answered without running (superseded, cancelled or expired while waiting)."""
        try:
            if call.outcome is CallState.RUNNING:
                return self._run(goal_handle, call, request)
            return unserved_outcome(call, self.config.compressor)
        finally:
            if call.outcome is CallState.RUNNING:
                self.queue.finish(call)
                self._dispatch()

    def _account(self, call: QueuedCall, request, outcome: CallOutcome) -> None:
        """A finished call's memory writes and plan into memory, its counts, its log lines."""
        memory = self.memory()
        if memory is not None and outcome.status == CallStatus.OK and outcome.steps:
            self._keep_notes(memory, request, outcome)
            if outcome.steps:
                memory.on_plan(request.agent_id, request.step, request.mode, outcome.steps)
        self.counts["calls"] += 1
        self.counts[f"status.{CallStatus(outcome.status).label}"] += 1
        if outcome.status == CallStatus.OK and outcome.respelled:
            self.counts["respelled_values"] += len(outcome.respelled)
            self.get_logger().info(f"call {call.call_id}: ids respelled {', '.join(outcome.respelled)}",
                                   throttle_duration_sec=1.0)
        if outcome.status != CallStatus.OK:
            said = f" (output: {outcome.output_text[:160]!r})" if outcome.status == CallStatus.PLANNER_ERROR else ""
            self.get_logger().warning(f"call {call.call_id} for {request.agent_id}: {outcome.error}{said}",
                                      throttle_duration_sec=1.0)

    def _report_internal_error(self, call: QueuedCall, where: str, exc: BaseException) -> None:
        """Count and log (with its trace) an exception the planner raised in a call's `where`."""
        self.counts["internal_errors"] += 1
        self.last_internal_error = f"call {call.call_id}, {where}: {type(exc).__name__}: {exc}"
        trace = "".join(traceback.format_exception(exc))
        self.get_logger().error(f"internal error in {self.last_internal_error}\n{trace}")

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

        if not self.schema_known.is_set():  # the world's WorldInfo is on its way (published at its episode start)
            self.counts["calls_waited_for_schema"] += 1
            left_s = request.hard_deadline_ms / 1000.0 - (time.monotonic() - call.accepted_at)
            self.schema_known.wait(max(0.0, left_s))  # none by the deadline: the call path answers NO_SCHEMA
        with self.buffer_lock:
            snapshot = self.buffer.snapshot()  # the newest context: a call that waited plans from what is known now
        return self.call_path.run(snapshot, request,
                                  cancelled=lambda: goal_handle.is_cancel_requested or stopping()
                                  or not self.context.ok(),
                                  on_phase=feedback, queued_at=call.accepted_at)

    # ------------------------------------------------------------------ monitoring

    def _keep_notes(self, memory, request, outcome) -> None:
        """A plan's memory writes (memory_write) leave the plan for reflective memory; a plan of nothing but
        writes is a planner error (nothing to execute), its notes kept."""
        steps, notes = split_memory_writes(outcome.steps)
        outcome.steps = steps  # before the notes are written: a failing store never sends a store_memory step on
        if notes and not steps:
            outcome.status = CallStatus.PLANNER_ERROR
            outcome.error = "only_memory_writes: the plan holds no step to execute besides store_memory"
        for text in notes:
            self.counts["memory_writes"] += memory.on_note(request.agent_id, request.step, text)

    def publish_diagnostics(self) -> None:
        """Lifecycle state, call counts by status, the queue, prefix reuse and malformed input on /diagnostics."""
        with self.buffer_lock:
            held = {"context.held_entries": len(self.buffer), "context.held_chars": self.buffer.chars,
                    **{f"dropped.context.{k}": v for k, v in self.buffer.dropped_by.items()}}
        values = {"state": self.state_label, "model": self.config.model_path if self.config else "",
                  "action_schema": ((self.world_schema_from or "none yet") if self.config.schema_from_world()
                                    else self.config.action_schema_file) if self.config else "",
                  "compressor": self.config.compressor if self.config else "", **self.counts, **self.inputs.counts, **held,
                  **{f"rejected.{k}": v for k, v in sorted(self.rejections.counts.items())},
                  "queue.waiting": len(self.queue), **{f"queue.{k}": v for k, v in self.queue.counts.items()}}
        path = self.call_path
        errors = [f"configure failed: {self.last_error}"] if self.last_error and self.call_path is None else []
        if self.counts["internal_errors"]:
            errors.append(f"{self.counts['internal_errors']} internal error(s), the latest in "
                          f"{self.last_internal_error} (each call was answered with a record saying so)")
        if isinstance(path, ServerCallPath):
            values.update({"backend": "openai", "server_url": path.client.base_url, "server_model": path.server_model,
                           "server.answers": self.server.answered, **dict(sorted(path.counts.items()))})
            if self.load_probe is not None:
                values.update({"server_load.reported": self.load_probe.reports,
                               **dict(sorted(self.load_probe.snapshot().items()))})
            if self.state_label == "active" and not self.server.answered:
                errors.append(f"planner server {path.client.base_url} does not answer: {self.server.error}")
        memory = self.memory()
        if memory is not None:
            values.update({"memory.modules": ",".join(memory.modules) or "none",
                           "memory.summariser": self.config.memory_summariser_url or "templates",
                           **{f"memory.summaries.{k}": v for k, v in
                              (memory.summaries.counts if memory.summaries is not None else {}).items()},
                           **{f"memory.{k}": v for k, v in memory.counts.items()},
                           **{f"memory.tree.{k}": v for k, v in memory.tree.counts.items()},
                           **{f"memory.store.{k}": v for k, v in memory.store.counts.items()}})
        if self.lookahead is not None:
            values.update({f"lookahead.{k}": v for k, v in self.lookahead.counts.items()})
        if path is not None and not isinstance(path, ServerCallPath):
            values.update({"backend": "local", "dtype": str(path.stack.dtype).replace("torch.", ""),
                           "decode_weights": path.stack.decode_weights, "context_layout": path.layout})
            if path.prefix is not None:
                stats = path.prefix.stats
                values.update({"prefix.hit_rate": round(stats.hit_rate, 3), "prefix.reused_share":
                               round(stats.reuse_share, 3), "prefix.tokens_reused": stats.tokens_reused})
        warnings = nonzero({**self.counts, **self.inputs.counts},
                           ("malformed_context", "malformed_world_states", "goals_rejected", "status.planner_error",
                            "status.deadline", *self.inputs.counts))
        self.diag_pub.publish(diagnostic_array(f"{self.get_name()}: replanning calls", values,
                                               self.get_clock().now().to_msg(), warnings, errors))


def main(args=None) -> int:
    """`ros2 run erecap_planner erecap_planner` (configures and activates itself with `autostart`)."""
    return spin_node(ErecapPlannerNode, "erecap_planner", args, threads=EXECUTOR_THREADS)


if __name__ == "__main__":
    sys.exit(main())
