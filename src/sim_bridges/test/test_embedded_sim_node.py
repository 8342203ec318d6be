"""The embedded_sim node: readiness, holds for calls of its own agents only, hostile plans counted."""

from __future__ import annotations

from brace_msgs.msg import Plan, PlanStep, ReplanDecision, WorldState
from brace_msgs.srv import Lookahead
from rclpy.node import Node
from rclpy.parameter import Parameter

from brace_common import qos
from brace_common.names import DEFAULT_NAMESPACE as NS
from brace_common.testing import UNREACHED_STEPS, wait_for
from brace_common.world_state import world_state_from_msg
from sim_bridges.warehouse.embedded_sim_node import EmbeddedSimNode


class Controller(Node):
    """Publishes decisions and plans as the controller would."""

    def __init__(self) -> None:
        super().__init__("fake_controller", namespace=NS)
        self.decisions = self.create_publisher(ReplanDecision, "decisions", qos.EVENTS)
        self.plans = self.create_publisher(Plan, "plan", qos.PLANS)
        self.states: list[WorldState] = []
        self.create_subscription(WorldState, "world_state", self.states.append, qos.WORLD_STATE)
        self.lookahead = self.create_client(Lookahead, "lookahead")



def sim(**params) -> EmbeddedSimNode:
    params = {"episodes": 1, "num_agents": 2, "max_steps": 50, "step_period_s": 0.01, "markers": False, **params}
    return EmbeddedSimNode(namespace=NS, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])


def test_the_first_episode_waits_for_the_named_peers(ros):
    node = ros.add(sim(wait_for_nodes=["fake_controller"], wait_settle_s=0.0))
    wait_for(lambda: node.counts["ticks_waiting_for_peers"] > 5, what="waiting")
    assert node.world is None and node.episode == -1
    ros.add(Controller())
    wait_for(lambda: node.world is not None, what="the episode starts once the peer is up")


def test_a_decision_for_an_agent_the_world_lacks_never_holds_it_and_bad_plans_are_counted(ros):
    node = ros.add(sim(max_steps=UNREACHED_STEPS))  # the world steps unheld until the decision arrives, however late
    controller = ros.add(Controller())
    wait_for(lambda: node.world is not None and controller.decisions.get_subscription_count() > 0, what="episode")
    decision = ReplanDecision(decision_id="d_nobody", admitted=True)
    decision.trigger.agent_id = "nobody"  # before: the world held for hold_timeout_s (60 s)
    controller.decisions.publish(decision)
    mine = ReplanDecision(decision_id="d_agent_0", admitted=True)
    mine.trigger.agent_id = "agent_0"
    controller.decisions.publish(mine)
    wait_for(lambda: "d_agent_0" in node.holds.waiting, what="the world holds for its own agent's call")
    assert "d_nobody" not in node.holds.waiting
    bad = Plan(plan_id="p", agent_id="agent_0", decision_id="d_agent_0",
               steps=[PlanStep(action="move_to", parameters_json='{"target": ["shelf_0"]}')])
    controller.plans.publish(bad)
    wait_for(lambda: node.rejections.counts["plan.bad_parameter"] == 1, what="the malformed plan counted")
    assert "d_agent_0" not in node.holds.waiting  # its answer released the hold, and the world goes on


def test_the_world_state_comes_each_step_and_when_a_plan_changes_it(ros):
    node = ros.add(sim(max_steps=6))
    controller = ros.add(Controller())
    wait_for(lambda: node.done, what="the episode ran")
    wait_for(lambda: controller.states and controller.states[-1].step == 6, what="every state arrived")
    assert [s.step for s in controller.states] == list(range(7))
    assert {s.world for s in controller.states} == {"warehouse"} and controller.states[0].header.frame_id == "map"
    first = world_state_from_msg(controller.states[0])
    assert first.activity("agent_0").plan_steps == 0 and first.entity("task_0").state == "open"


def test_lookahead_answers_over_ros_and_the_world_then_does_what_it_said(ros):
    node = ros.add(sim(grasp_failure=0.0, drift=0.0, max_steps=UNREACHED_STEPS))
    controller = ros.add(Controller())
    wait_for(lambda: node.world is not None and controller.decisions.get_subscription_count() > 0, what="episode")
    held = ReplanDecision(decision_id="d_0", admitted=True)
    held.trigger.agent_id = "agent_0"
    controller.decisions.publish(held)
    wait_for(lambda: "d_0" in node.holds.waiting, what="the world holds for the call")
    t, before = node.world.t, node.world.snapshot()
    wait_for(lambda: controller.states and controller.states[-1].step == t, what="the held state")
    target = node.world.oracle_plan("agent_0")[0].parameters["target"]
    request = Lookahead.Request(episode=0, step=t, agent_id="agent_0", action="move_to",
                                parameters_json=f'{{"target": "{target}"}}')
    wait_for(lambda: controller.lookahead.service_is_ready(), what="the lookahead service")
    future = controller.lookahead.call_async(request)
    wait_for(future.done, what="the lookahead answer")
    answer = future.result()
    assert answer.valid, answer.reason
    assert answer.state.step == t + 1 and node.world.t == t and node.world.snapshot() == before
    stale = controller.lookahead.call_async(Lookahead.Request(episode=0, step=t + 5, agent_id="agent_0",
                                                              action="wait", parameters_json="{}"))
    wait_for(stale.done, what="the stale request's answer")
    assert not stale.result().valid and "not the live state" in stale.result().reason
    controller.plans.publish(Plan(plan_id="p", agent_id="agent_0", decision_id="d_0",
                                  steps=[PlanStep(action=request.action, parameters_json=request.parameters_json)]))
    wait_for(lambda: any(s.step == t + 1 for s in controller.states), what="the next step's state")
    on_change = [s for s in controller.states if s.step == t]
    assert on_change[-1].agents[0].action == "move_to"  # the plan changed the state between steps: published
    after = next(s for s in controller.states if s.step == t + 1)
    assert world_state_from_msg(after) == world_state_from_msg(answer.state)


def test_a_plan_that_comes_before_its_decision_is_applied_when_the_decision_comes(ros):
    """A planner that answers at once (the hostile planner) can have its plan taken before the decision that
    admitted the call: the plan waits for the decision, is applied then, and the call holds nothing."""
    node = ros.add(sim(grasp_failure=0.0, drift=0.0, max_steps=UNREACHED_STEPS))
    controller = ros.add(Controller())
    wait_for(lambda: node.world is not None and controller.decisions.get_subscription_count() > 0, what="episode")
    step = node.world.oracle_plan("agent_0")[0]
    controller.plans.publish(Plan(plan_id="p_early", agent_id="agent_0", decision_id="d_early",
                                  steps=[PlanStep(action=step.action, parameters_json=step.parameters_json())]))
    wait_for(lambda: node.counts["early_plans"] == 1, what="the plan kept for its decision")
    assert node.counts["plans_applied"] == 0 and node.counts["stale_plans"] == 0
    decision = ReplanDecision(decision_id="d_early", admitted=True)
    decision.trigger.agent_id = "agent_0"
    controller.decisions.publish(decision)
    wait_for(lambda: node.counts["plans_applied"] == 1, what="the plan applied when its decision came")
    assert "d_early" not in node.holds.waiting and node.counts["stale_plans"] == 0
