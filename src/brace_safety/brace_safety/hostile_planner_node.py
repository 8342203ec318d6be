"""hostile_planner node: serves the Replan action in the E-RECAP planner's place with valid plans that make no effort
to be safe (hostile.HostilePlanner), at every call: the worst a planner may answer, to test and measure the
collision monitor. Takes world_info (the schema, the agents) and world_state (where they are); publishes each call's
record on replan_calls. docs/safety.md."""

from __future__ import annotations

import sys
import time
import uuid
from dataclasses import dataclass
from typing import Optional

from brace_msgs.action import Replan
from brace_msgs.msg import Plan, PlanStep, ReplanCall, WorldInfo, WorldState
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.action import ActionServer
from rclpy.node import Node

from brace_common import names, qos
from brace_common.action_schema import ActionSchema, PlanError
from brace_common.clock import steady_timer
from brace_common.config import diagnostics_period_param
from brace_common.counted_inputs import CountedInputs
from brace_common.counters import Counters, Health
from brace_common.diagnostics import health_array
from brace_common.params import declare_config, reject_undeclared
from brace_common.spin import spin_node
from brace_common.validation import InvalidInput, Rejections
from brace_common.world_state import WorldState as State
from brace_common.world_state import received_world_state

from .hostile import HostileConfig, HostilePlanner

COUNTS = ("calls", "plans", "planner_errors", "malformed_world_states")
"""The node's counters (diagnostics): goals served, plans given, calls left without a plan, states refused."""
MODEL = "hostile"
"""ReplanCall.model of its calls: the bags tell its plans from a model's."""


@dataclass
class HostilePlannerConfig(HostileConfig):
    """The hostile planner's parameters and the node's own."""

    diagnostics_period_s: float = diagnostics_period_param()


class HostilePlannerNode(Node):
    """Thin rclpy shell around HostilePlanner: Replan goals in, a valid plan (or a planner error) out."""

    def __init__(self, **kwargs) -> None:
        super().__init__("hostile_planner", **kwargs)
        self.config = declare_config(self, HostilePlannerConfig)
        reject_undeclared(self)
        self.planner = HostilePlanner(self.config)
        self.schema: Optional[ActionSchema] = None
        self.agents: list[str] = []
        self.state: Optional[State] = None
        self.counts = Counters(COUNTS, warn=["planner_errors", "malformed_world_states"])
        self.rejections = Rejections(self.get_logger())
        self.inputs = CountedInputs()
        self.inputs.subscribe(self, WorldInfo, names.WORLD_INFO, self.on_world_info, "world_info", qos.WORLD_INFO)
        self.inputs.subscribe(self, WorldState, names.WORLD_STATE, self.on_world_state, "world_state",
                              qos.WORLD_STATE)
        self.calls_pub = self.create_publisher(ReplanCall, names.REPLAN_CALLS, qos.EVENTS)
        self.server = ActionServer(self, Replan, names.REPLAN, self.execute, **qos.REPLAN_ACTION)
        self.diag_pub = self.create_publisher(DiagnosticArray, names.DIAGNOSTICS, qos.DIAGNOSTICS)
        steady_timer(self, self.config.diagnostics_period_s, self.publish_diagnostics)
        self.get_logger().info(f"hostile planner: aim {self.config.aim} ({self.config.aim_action}, "
                               f"{self.config.target_frame}), seed {self.config.seed}")

    def destroy_node(self) -> None:
        """No goal is taken after the node goes."""
        self.server.destroy()
        super().destroy_node()

    def on_world_info(self, msg: WorldInfo) -> None:
        """The episode's schema and agents; a schema that does not parse is logged and counted."""
        try:
            self.schema = ActionSchema.from_json(msg.action_schema_json) if msg.action_schema_json else None
        except (InvalidInput, ValueError) as exc:
            self.rejections.reject("world_info", InvalidInput("bad_schema", str(exc)), msg.world)
            self.schema = None
        self.agents = list(msg.agents)

    def on_world_state(self, msg: WorldState) -> None:
        """Where the agents are now."""
        state = received_world_state(msg, self.counts, self.rejections)
        if state is not None:
            self.state = state

    def execute(self, goal_handle) -> Replan.Result:
        """Answer at once: a plan the world's schema accepts, or a planner error when there is none to give."""
        start = time.perf_counter()
        goal = goal_handle.request
        self.counts.add("calls")
        result = Replan.Result()
        call = result.call
        call.header.stamp = self.get_clock().now().to_msg()
        call.call_id, call.decision_id, call.agent_id = uuid.uuid4().hex, goal.decision_id, goal.agent_id
        call.step, call.mode, call.token_budget = goal.step, goal.mode, goal.token_budget
        call.slo_ms, call.hard_deadline_ms = goal.slo_ms, goal.hard_deadline_ms
        call.compressor, call.model, call.backend = "none", f"{MODEL}/{self.config.aim}", "local"
        try:
            if self.schema is None:
                raise PlanError("no_schema", "no world_info with an action schema yet")
            steps = self.planner.plan(self.schema, goal.agent_id, self.state, self.agents)
        except PlanError as exc:
            self.counts.add("planner_errors")
            call.status, call.error = ReplanCall.STATUS_PLANNER_ERROR, str(exc)
        else:
            self.counts.add("plans")
            call.status = ReplanCall.STATUS_OK
            result.plan = Plan(plan_id=f"{goal.agent_id}/{call.call_id[:12]}", agent_id=goal.agent_id,
                               step=goal.step, decision_id=goal.decision_id, trigger_kind=goal.trigger_kind,
                               steps=[PlanStep(index=i, action=s.action, parameters_json=s.parameters_json())
                                      for i, s in enumerate(steps)])
            result.plan.header.stamp = call.header.stamp
        call.latency_ms = (time.perf_counter() - start) * 1000.0
        call.slo_met = call.latency_ms <= goal.slo_ms
        goal_handle.succeed()
        self.calls_pub.publish(call)   # the audit record, as the planner's: the bag, the world's hold, the runner
        return result

    def publish_diagnostics(self) -> None:
        """Calls, plans, planner errors, lost and rejected input."""
        cfg = self.config
        health = Health({"aim": cfg.aim, "aim_action": cfg.aim_action, "schema": str(self.schema is not None),
                         "agents": str(len(self.agents))}) + self.counts.health() + \
            self.rejections.health() + Health(self.inputs.health().values)
        self.diag_pub.publish(health_array(f"{self.get_name()}: hostile planner", health,
                                           self.get_clock().now().to_msg()))


def main(args=None) -> int:
    """`ros2 run brace_safety hostile_planner`."""
    return spin_node(HostilePlannerNode, "hostile_planner", args)


if __name__ == "__main__":
    sys.exit(main())
