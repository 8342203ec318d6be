"""brace_controller node: gates every trigger, budgets admitted ones, runs the Replan calls (topics, the action
client and its deadlines: docs/nodes.md, "brace_controller")."""

from __future__ import annotations

import random
import secrets
import sys
import threading
import time

from action_msgs.msg import GoalStatus
from brace_msgs.action import Replan
from brace_msgs.msg import ControllerState, Episode, Plan, ReplanCall, ReplanDecision, ServerLoad, TriggerEvent
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.action import ActionClient
from rclpy.node import Node

from brace_common import names, qos
from brace_common.clock import steady_timer
from brace_common.convert import plan_signature, trigger_from_msg
from brace_common.counted_inputs import CountedInputs
from brace_common.counters import Counters, Health
from brace_common.diagnostics import health_array
from brace_common.lifecycle import serialized
from brace_common.params import declare_config, reject_undeclared
from brace_common.replanning import CallRecord, Decision
from brace_common.spin import spin_node
from brace_common.validation import Rejections
from brace_common.vocabulary import TEAM_AGENT, CallStatus, EpisodeEvent

from . import convert
from .config import ControllerConfig, ControllerNodeConfig
from .controller import BraceController
from .pending_calls import PendingCall, PendingCalls
from .quality_floor import fault_of

ABORTED_BY_PLANNER = "aborted_by_planner"
"""The reason of a call record the controller writes for a goal the planner aborted (it wrote none itself)."""


COUNTS = ("malformed_triggers", "malformed_calls", "planner_unavailable", "goals_rejected", "deadline_cancellations",
          "calls_finished", "calls_waited_for_planner", "held_decided_again", "calls_cancelled_by_episode",
          "server_load_samples", "server_load_stale", "calls_aborted_by_planner")
"""The node's counters (diagnostics keys)."""
WARNINGS = ("malformed_triggers", "malformed_calls", "planner_unavailable", "goals_rejected", "deadline_cancellations",
            "calls_aborted_by_planner")
"""The counters that make the node's diagnostics WARN when non-zero."""


