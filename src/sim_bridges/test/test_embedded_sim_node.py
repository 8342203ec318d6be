"""The embedded_sim node: readiness, holds for calls of its own agents only, hostile plans counted."""

from __future__ import annotations

from brace_msgs.msg import Plan, PlanStep, ReplanDecision
from rclpy.node import Node
from rclpy.parameter import Parameter

from brace_common import qos
from brace_common.names import DEFAULT_NAMESPACE as NS
from brace_common.testing import wait_for
from sim_bridges.warehouse.embedded_sim_node import EmbeddedSimNode


class Controller(Node):
    """Publishes decisions and plans as the controller would."""

    def __init__(self) -> None:
        super().__init__("fake_controller", namespace=NS)
        self.decisions = self.create_publisher(ReplanDecision, "decisions", qos.EVENTS)
        self.plans = self.create_publisher(Plan, "plan", qos.PLANS)


def sim(**params) -> EmbeddedSimNode:
    params = {"episodes": 1, "agents": 2, "max_steps": 50, "step_period_s": 0.01, "markers": False, **params}
    return EmbeddedSimNode(namespace=NS, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])


def test_the_first_episode_waits_for_the_named_peers(ros):
    node = ros.add(sim(wait_for_nodes=["fake_controller"], wait_settle_s=0.0))
    wait_for(lambda: node.counts["ticks_waiting_for_peers"] > 5, what="waiting")
    assert node.world is None and node.episode == -1
    ros.add(Controller())
    wait_for(lambda: node.world is not None, what="the episode starts once the peer is up")


def test_a_decision_for_an_agent_the_world_lacks_never_holds_it_and_bad_plans_are_counted(ros):
    node = ros.add(sim())
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
