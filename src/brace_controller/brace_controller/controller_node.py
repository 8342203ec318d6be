"""brace_controller node: gates every trigger, budgets admitted ones, runs the Replan calls (topics, the action
client and its deadlines: docs/nodes.md, "brace_controller")."""

from __future__ import annotations

import secrets
import sys
import threading
import time
from dataclasses import replace

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
from brace_common.replanning import Decision
from brace_common.spin import spin_node
from brace_common.validation import Rejections
from brace_common.vocabulary import CallStatus, EpisodeEvent, RecapNeed

from . import convert, held_release, pending_calls
from .config import ControllerConfig, ControllerNodeConfig
from .controller import BraceController
from .convert import ABORTED_BY_PLANNER
from .held_release import HeldRelease
from .pending_calls import CallEnd, PendingCall, PendingCalls

COUNTS = ("malformed_triggers", *pending_calls.COUNTS, *held_release.COUNTS)
"""The node's counters (diagnostics keys): malformed triggers, how calls end, the held triggers' release."""


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
        self.counts = Counters(COUNTS, warn=("malformed_triggers", *pending_calls.WARNINGS))
        self.held_msgs: dict[str, TriggerEvent] = {}  # the messages of the core's held triggers
        self.release = HeldRelease(self.core, self.node_config, self.counts)

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
        self.replan_client = ActionClient(self, Replan, self.node_config.replan_action, **qos.REPLAN_ACTION)
        # Runs only while something is due (a call in flight, held triggers, a shared server's load): idle, the
        # controller wakes only for its state and diagnostics.
        self.deadline_timer = steady_timer(self, self.node_config.deadline_check_period_s, self.check_deadlines)
        steady_timer(self, self.node_config.state_period_s, self.publish_state)
        steady_timer(self, self.node_config.diagnostics_period_s, self.publish_diagnostics)
        self.get_logger().info(f"profile '{self.core.profile.name}', delta={self.config.cooldown_steps}, omega="
                               f"{self.config.commit_steps}, k={self.config.override_after_failures}, "
                               f"adaptive_budget={self.config.adaptive_budget}")

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
            self.finish(call, call.cancelled_by_episode(time.monotonic()))

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
            self.get_logger().warning(f"planner rejected goal {decision_id}")
            self.pending.pop(decision_id)
            self.finish(call, call.rejected(time.monotonic()))
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
        end = convert.call_end(wrapped.status, wrapped.result, call.elapsed_ms(time.monotonic()))
        if end.fault == ABORTED_BY_PLANNER:
            self.get_logger().error(f"call {decision_id} for {call.decision.trigger.agent_id}: the planner aborted "
                                    "the goal (no result); recorded as a planner error")
        plan = convert.answered_plan(wrapped.result, call.decision) if end.status == CallStatus.OK else None
        if plan is not None:
            end = replace(end, plan_changed=self.core.accept_plan(plan.agent_id, plan_signature(plan)))
            self.plan_pub.publish(plan)
        self.finish(call, end)
        if end.status == CallStatus.OK:
            self.follow_recursion(call.decision, wrapped.result.plan)

    def follow_recursion(self, decision: Decision, answered: Plan) -> None:
        """ReCAP: decide at once on the call its agent's frame stack asks for when the plan left it nothing to
        execute (the trigger is in the decision's message; the controller does not hear its own /triggers)."""
        trigger = self.core.follow_up(decision.trigger.agent_id, decision.trigger.step, RecapNeed(answered.recap_need),
                                      int(answered.depth), bool(answered.steps))
        if trigger is not None:
            self.decide(trigger, convert.trigger_to_msg(trigger, self.get_clock().now().to_msg()))

    def finish(self, call: PendingCall, end: CallEnd) -> None:
        """Tell the core a closed call is over (its goal cancelled if it runs); count how it ended; audit a call no
        planner answered (`end.error`); held triggers may go."""
        if end.cancels and call.goal_handle is not None:
            call.goal_handle.cancel_goal_async()
        self.counts.add("calls_finished")
        if end.counter:
            self.counts.add(end.counter)
        if end.error:
            self.calls_pub.publish(convert.unanswered_call_to_msg(
                call.decision, end.status, end.latency_ms, self.get_clock().now().to_msg(), end.error))
        floor = self.core.quality.floor
        self.core.record_call(end.record(call.decision))
        if self.core.quality.floor != floor:
            self.get_logger().warning(f"quality floor raised to {self.core.quality.floor} tokens: calls near "
                                      f"{floor} named entities the schema does not hold")
        self.release_held(self.release.call_finished(time.monotonic()))  # the backlog shrank

    def release_held(self, due: bool) -> None:
        """Decide the held triggers again when `due`; the watchdog ticks while a release or a server's load waits."""
        for trigger in self.release.take() if due else ():
            self.decide(trigger, self.held_msgs.pop(trigger.agent_id))
        if self.release.watching:
            self.watch_deadlines()

    @serialized
    def on_server_load(self, msg: ServerLoad) -> None:
        """Count the shared planner server's requests that are not this robot's as calls ahead of its own."""
        others = int(msg.requests_running) + int(msg.requests_waiting) - int(msg.own_requests)
        self.release_held(self.release.server_load(msg.reported, others, time.monotonic()))

    @serialized
    def check_deadlines(self) -> None:
        """Send calls that waited for a server now up; close every call past its hard deadline."""
        now = time.monotonic()
        self.release_held(self.release.due(now))
        due = self.pending.due(now, self.replan_client.server_is_ready)
        for call in due.send:
            self.send(call)
        for call in due.unavailable:
            self.get_logger().warning(call.overdue_text(), throttle_duration_sec=5.0)
            self.finish(call, call.overdue(now))
        for call in due.missed:
            self.get_logger().warning(call.overdue_text())
            self.finish(call, call.overdue(now))
        if not (self.pending or self.release.watching):
            self.deadline_timer.cancel()  # nothing due: watch_deadlines restarts it

    def watch_deadlines(self) -> None:
        """Run check_deadlines every deadline_check_period_s again (something is due)."""
        if self.deadline_timer.is_canceled():
            self.deadline_timer.reset()

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

    @serialized
    def publish_state(self) -> None:
        """ControllerState for every agent and the team."""
        for msg in convert.controller_states(self.core, self.get_clock().now().to_msg()):
            self.state_pub.publish(msg)

    @serialized
    def publish_diagnostics(self) -> None:
        """The core's gate counts and latency model, the calls and the planner's presence on /diagnostics."""
        calls = self.pending.health(self.replan_client.server_is_ready(), self.node_config.replan_action)
        health = (self.core.health() + self.counts.health() + Health(self.rejections.health().values)
                  + self.inputs.health() + calls)
        self.diag_pub.publish(health_array(f"{self.get_name()}: replanning gate", health,
                                           self.get_clock().now().to_msg()))


def main(args=None) -> int:
    """`ros2 run brace_controller brace_controller`."""
    return spin_node(BraceControllerNode, "brace_controller", args)


if __name__ == "__main__":
    sys.exit(main())
