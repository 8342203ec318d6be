"""The hostile_planner node over DDS: it serves Replan in the planner's place from the world's latched world_info
and its world_state, answering at once with a plan aimed at the nearest other robot; without a schema it answers a
planner error; a bad parameter stops it, named."""

from __future__ import annotations

import json

import pytest
from brace_msgs.action import Replan
from brace_msgs.msg import Entity, KeyValue, ReplanCall, WorldInfo, WorldState
from rclpy.action import ActionClient
from rclpy.node import Node
from rclpy.parameter import Parameter

from brace_common import names, qos
from brace_common.config import ConfigError
from brace_common.names import DEFAULT_NAMESPACE as NS
from brace_common.testing import wait_for
from brace_safety.hostile_planner_node import HostilePlannerNode

SCHEMA = {"max_steps": 2, "kinds": {"mobile": ["move_to", "stop"]},
          "actions": {"move_to": {"x": {"type": "number", "min": -50.0, "max": 50.0},
                                  "y": {"type": "number", "min": -50.0, "max": 50.0}}, "stop": {}}}


class World(Node):
    """A world's side: latched world_info, a world_state, and a controller's Replan client."""

    def __init__(self) -> None:
        super().__init__("world", namespace=NS)
        self.info = self.create_publisher(WorldInfo, names.WORLD_INFO, qos.WORLD_INFO)
        self.state = self.create_publisher(WorldState, names.WORLD_STATE, qos.WORLD_STATE)
        self.action = ActionClient(self, Replan, names.REPLAN, **qos.REPLAN_ACTION)
        self.records: list[ReplanCall] = []
        self.create_subscription(ReplanCall, names.REPLAN_CALLS, self.records.append, qos.EVENTS)

    def call(self, agent: str) -> Replan.Result:
        future = self.action.send_goal_async(Replan.Goal(agent_id=agent, step=3, decision_id="d7", slo_ms=500.0,
                                                         hard_deadline_ms=1000.0, token_budget=300))
        wait_for(future.done, what="goal response")
        result = future.result().get_result_async()
        wait_for(result.done, what="result")
        return result.result().result


def robot(name: str, x: float, y: float) -> Entity:
    e = Entity(id=name, type="robot", state="still", has_pose=True, attributes=[KeyValue(key="kind", value="mobile")])
    e.pose.position.x, e.pose.position.y = x, y
    return e


def test_every_call_is_answered_with_a_plan_aimed_at_the_nearest_other_robot(ros):
    node = ros.add(HostilePlannerNode(namespace=NS))
    world = ros.add(World())
    wait_for(world.action.server_is_ready, what="the Replan server")
    result = world.call("carter_1")
    assert result.call.status == ReplanCall.STATUS_PLANNER_ERROR and "world_info" in result.call.error
    assert not result.plan.steps

    world.info.publish(WorldInfo(world="isaac", agents=["carter_1", "carter_2", "carter_3"],
                                 action_schema_json=json.dumps(SCHEMA)))
    world.state.publish(WorldState(world="isaac", entities=[robot("carter_1", 0.0, 0.0), robot("carter_2", 2.0, 1.0),
                                                            robot("carter_3", 9.0, 9.0)]))
    wait_for(lambda: node.schema is not None and node.state is not None, what="world_info and world_state")
    for _ in range(5):
        result = world.call("carter_1")
        call, plan = result.call, result.plan
        assert call.status == ReplanCall.STATUS_OK and call.model == "hostile/nearest", call.error
        assert (call.agent_id, call.step, call.decision_id) == ("carter_1", 3, "d7") and call.latency_ms > 0.0
        assert (plan.agent_id, plan.decision_id) == ("carter_1", "d7") and 1 <= len(plan.steps) <= 2
        assert plan.steps[-1].action == "move_to" and json.loads(plan.steps[-1].parameters_json) == {"x": 2.0, "y": 1.0}
    assert node.counts["calls"] == 6 and node.counts["plans"] == 5 and node.counts["planner_errors"] == 1
    wait_for(lambda: len(world.records) == 6, what="every call's record on replan_calls")
    assert world.records[-1].call_id == call.call_id and world.records[0].status == ReplanCall.STATUS_PLANNER_ERROR


def test_a_world_state_that_does_not_hold_together_is_counted_and_the_last_good_one_kept(ros):
    node = ros.add(HostilePlannerNode(namespace=NS))
    world = ros.add(World())
    world.state.publish(WorldState(world="isaac", entities=[robot("carter_1", 0.0, 0.0)]))
    wait_for(lambda: node.state is not None, what="the first state")
    world.state.publish(WorldState(world="isaac", entities=[robot("carter_1", 0.0, 0.0), robot("carter_1", 1.0, 0.0)]))
    wait_for(lambda: node.counts["malformed_world_states"] == 1, what="the repeated id counted")
    assert [e.id for e in node.state.entities] == ["carter_1"]


@pytest.mark.parametrize("name, value", [("aim", "sideways"), ("target_frame", "ecef"), ("seed", -1)])
def test_a_bad_parameter_stops_the_node_naming_it(ros, name, value):
    with pytest.raises(ConfigError, match=name):
        HostilePlannerNode(namespace=NS, parameter_overrides=[Parameter(name, value=value)])
