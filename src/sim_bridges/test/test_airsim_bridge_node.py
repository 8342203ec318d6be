"""The airsim_bridge node against brace-airsim-peer through AirSim's real client: readiness in any order, plans
flown to their goals, bad plans dropped with nothing moving, holds, a lost simulator and its return."""

from __future__ import annotations

import pytest
from brace_msgs.msg import (
    AgentState,
    ContextEntry,
    Episode,
    ExecutionOutcome,
    Plan,
    PlanStep,
    ReplanDecision,
    WorldState,
)
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter

from brace_common import names, qos
from brace_common.local_http import free_port
from brace_common.names import DEFAULT_NAMESPACE as NS
from brace_common.spin import autostart
from brace_common.testing import UNREACHED_STEPS, wait_for
from brace_common.world_state import world_state_from_msg
from sim_bridges.airsim.airsim_bridge_node import AirSimBridgeNode
from sim_bridges.airsim.airsim_peer import AirSimPeer
from sim_bridges.airsim.intersection import IntersectionConfig, routes, settings


class Stack(Node):
    """Plays the controller (decisions, plans) and listens to what the bridge publishes."""

    def __init__(self) -> None:
        super().__init__("fake_stack", namespace=NS)
        self.decisions = self.create_publisher(ReplanDecision, names.DECISIONS, qos.EVENTS)
        self.plans = self.create_publisher(Plan, names.PLAN, qos.PLANS)
        self.states: dict[str, AgentState] = {}
        self.outcomes: list[ExecutionOutcome] = []
        self.entries: list[ContextEntry] = []
        self.episodes: list[Episode] = []
        self.world_states: list[WorldState] = []
        self.create_subscription(WorldState, names.WORLD_STATE, self.world_states.append, qos.WORLD_STATE)
        self.diagnostics: list[DiagnosticStatus] = []
        self.create_subscription(AgentState, names.AGENT_STATES, lambda m: self.states.__setitem__(m.agent_id, m),
                                 qos.EVENTS)
        self.create_subscription(ExecutionOutcome, names.OUTCOMES, self.outcomes.append, qos.EVENTS)
        self.create_subscription(ContextEntry, names.CONTEXT, self.entries.append, qos.EVENTS)
        self.create_subscription(Episode, names.EPISODE, self.episodes.append, qos.EVENTS)
        self.create_subscription(DiagnosticArray, names.DIAGNOSTICS,
                                 lambda m: self.diagnostics.extend(s for s in m.status if "airsim_bridge" in s.name),
                                 qos.DIAGNOSTICS)

    def plan(self, agent: str, decision: str, *steps: tuple[str, str], bridge: AirSimBridgeNode = None) -> None:
        """An admitted decision for `agent`, then (once `bridge` holds for it, as a call takes time) its plan."""
        d = ReplanDecision(decision_id=decision, admitted=True)
        d.trigger.agent_id = agent
        self.decisions.publish(d)
        if bridge is not None:
            wait_for(lambda: bridge.holds.of_this_episode(decision), what=f"decision {decision} received")
        self.plans.publish(Plan(plan_id=f"p_{decision}", agent_id=agent, decision_id=decision,
                                steps=[PlanStep(action=a, parameters_json=p) for a, p in steps]))


def bridge(port: int = 41451, **params) -> AirSimBridgeNode:
    params = {"port": port, "num_agents": 1, "episodes": 1, "max_steps": 60, "step_period_s": 0.01, "sim_step_s": 1.0,
              "reconnect_period_s": 0.2, "timeout_s": 2.0, "gust_probability": 0.0, "markers": True,
              "wait_settle_s": 0.0, **params}
    return AirSimBridgeNode(namespace=NS, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])


def goal_plan(scenario: IntersectionConfig, drone: str) -> list[tuple[str, str]]:
    gx, gy, _ = routes(scenario)[drone].goal
    return [("move_to", f'{{"x": {gx}, "y": {gy}, "z": -10.0, "speed": 5.0}}'), ("land", "{}")]


@pytest.mark.parametrize("param, value", [("num_agents", 9), ("hold_m", 5.0), ("vehicles", ["a", "b"]), ("host", " "),
                                          ("port", 0), ("frame_id", "")])
def test_invalid_parameters_fail_configure_naming_the_parameter(ros, param, value):
    node = ros.add(bridge(**{"port": free_port(), param: value}))
    error = autostart(node)
    assert error is not None and f"'{param}'" in error