class BraceControllerNode(Node):
    """Thin rclpy shell around BraceController."""

    def __init__(self, **kwargs) -> None:
        super().__init__("brace_controller", **kwargs)
        self.config = declare_config(self, ControllerConfig)
        self.node_config = declare_config(self, ControllerNodeConfig)
        reject_undeclared(self)
        # Decision ids are unique per controller instance: two controllers on one graph never collide.
        self.core = BraceController(self.config, self.config.load_profile(),
                                    id_prefix=f"{self.get_name()}/{secrets.token_hex(3)}")
        self.rejections = Rejections(self.get_logger())
        self.inputs = CountedInputs()
        self.pending = PendingCalls()
        # Action futures run their done-callbacks outside the node's callback group: on a multi-threaded executor a
        # call's result can arrive while the watchdog or a trigger is handled; `serialized` takes this lock.
        self.transition_lock = threading.RLock()
        self.counts = Counters(COUNTS, warn=WARNINGS)
        self.held_msgs: dict[str, TriggerEvent] = {}  # the messages of the core's held triggers
        self.server_load_at = 0.0  # time.monotonic() of the latest server_load that reported a load (0: none yet)
        self.release_at = 0.0  # time.monotonic() at which held triggers are decided again (0: not due)

        self.decisions_pub = self.create_publisher(ReplanDecision, names.DECISIONS, qos.EVENTS)
        self.plan_pub = self.create_publisher(Plan, names.PLAN, qos.PLANS)
        self.state_pub = self.create_publisher(ControllerState, names.CONTROLLER_STATE, qos.STATE)
        self.diag_pub = self.create_publisher(DiagnosticArray, names.DIAGNOSTICS, qos.DIAGNOSTICS)
        self.inputs.subscribe(self, TriggerEvent, names.TRIGGERS, self.on_trigger, "trigger")
        self.inputs.subscribe(self, ReplanCall, names.REPLAN_CALLS, self.on_call_record, "call_record")
        self.inputs.subscribe(self, Episode, names.EPISODE, self.on_episode, "episode")
        if self.node_config.server_load_stale_after_s > 0:
            self.create_subscription(ServerLoad, names.SERVER_LOAD, self.on_server_load, qos.STATE)
        self.calls_pub = self.create_publisher(ReplanCall, names.REPLAN_CALLS, qos.EVENTS)
        self.replan_client = ActionClient(self, Replan, self.node_config.replan_action,
                                          goal_service_qos_profile=qos.ACTION_SERVICES,
                                          result_service_qos_profile=qos.ACTION_SERVICES,
                                          cancel_service_qos_profile=qos.ACTION_SERVICES)
        # Runs only while something is due (a call in flight, held triggers, a shared server's load): idle, the
        # controller wakes only for its state and diagnostics.
        self.deadline_timer = steady_timer(self, self.node_config.deadline_check_period_s, self.check_deadlines)
        steady_timer(self, self.node_config.state_period_s, self.publish_state)
        steady_timer(self, self.node_config.diagnostics_period_s, self.publish_diagnostics)
        self.get_logger().info(
            f"profile '{self.core.profile.name}', delta={self.config.cooldown_steps}, "
            f"omega={self.config.commit_steps}, k={self.config.override_after_failures}, "
            f"adaptive_budget={self.config.adaptive_budget}"
        )

    # ------------------------------------------------------------------ triggers

    @serialized
    def on_trigger(self, msg: TriggerEvent) -> None:
        """Decide on one trigger; publish the decision; start the call if admitted."""
        try:
            trigger = trigger_from_msg(msg, self.core.team.latest_step)
        except ValueError as exc:
            self.counts["malformed_triggers"] += 1
            self.rejections.reject("trigger", exc, msg.trigger_id or msg.agent_id)
            return
        self.decide(trigger, msg)

    def decide(self, trigger, msg: TriggerEvent) -> None:
        """The core's decision on `trigger` (from `msg`) published, its call started, a held trigger remembered."""
        decision = self.core.decide(trigger)
        self.held_msgs.pop(trigger.agent_id, None)
        if self.core.held.get(trigger.agent_id) is trigger:
            self.held_msgs[trigger.agent_id] = msg
        self.decisions_pub.publish(convert.decision_to_msg(decision, msg, self.get_clock().now().to_msg()))
        if decision.admitted:
            self.start_call(decision)

    @serialized
    def on_episode(self, msg: Episode) -> None:
        """A new episode restarts the per-agent gate counters (steps restart at 0) and cancels the calls still in
        flight: their plans are for the world that ended (published in the new episode, such a plan was also dated
        at the old episode's step, which held the commit window shut for as long)."""
        if msg.event != EpisodeEvent.START:
            return
        self.core.reset()
        self.held_msgs = {}
        for call in self.pending.drain():  # a result that still comes is not used
            self.counts["calls_cancelled_by_episode"] += 1
            if call.goal_handle is not None:
                call.goal_handle.cancel_goal_async()
            # a call no planner took (not sent yet) gets its audit record here; a sent one gets the planner's
            self.finish(call.decision, CallStatus.CANCELLED, call.elapsed_ms(time.monotonic()),
                        error="" if call.sent else "a new episode began before a planner took the call")

    def start_call(self, decision: Decision) -> None:
        """Send the Replan goal of an admitted decision, or keep it until a server is up (at most its deadline)."""
        call = self.pending.add(decision, time.monotonic())
        self.watch_deadlines()
        if self.replan_client.server_is_ready():
            self.send(call)
        else:
            self.counts["calls_waited_for_planner"] += 1
            self.get_logger().warning(
                f"no Replan server on '{self.node_config.replan_action}' yet; call {decision.decision_id} waits "
                "for one until its hard deadline", throttle_duration_sec=5.0)

    def send(self, call: PendingCall) -> None:
        """Send a pending call's goal."""
        call.sent = True
        goal = convert.goal_from_decision(call.decision, self.get_clock().now().to_msg())
        future = self.replan_client.send_goal_async(goal)
        future.add_done_callback(lambda f, d=call.decision.decision_id: self.on_goal_response(d, f))

    @serialized
    def on_goal_response(self, decision_id: str, future) -> None:
        """Keep the goal handle, or close the call when the planner rejected it."""
        call = self.pending.get(decision_id)
        handle = future.result()
        if call is None:  # already closed by the deadline watchdog
            if handle is not None and handle.accepted:
                handle.cancel_goal_async()
            return
        if handle is None or not handle.accepted:
            self.counts["goals_rejected"] += 1
            self.get_logger().warning(f"planner rejected goal {decision_id}")
            self.pending.pop(decision_id)
            self.finish(call.decision, CallStatus.UNAVAILABLE, call.elapsed_ms(time.monotonic()),
                        error="planner rejected the goal")
            return
        call.goal_handle = handle
        handle.get_result_async().add_done_callback(lambda f, d=decision_id: self.on_result(d, f))

    @serialized
    def on_result(self, decision_id: str, future) -> None:
        """Close a finished call: publish its plan, update the gate's counters."""
        call = self.pending.pop(decision_id)
        if call is None:  # cancelled at the deadline; its late result is not used
            return
        wrapped = future.result()
        result = wrapped.result
        if wrapped.status == GoalStatus.STATUS_ABORTED:
            # The planner ended the goal without answering it (an exception in its execute callback): no record of
            # its own exists, so this one says what happened.
            self.counts["calls_aborted_by_planner"] += 1
            self.get_logger().error(f"call {decision_id} for {call.decision.trigger.agent_id}: the planner aborted "
                                    "the goal (no result); recorded as a planner error")
            self.finish(call.decision, CallStatus.PLANNER_ERROR, call.elapsed_ms(time.monotonic()),
                        error=f"{ABORTED_BY_PLANNER}: the planner ended the goal without a result (status ABORTED)",
                        fault=ABORTED_BY_PLANNER)
            return
        if wrapped.status != GoalStatus.STATUS_SUCCEEDED:
            self.finish(call.decision, CallStatus.CANCELLED, call.elapsed_ms(time.monotonic()))
            return
        try:
            status = CallStatus(result.call.status)
        except ValueError:
            self.counts["malformed_calls"] += 1
            status = CallStatus.PLANNER_ERROR
        plan_changed = False
        if status == CallStatus.OK and result.plan.steps:
            plan = result.plan
            plan.agent_id = plan.agent_id or call.decision.trigger.agent_id
            plan.decision_id = plan.decision_id or decision_id
            plan_changed = self.core.accept_plan(plan.agent_id, plan_signature(plan))
            self.plan_pub.publish(plan)
        fault = fault_of(result.call.error) if status == CallStatus.PLANNER_ERROR else ""
        self.finish(call.decision, status, float(result.call.latency_ms), plan_changed, int(result.call.tokens_after),
                    tokens_before=int(result.call.tokens_before), fault=fault)

    def finish(self, decision: Decision, status: CallStatus, latency_ms: float, plan_changed: bool = False,
               tokens_after: int = 0, error: str = "", tokens_before: int = 0, fault: str = "") -> None:
        """Tell the core a call is over (`fault`: a planner error's reason); audit a call no planner answered."""
        self.counts["calls_finished"] += 1
        if error:
            self.calls_pub.publish(convert.unanswered_call_to_msg(
                decision, status, latency_ms, self.get_clock().now().to_msg(), error))
        floor = self.core.quality.floor
        self.core.record_call(CallRecord(
            agent_id=decision.trigger.agent_id, step=decision.trigger.step, status=status,
            plan_changed=plan_changed, latency_ms=latency_ms, tokens_after=tokens_after,
            slo_ms=decision.slo_ms, decision_id=decision.decision_id, mode=decision.mode, tokens_before=tokens_before,
            fault=fault,
        ))
        if self.core.quality.floor != floor:
            self.get_logger().warning(f"quality floor raised to {self.core.quality.floor} tokens: calls near "
                                      f"{floor} named entities the schema does not hold")
        self.decide_held_soon()  # the backlog shrank

    def decide_held_soon(self) -> None:
        """Decide the held triggers again: at once, or, with a planner server shared by other robots, after a
        random delay up to `server_release_jitter_s` (as they do when its load falls: none is always first)."""
        if not self.server_load_at:
            self.decide_held()
        elif self.core.held and not self.release_at:
            self.release_at = time.monotonic() + random.uniform(0.0, self.node_config.server_release_jitter_s)
            self.watch_deadlines()

    def decide_held(self) -> None:
        """Decide the core's held triggers again."""
        self.release_at = 0.0
        for trigger in self.core.release_held():
            self.counts["held_decided_again"] += 1
            self.decide(trigger, self.held_msgs.pop(trigger.agent_id))

    @serialized
    def on_server_load(self, msg: ServerLoad) -> None:
        """Count the shared planner server's requests that are not this robot's as calls ahead of its own."""
        self.counts["server_load_samples"] += 1
        if not msg.reported:
            self.set_server_calls(0)
            return
        others = int(msg.requests_running) + int(msg.requests_waiting) - int(msg.own_requests)
        self.server_load_at = time.monotonic()
        self.set_server_calls(max(0, others))

    def set_server_calls(self, calls: int) -> None:
        """The server's other requests now; once they fall, held triggers are decided again after a jitter."""
        if self.core.set_server_calls(calls):
            self.decide_held_soon()
        if self.core.server_calls:
            self.watch_deadlines()  # its load goes stale without news

    @serialized
    def check_deadlines(self) -> None:
        """Send calls that waited for a server now up; close every call past its hard deadline."""
        now = time.monotonic()
        if self.core.server_calls and now - self.server_load_at > self.node_config.server_load_stale_after_s:
            self.counts["server_load_stale"] += 1
            self.set_server_calls(0)  # no news from the server: its load is unknown, not assumed
        if self.release_at and now >= self.release_at:
            self.decide_held()
        due = self.pending.due(now, self.replan_client.server_is_ready)
        for call in due.send:
            self.send(call)
        for call in due.unavailable:
            self.counts["planner_unavailable"] += 1
            self.get_logger().warning(f"call {call.decision.decision_id} for {call.decision.trigger.agent_id}: no "
                                      "Replan server by its hard deadline", throttle_duration_sec=5.0)
            self.finish(call.decision, CallStatus.UNAVAILABLE, call.elapsed_ms(now),
                        error="no planner server by the hard deadline")
        for call in due.missed:
            if call.goal_handle is not None:
                call.goal_handle.cancel_goal_async()
            self.counts["deadline_cancellations"] += 1
            self.get_logger().warning(f"call {call.decision.decision_id} for {call.decision.trigger.agent_id} passed its "
                                      f"hard deadline {call.decision.hard_deadline_ms:.0f} ms; cancelled")
            self.finish(call.decision, CallStatus.DEADLINE, call.elapsed_ms(now))
        if not (self.pending or self.release_at or self.core.server_calls):
            self.deadline_timer.cancel()  # nothing due: watch_deadlines restarts it

    def watch_deadlines(self) -> None:
        """Run check_deadlines every deadline_check_period_s again (something is due)."""
        if self.deadline_timer.is_canceled():
            self.deadline_timer.reset()

    # ------------------------------------------------------------------ call records

    @serialized
    def on_call_record(self, msg: ReplanCall) -> None:
        """Feed the latency model with every audited call (from any controller)."""
        try:
            record = convert.call_record_from_msg(msg)
        except ValueError as exc:
            self.counts["malformed_calls"] += 1
            self.rejections.reject("call_record", exc, msg.call_id)
            return
        if convert.informs_latency(record):
            # The model fits the call path's cost; the wait for the planner is predicted from the backlog.
            self.core.observe_latency(convert.latency_sample(record))

    # ------------------------------------------------------------------ monitoring

    @serialized
    def publish_state(self) -> None:
        """ControllerState for every agent and the team."""
        stamp = self.get_clock().now().to_msg()
        for agent_id, counters in sorted(self.core.agents.items()):
            self.state_pub.publish(convert.state_to_msg(agent_id, counters, self.core.tally.get(agent_id), stamp))
        self.state_pub.publish(convert.state_to_msg(TEAM_AGENT, self.core.team, self.core.tally.get(TEAM_AGENT), stamp))

    @serialized
    def publish_diagnostics(self) -> None:
        """The core's gate counts and latency model, the calls and the planner's presence on /diagnostics."""
        server, waiting = self.replan_client.server_is_ready(), self.pending.waiting()
        calls = Health({"calls_in_flight": len(self.pending) - waiting, "calls_waiting_for_planner": waiting,
                        "planner_server": server},
                       warnings=() if server else (f"no Replan server on '{self.node_config.replan_action}'",))
        health = (self.core.health() + self.counts.health() + Health(self.rejections.health().values)
                  + self.inputs.health() + calls)
        self.diag_pub.publish(health_array(f"{self.get_name()}: replanning gate", health,
                                           self.get_clock().now().to_msg()))


def main(args=None) -> int:
    """`ros2 run brace_controller brace_controller`."""
    return spin_node(BraceControllerNode, "brace_controller", args)


if __name__ == "__main__":
    sys.exit(main())
