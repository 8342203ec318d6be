"""brace_controller node: gates every trigger, budgets admitted ones, runs the Replan calls.

Subscribes  /brace/triggers (TriggerEvent), /brace/replan_calls (ReplanCall),
            /brace/episode (Episode: counters restart at EVENT_START)
Publishes   /brace/decisions (ReplanDecision, one per trigger), /brace/plan (Plan),
            /brace/controller_state (ControllerState), /diagnostics,
            /brace/replan_calls (ReplanCall) for admitted calls no planner answered
Action client  Replan on `replan_action`; a goal still running at its hard
            deadline is cancelled and recorded as a deadline miss.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from dataclasses import dataclass
from typing import Optional

from action_msgs.msg import GoalStatus
from brace_msgs.action import Replan
from brace_msgs.msg import ControllerState, Episode, Plan, ReplanCall, ReplanDecision, TriggerEvent
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.action import ActionClient
from rclpy.node import Node

from . import convert, qos
from .config import ControllerConfig, ControllerNodeConfig
from .controller import BraceController
from .ros_params import declare_config
from .spin import spin_node
from .types import CallRecord, CallStatus, Decision


def _serialized(method):
    """Run `method` under the node's lock.

    Action futures run their done-callbacks as executor tasks outside the
    node's callback group, so on a multi-threaded executor a call's result can
    arrive while the deadline watchdog or a trigger is being handled; the core
    and the pending calls are touched by one callback at a time.
    """
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return wrapper


@dataclass
class PendingCall:
    """An admitted call whose Replan goal has not finished yet."""

    decision: Decision
    deadline: float  # time.monotonic() past which the call is cancelled
    goal_handle: Optional[object] = None
    started: float = 0.0


class BraceControllerNode(Node):
    """Thin rclpy shell around BraceController."""

    def __init__(self, **kwargs) -> None:
        super().__init__("brace_controller", **kwargs)
        self.config = declare_config(self, ControllerConfig)
        self.node_config = declare_config(self, ControllerNodeConfig)
        self.core = BraceController(self.config, self.config.load_profile(), id_prefix=self.get_name())
        self.pending: dict[str, PendingCall] = {}
        self._lock = threading.RLock()
        self.counts = {"malformed_triggers": 0, "malformed_calls": 0, "planner_unavailable": 0,
                       "goals_rejected": 0, "deadline_cancellations": 0, "calls_finished": 0}

        self.decisions_pub = self.create_publisher(ReplanDecision, "/brace/decisions", qos.EVENTS)
        self.plan_pub = self.create_publisher(Plan, "/brace/plan", qos.PLANS)
        self.state_pub = self.create_publisher(ControllerState, "/brace/controller_state", qos.STATE)
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", qos.DIAGNOSTICS)
        self.create_subscription(TriggerEvent, "/brace/triggers", self.on_trigger, qos.EVENTS)
        self.create_subscription(ReplanCall, "/brace/replan_calls", self.on_call_record, qos.EVENTS)
        self.create_subscription(Episode, "/brace/episode", self.on_episode, qos.EVENTS)
        self.calls_pub = self.create_publisher(ReplanCall, "/brace/replan_calls", qos.EVENTS)
        self.replan_client = ActionClient(self, Replan, self.node_config.replan_action)
        self.create_timer(self.node_config.deadline_check_period_s, self.check_deadlines)
        self.create_timer(self.node_config.state_period_s, self.publish_state)
        self.create_timer(self.node_config.diagnostics_period_s, self.publish_diagnostics)
        self.get_logger().info(
            f"profile '{self.core.profile.name}', delta={self.config.cooldown_steps}, "
            f"omega={self.config.commit_steps}, k={self.config.override_after_failures}, "
            f"adaptive_budget={self.config.adaptive_budget}"
        )

    # ------------------------------------------------------------------ triggers

    @_serialized
    def on_trigger(self, msg: TriggerEvent) -> None:
        """Decide on one trigger; publish the decision; start the call if admitted."""
        try:
            trigger = convert.trigger_from_msg(msg)
        except ValueError as exc:
            self.counts["malformed_triggers"] += 1
            self.get_logger().warning(f"dropped malformed trigger '{msg.trigger_id}': {exc}", throttle_duration_sec=1.0)
            return
        decision = self.core.decide(trigger)
        now = self.get_clock().now().to_msg()
        self.decisions_pub.publish(convert.decision_to_msg(decision, msg, now))
        if decision.admitted:
            self.start_call(decision)

    @_serialized
    def on_episode(self, msg: Episode) -> None:
        """A new episode restarts the per-agent gate counters (steps restart at 0)."""
        if msg.event == Episode.EVENT_START:
            self.core.reset()

    def start_call(self, decision: Decision) -> None:
        """Send the Replan goal of an admitted decision (or record the planner as unavailable)."""
        if not self.replan_client.server_is_ready():
            self.counts["planner_unavailable"] += 1
            self.get_logger().warning(
                f"no planner on '{self.node_config.replan_action}'; decision {decision.decision_id} not executed",
                throttle_duration_sec=5.0,
            )
            self.finish(decision, CallStatus.UNAVAILABLE, 0.0, error="no planner server")
            return
        started = time.monotonic()
        call = PendingCall(decision, started + decision.hard_deadline_ms / 1000.0, started=started)
        self.pending[decision.decision_id] = call
        goal = convert.goal_from_decision(decision, self.get_clock().now().to_msg())
        future = self.replan_client.send_goal_async(goal)
        future.add_done_callback(lambda f, d=decision.decision_id: self.on_goal_response(d, f))

    @_serialized
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
            self.pending.pop(decision_id, None)
            self.finish(call.decision, CallStatus.UNAVAILABLE, (time.monotonic() - call.started) * 1000.0,
                        error="planner rejected the goal")
            return
        call.goal_handle = handle
        handle.get_result_async().add_done_callback(lambda f, d=decision_id: self.on_result(d, f))

    @_serialized
    def on_result(self, decision_id: str, future) -> None:
        """Close a finished call: publish its plan, update the gate's counters."""
        call = self.pending.pop(decision_id, None)
        if call is None:  # cancelled at the deadline; its late result is not used
            return
        wrapped = future.result()
        result = wrapped.result
        if wrapped.status != GoalStatus.STATUS_SUCCEEDED:
            self.finish(call.decision, CallStatus.CANCELLED, (time.monotonic() - call.started) * 1000.0)
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
            plan_changed = self.core.accept_plan(plan.agent_id, convert.plan_signature(plan))
            self.plan_pub.publish(plan)
        self.finish(call.decision, status, float(result.call.latency_ms), plan_changed, int(result.call.tokens_after),
                    tokens_before=int(result.call.tokens_before))

    def finish(self, decision: Decision, status: CallStatus, latency_ms: float,
               plan_changed: bool = False, tokens_after: int = 0, error: str = "", tokens_before: int = 0) -> None:
        """Tell the core a call is over; audit a call no planner answered."""
        self.counts["calls_finished"] += 1
        if error:
            self.calls_pub.publish(convert.unanswered_call_to_msg(
                decision, status, latency_ms, self.get_clock().now().to_msg(), error))
        self.core.record_call(CallRecord(
            agent_id=decision.trigger.agent_id, step=decision.trigger.step, status=status,
            plan_changed=plan_changed, latency_ms=latency_ms, tokens_after=tokens_after,
            slo_ms=decision.slo_ms, decision_id=decision.decision_id, mode=decision.mode, tokens_before=tokens_before,
        ))

    @_serialized
    def check_deadlines(self) -> None:
        """Cancel every call past its hard deadline and record it as a deadline miss."""
        now = time.monotonic()
        for decision_id, call in list(self.pending.items()):
            if now < call.deadline or self.pending.pop(decision_id, None) is None:
                continue  # not due, or closed meanwhile by its result
            if call.goal_handle is not None:
                call.goal_handle.cancel_goal_async()
            self.counts["deadline_cancellations"] += 1
            self.get_logger().warning(
                f"call {decision_id} for {call.decision.trigger.agent_id} passed its hard deadline "
                f"{call.decision.hard_deadline_ms:.0f} ms; cancelled"
            )
            self.finish(call.decision, CallStatus.DEADLINE, (now - call.started) * 1000.0)

    # ------------------------------------------------------------------ call records

    @_serialized
    def on_call_record(self, msg: ReplanCall) -> None:
        """Feed the latency model with every audited call (from any controller)."""
        try:
            record = convert.call_record_from_msg(msg, plan_changed=False)
        except ValueError as exc:
            self.counts["malformed_calls"] += 1
            self.get_logger().warning(f"dropped malformed call record '{msg.call_id}': {exc}", throttle_duration_sec=1.0)
            return
        if record.status in (CallStatus.OK, CallStatus.PLANNER_ERROR):
            # The model fits the call path's cost; the wait for the planner is predicted from the backlog.
            self.core.observe_latency(convert.latency_sample(record))

    # ------------------------------------------------------------------ monitoring

    @_serialized
    def publish_state(self) -> None:
        """ControllerState for every agent and the team."""
        stamp = self.get_clock().now().to_msg()
        for agent_id, counters in sorted(self.core.agents.items()):
            self.state_pub.publish(convert.state_to_msg(agent_id, counters, self.core.tally.get(agent_id), stamp))
        self.state_pub.publish(convert.state_to_msg("team", self.core.team, self.core.tally.get("team"), stamp))

    @_serialized
    def publish_diagnostics(self) -> None:
        """Gate counts, errors and the latency model's state on /diagnostics."""
        status = DiagnosticStatus(name=f"{self.get_name()}: replanning gate", hardware_id="brace")
        totals: dict[str, int] = {}
        for tally in self.core.tally.values():
            for reason, n in tally.by_reason.items():
                totals[reason] = totals.get(reason, 0) + n
        model = self.core.latency_model
        values = {
            "triggers": sum(t.triggers for t in self.core.tally.values()),
            "admitted": sum(t.admitted for t in self.core.tally.values()),
            "suppressed": sum(t.suppressed for t in self.core.tally.values()),
            "calls_in_flight": len(self.pending),
            "latency_model_samples": model.samples,
            "latency_model_ready": model.ready,
            **{f"latency_model_{k}": v for k, v in model.describe().items()},
            **{f"reason.{k}": v for k, v in sorted(totals.items())},
            **self.counts,
        }
        status.values = [KeyValue(key=k, value=str(v)) for k, v in values.items()]
        problems = [k for k in ("malformed_triggers", "malformed_calls", "planner_unavailable",
                                "goals_rejected", "deadline_cancellations") if self.counts[k]]
        status.level = DiagnosticStatus.WARN if problems else DiagnosticStatus.OK
        status.message = ("counted: " + ", ".join(problems)) if problems else "ok"
        array = DiagnosticArray(status=[status])
        array.header.stamp = self.get_clock().now().to_msg()
        self.diag_pub.publish(array)


def main(args=None) -> int:
    """`ros2 run brace_controller brace_controller`."""
    return spin_node(BraceControllerNode, "brace_controller", args)


if __name__ == "__main__":
    sys.exit(main())