def test_the_simulator_may_come_up_after_the_bridge_and_a_plan_lands_the_drone_at_its_goal(ros):
    port = free_port()
    scenario = IntersectionConfig(num_agents=1)
    # the world steps unheld from the takeoff until the test's decision arrives, however slowly: the episode ends when
    # the drone lands, and max_steps is out of reach
    node = ros.add(bridge(port, wait_for_nodes=["fake_stack"], max_steps=UNREACHED_STEPS))
    assert autostart(node) is None
    stack = ros.add(Stack())
    wait_for(lambda: any(s.level == DiagnosticStatus.ERROR and "AirSim" in s.message for s in stack.diagnostics),
             what="diagnostics ERROR while no simulator answers")
    assert node.world is None
    with AirSimPeer(settings(scenario), port=port) as peer:
        wait_for(lambda: len(stack.episodes) == 1, what="the episode starts once the simulator answers")
        assert stack.episodes[0].event == Episode.EVENT_START
        wait_for(lambda: any(o.action == "takeoff" and o.success for o in stack.outcomes), what="takeoff")
        stack.plan("drone_0", "d1", *goal_plan(scenario, "drone_0"), bridge=node)
        wait_for(lambda: len(stack.episodes) == 2, timeout=60.0, what="the episode ends")
        end = stack.episodes[-1]
        assert end.event == Episode.EVENT_END and end.success and end.delivered == 1 and end.world == "airsim"
        # entries, outcomes and episodes are three topics: the first two may arrive after the episode's end
        wait_for(lambda: any(e.kind == "task_done" and "drone_0" in e.text for e in stack.entries), what="task_done")
        wait_for(lambda: [o.action for o in stack.outcomes if o.success] == ["takeoff", "move_to", "land"],
                 what="the outcomes of takeoff, move_to and land")
        assert node.plans == 1 and node.agreeing == 1  # the plan was the oracle's
        gx, gy, _ = routes(scenario)["drone_0"].goal
        state = stack.states["drone_0"]  # ENU: x east, y north
        assert state.header.frame_id == "map"
        assert abs(state.position.x - gy) < 2.0 and abs(state.position.y - gx) < 2.0 and state.position.z < 0.5
        assert peer.counts["moveToPosition"] >= 1 and peer.counts["simContinueForTime"] >= end.steps
        assert any(m == "getSettingsString" for m, _ in peer.received)
        wait_for(lambda: stack.world_states and stack.world_states[-1].step == end.steps, what="the last world state")
        steps = [s.step for s in stack.world_states]
        assert set(steps) == set(range(end.steps + 1)) and steps == sorted(steps)  # each step, on change once more
        last = world_state_from_msg(stack.world_states[-1])
        assert last.world == "airsim" and last.entity("drone_0").state == "arrived"
        assert last.entity("task_drone_0").state == "done" and stack.world_states[-1].header.frame_id == "map"
        pose = last.entity("drone_0").pose
        assert abs(pose.x - gy) < 2.0 and abs(pose.y - gx) < 2.0  # ENU, as agent_states
        assert any(s.agents[0].action == "move_to" for s in stack.world_states)


def test_malformed_plans_are_counted_and_nothing_moves(ros):
    port = free_port()
    scenario = IntersectionConfig(num_agents=2)
    with AirSimPeer(settings(scenario), port=port) as peer:
        # an episode that outlasts the five plans however slowly they are delivered
        node = ros.add(bridge(port, num_agents=2, hold_while_planning=False, max_steps=UNREACHED_STEPS, step_period_s=0.05))
        assert autostart(node) is None
        stack = ros.add(Stack())
        wait_for(lambda: node.world is not None and stack.plans.get_subscription_count() > 0, what="episode")
        moves = peer.counts["moveToPosition"]
        bad = [("drone_0", ("teleport", "{}")),
               ("drone_0", ("move_to", '{"x": "north", "y": 3.0, "z": -10.0, "speed": 5.0}')),
               ("drone_0", ("yield_to", '{"agent": "drone_9"}')),
               ("drone_0", ("move_to", '{"x": 1e309, "y": 3.0, "z": -10.0, "speed": 5.0}')),
               ("nobody", ("land", "{}"))]
        for i, (agent, step) in enumerate(bad, 1):  # one at a time, each counted before the next
            stack.plan(agent, f"bad{i}", step, bridge=node if agent != "nobody" else None)
            wait_for(lambda i=i: node.counts["malformed_plans"] == i, what=f"malformed plan {i} counted")
        assert node.rejections.counts["plan.unknown_skill"] == 1 and node.rejections.counts["plan.unknown_agent"] == 1
        assert peer.counts["moveToPosition"] == moves and node.plans == 0


