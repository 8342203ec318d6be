"""The planner's Replan action server: goals in, each a call of the CallService, feedback, results and records out.

It exists exactly while the planner serves (the node creates it at activate, or at its planner server's first
answer, and destroys it when leaving active), so a client that sees the action is served. docs/nodes.md.
"""

from __future__ import annotations

from collections.abc import Callable

from brace_msgs.action import Replan
from brace_msgs.msg import ReplanCall
from rclpy._rclpy_pybind11 import InvalidHandle, RCLError
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.lifecycle import LifecycleNode
from rclpy.time import Time
from rclpy.timer import Timer

from brace_common import qos
from brace_common.spin import stopping
from brace_common.validation import Rejections
from brace_common.vocabulary import CallStatus

from . import convert
from .call_aborted import CallAborted
from .call_service import CallService, waited_ms
from .config import PlannerConfig


def _goal_key(goal_handle) -> bytes:
    return bytes(goal_handle.goal_id.uuid)


class ReplanActionServer:
    """Serves Replan on `node` (`cfg.replan_action`): goals refused into `rejections`, calls run by `service` (whose
    waiting calls `queue_timer` checks while any wait), each call's record handed to `record`."""

    def __init__(self, node: LifecycleNode, service: CallService, rejections: Rejections, cfg: PlannerConfig,
                 record: Callable[[ReplanCall], None], queue_timer: Timer) -> None:
        self.node, self.service, self.rejections = node, service, rejections
        self.record, self.queue_timer = record, queue_timer
        self.model = cfg.model_path  # the model a call names once the call path is gone (cleanup while it ran)
        self.server = ActionServer(
            node, Replan, cfg.replan_action, self.execute, goal_callback=self.on_goal, handle_accepted_callback=self.on_accepted,
            cancel_callback=self.on_cancel, callback_group=ReentrantCallbackGroup(), **qos.REPLAN_ACTION)
        self.serving = True

    def destroy(self) -> None:
        """Stop serving: refuse goals from now on, remove the action (a running call finishes)."""
        self.serving = False
        self.server.destroy()

    def on_goal(self, goal) -> GoalResponse:
        """Accept a goal while serving when every field is within bounds (rejections counted by reason)."""
        if not self.serving or self.service.path is None:
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
        sent, now = goal_handle.request.header.stamp, self.node.get_clock().now()
        before_ms = waited_ms(Time.from_msg(sent, clock_type=now.clock_type).nanoseconds, now.nanoseconds,
                              request.hard_deadline_ms)
        self.service.accept(_goal_key(goal_handle), request, before_ms, goal_handle.execute,
                            sent if before_ms else now.to_msg())
        if len(self.service.queue) and self.queue_timer.is_canceled():
            self.queue_timer.reset()

    def on_cancel(self, goal_handle) -> CancelResponse:
        """Accept every cancel: a waiting call is answered at once, the running one stops at its next check."""
        if self.service.cancel(_goal_key(goal_handle)):
            goal_handle.execute()
        return CancelResponse.ACCEPT

    def execute(self, goal_handle) -> Replan.Result:
        """Run (or answer without running) one call: feedback per phase, its record to `record`."""
        call = self.service.take(_goal_key(goal_handle))
        context = self.node.context
        outcome = self.service.outcome(call, lambda: goal_handle.is_cancel_requested or stopping() or not context.ok(),
                                       lambda phase, elapsed_ms: self._feedback(goal_handle, phase, elapsed_ms))
        model = self.service.model_name
        result = convert.replan_result(outcome, call, model if model is not None else self.model,
                                       self.node.get_clock().now().to_msg())
        try:
            self.record(result.call)
            if outcome.status == CallStatus.CANCELLED and goal_handle.is_cancel_requested:
                goal_handle.canceled()
            else:
                goal_handle.succeed()
        except (RCLError, InvalidHandle) as exc:
            if context.ok():
                raise
            self.node.get_logger().info(f"shutting down: call {call.call_id} not answered ({exc})")
        return result

    def _feedback(self, goal_handle, phase: str, elapsed_ms: float) -> None:
        """A call's phase as feedback; a node shutting down stops the call (CallAborted) instead."""
        try:
            if not self.node.context.ok():
                raise CallAborted("the node is shutting down")
            goal_handle.publish_feedback(convert.feedback_msg(phase, elapsed_ms, self.node.get_clock().now().to_msg()))
        except (RCLError, InvalidHandle) as exc:
            if self.node.context.ok():
                raise
            raise CallAborted("the node is shutting down") from exc
