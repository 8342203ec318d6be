"""The twin_world node: the PickFruit (or PushT) world state on `world_state`, each tick and when a plan or an
outcome changes the arm's step."""

from __future__ import annotations

import math

import pytest
from brace_msgs.msg import ExecutionOutcome, Plan, PlanStep, TriggerEvent, WorldState
from rclpy.node import Node
from rclpy.parameter import Parameter

from brace_common import names, qos
from brace_common.config import ConfigError
from brace_common.names import DEFAULT_NAMESPACE as NS
from brace_common.testing import wait_for
from brace_common.vocabulary import Activity
from brace_common.world_state import world_state_from_msg
from robot_bridge.pickfruit.pickfruit_world import HOME_GRIPPER_M, HOME_JOINTS
from robot_bridge.pickfruit.twin_world_node import TwinWorldConfig, TwinWorldNode


class Executor(Node):
    """Sends the arm's plans and outcomes as the planner and the executor would; keeps the world states."""

    def __init__(self) -> None:
        super().__init__("fake_executor", namespace=NS)
        self.plans = self.create_publisher(Plan, names.PLAN, qos.PLANS)
        self.outcomes = self.create_publisher(ExecutionOutcome, names.OUTCOMES, qos.EVENTS)
        self.states: list[WorldState] = []
        self.create_subscription(WorldState, names.WORLD_STATE, self.states.append, qos.WORLD_STATE)


def test_the_twin_world_publishes_its_state_each_tick_and_on_a_plan(ros):
    params = {"episodes": 1, "replan_action": "", "wait_settle_s": 0.0, "act_port": 0, "can_port": "twin_world_test",
              "max_episode_s": 60.0}
    node = ros.add(TwinWorldNode(namespace=NS, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()]))
    try:
        ex = ros.add(Executor())
        wait_for(lambda: len(ex.states) >= 3, what="world states each tick")
        steps = [s.step for s in ex.states]
        assert steps == sorted(steps) and steps[0] == 0 and steps[-1] >= 2
        first = world_state_from_msg(ex.states[0])
        (fruit,) = node.world.task
        assert first.world == "pickfruit" and first.entity(fruit).state == "on_table"
        assert first.entity(f"task_{fruit}").state == "open" and ex.states[0].header.frame_id == "base_link"
        assert first.activity("arm_0").activity == Activity.IDLE
        wait_for(lambda: ex.plans.get_subscription_count() > 0 and ex.outcomes.get_subscription_count() > 0,
                 what="the node's subscriptions")
        ex.plans.publish(Plan(plan_id="p", agent_id="arm_0", steps=[
            PlanStep(action="pick", parameters_json=f'{{"object": "{fruit}"}}'),
            PlanStep(action="place", parameters_json=f'{{"object": "{fruit}", "target": "bowl"}}')]))
        wait_for(lambda: ex.states[-1].agents[0].action == "pick", what="the plan's first step")
        ex.outcomes.publish(ExecutionOutcome(agent_id="arm_0", action="pick", success=True))
        wait_for(lambda: ex.states[-1].agents[0].action == "place", what="the outcome moves the arm on")
        assert world_state_from_msg(ex.states[-1]).activity("arm_0").index == 1
    finally:
        node.close()
    # the diagnostics timer can fire between close() and the node's destruction (a busy machine did): no exception
    node.publish_diagnostics()


def test_the_twin_world_runs_pusht_when_its_task_says_so(ros):
    params = {"task": "pusht", "episodes": 1, "replan_action": "", "wait_settle_s": 0.0, "act_port": 0,
              "can_port": "twin_world_pusht_test", "camera_name": ""}
    node = ros.add(TwinWorldNode(namespace=NS, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()]))
    try:
        ex = ros.add(Executor())
        wait_for(lambda: len(ex.states) >= 1, what="a PushT world state")
        state = world_state_from_msg(ex.states[0])
        assert state.world == "pusht" and state.entity("t_block").state == "on_table"
        assert state.entity("task_t_block").state == "open" and node.world_name == "pusht"
        wait_for(lambda: ex.plans.get_subscription_count() > 0, what="the node's plan subscription")
        push = [PlanStep(action="push", parameters_json='{"object": "t_block", "target": "goal"}')]
        # the executor begins a plan (the stand-in is told anew), goes on with one that confirms it on a periodic
        # check, and restarts it for a plan that repairs a drift
        for plan_id, kind in (("p1", TriggerEvent.KIND_PERIODIC), ("p2", TriggerEvent.KIND_PERIODIC),
                              ("p3", TriggerEvent.KIND_DRIFT)):
            ex.plans.publish(Plan(plan_id=plan_id, agent_id="arm_0", trigger_kind=kind, steps=push))
            wait_for(lambda plan_id=plan_id: node.counts["plans"] == int(plan_id[1]), what=f"plan {plan_id}")
        assert node.counts["instructions_anew"] == 2 and node.policy.anew
        assert math.isnan(world_state_from_msg(ex.states[-1]).agents[0].tracking_error)   # no contact yet
    finally:
        node.close()


def test_every_episode_starts_with_the_arm_at_home_and_the_gripper_open(ros):
    params = {"episodes": 2, "replan_action": "", "wait_settle_s": 0.0, "act_port": 0, "camera_name": "",
              "can_port": "twin_world_home_test", "max_episode_s": 1.0}
    node = ros.add(TwinWorldNode(namespace=NS, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()]))
    try:
        wait_for(lambda: node.episode == 0 and node.started_at is not None, what="the first episode")
        node.twin.place([0.3, 1.2, -0.9, 0.4, 0.6, -0.2], 0.01)   # where an episode's last step left the arm
        wait_for(lambda: node.episode == 1, what="the second episode")
        state = node.twin.state()
        assert state.joints_rad == pytest.approx(HOME_JOINTS) and state.gripper_m == pytest.approx(HOME_GRIPPER_M)
    finally:
        node.close()


def test_an_unknown_task_stops_the_node_naming_the_parameter():
    with pytest.raises(ConfigError, match="task"):
        TwinWorldConfig(task="stack_blocks").validate()