def test_an_admitted_call_holds_the_simulator_until_its_plan_arrives(ros):
    port = free_port()
    with AirSimPeer(settings(IntersectionConfig(num_agents=1)), port=port) as peer:
        node = ros.add(bridge(port, max_steps=UNREACHED_STEPS))  # the world steps unheld until the decision arrives
        assert autostart(node) is None
        stack = ros.add(Stack())
        wait_for(lambda: node.world is not None and stack.decisions.get_subscription_count() > 0, what="episode")
        d = ReplanDecision(decision_id="held", admitted=True)
        d.trigger.agent_id = "drone_0"
        stack.decisions.publish(d)
        wait_for(lambda: "held" in node.holds.waiting, what="the hold")
        steps = node.counts["steps"]
        wait_for(lambda: node.counts["held_ticks"] > 20, what="held ticks")
        assert node.counts["steps"] == steps and peer.paused
        stack.plans.publish(Plan(plan_id="p", agent_id="drone_0", decision_id="held",
                                 steps=[PlanStep(action="hover", parameters_json='{"seconds": 2.0}')]))
        wait_for(lambda: node.counts["steps"] > steps + 2, what="stepping resumes")


def test_a_lost_simulator_turns_diagnostics_error_and_its_return_hovers_the_drones(ros):
    port = free_port()
    scenario = IntersectionConfig(num_agents=2)
    peer = AirSimPeer(settings(scenario), port=port).start()
    node = ros.add(bridge(port, num_agents=2, max_steps=UNREACHED_STEPS, hold_while_planning=False))
    assert autostart(node) is None
    stack = ros.add(Stack())
    wait_for(lambda: node.world is not None and node.world.t > 5, what="flying")
    peer.stop()
    wait_for(lambda: node.counts["link_losses"] >= 1, what="the loss noticed")
    stack.diagnostics.clear()
    wait_for(lambda: any(s.level == DiagnosticStatus.ERROR and "AirSim" in s.message
                         for s in stack.diagnostics), what="diagnostics ERROR")
    t = node.world.t
    with AirSimPeer(settings(scenario), port=port) as back:
        wait_for(lambda: node.counts["reconnects"] >= 1, what="reconnected")
        wait_for(lambda: back.counts["hover"] >= 1, what="every flying drone told to hover")
        wait_for(lambda: node.world is not None and node.world.t > t + 3, what="stepping resumes")
    node.trigger_deactivate()


def test_without_lockstep_the_simulator_runs_in_real_time_and_holds_are_refused(ros):
    refused = ros.add(bridge(free_port(), lockstep=False))
    assert "'hold_while_planning'" in autostart(refused)
    port = free_port()
    scenario = IntersectionConfig(num_agents=1)
    with AirSimPeer(settings(scenario, clock_speed=10.0), port=port) as peer:
        node = ros.add(bridge(port, lockstep=False, hold_while_planning=False, step_period_s=0.05, max_steps=UNREACHED_STEPS))
        assert autostart(node) is None
        stack = ros.add(Stack())
        wait_for(lambda: node.world is not None and any(o.action == "takeoff" for o in stack.outcomes),
                 what="takeoff in real time")
        assert not peer.paused and peer.counts["simContinueForTime"] == 0
        stack.plan("drone_0", "d1", *goal_plan(scenario, "drone_0"), bridge=node)
        wait_for(lambda: any(e.event == Episode.EVENT_END for e in stack.episodes), timeout=60.0, what="episode end")
        assert stack.episodes[-1].success


def test_configure_creates_the_topics_activate_steps_deactivate_stops_and_cleanup_destroys(ros):
    port = free_port()
    node = ros.add(bridge(port, max_steps=UNREACHED_STEPS, hold_while_planning=False))

    def graph() -> set[str]:
        return {name for kind in ("publisher", "subscriber")
                for name, _ in getattr(node, f"get_{kind}_names_and_types_by_node")("airsim_bridge", NS)}

    stack_topics = {f"{NS}/{names.PLAN}", f"{NS}/{names.DECISIONS}", f"{NS}/{names.CONTEXT}", f"{NS}/{names.EPISODE}"}
    wait_for(lambda: "/diagnostics" in graph(), what="/diagnostics from the start")
    assert not stack_topics & graph() and node.timer is None
    assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS, node.last_error
    wait_for(lambda: stack_topics <= graph(), what="the stack's topics at configure")
    assert node.timer.is_canceled()  # inactive: nothing steps
    with AirSimPeer(settings(IntersectionConfig(num_agents=1)), port=port):
        assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
        wait_for(lambda: node.world is not None and node.counts["steps"] > 2, what="stepping once active")
        assert node.trigger_deactivate() == TransitionCallbackReturn.SUCCESS
        steps = node.counts["steps"]
        assert node.timer.is_canceled()
        node.tick()  # a tick dispatched before deactivate took the lock does nothing
        assert node.counts["steps"] == steps
        assert node.trigger_cleanup() == TransitionCallbackReturn.SUCCESS
    wait_for(lambda: not stack_topics & graph(), what="the stack's topics destroyed at cleanup")
    assert "/diagnostics" in graph() and node.session is None and node.out.context is None
    assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS, node.last_error
    wait_for(lambda: stack_topics <= graph(), what="the topics again at the next configure")
