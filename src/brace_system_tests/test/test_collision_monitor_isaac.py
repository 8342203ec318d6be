"""The collision monitor between the isaac_bridge and Isaac Sim's bases (its stand-in, sim_bridges/test), over DDS,
with the stack's parameter files: the hostile planner (the hostile_planner node, aim nearest, reading the bridge's
world_info and world_state) sends each of two bases to where the other stands. With the monitor they end at rest
outside the stop zone, the approaches counted, and the trigger monitor raises a hazard for the stop, which the
bridge's world state carries as a stopped_by relation; with it passing everything (collision_monitor:=false) the same
plans bring them into contact."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from brace_msgs.action import Replan
from brace_msgs.msg import CollisionMonitorState, ExecutionOutcome, Plan, PlanStep, Relation, ReplanCall, TriggerEvent, WorldState
from rclpy.action import ActionClient
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter

from brace_bringup.run_config import params_dir
from brace_common import names, qos
from brace_common.config import load_ros_parameters
from brace_common.names import DEFAULT_NAMESPACE as NS
from brace_common.testing import wait_for
from brace_controller.trigger_monitor_node import TriggerMonitorNode
from brace_safety.cmd_vel_monitor_node import CollisionMonitorNode
from brace_safety.hostile_planner_node import HostilePlannerNode
from sim_bridges.isaac.isaac_bridge_node import IsaacBridgeNode

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sim_bridges" / "test"))  # Isaac Sim's stand-in
from isaac_standin import IsaacStandIn  # noqa: E402

ROBOTS = {"carter_1": "mobile", "carter_2": "mobile"}
ORIGINS = [0.0, 0.0, 0.0, 3.0, 0.0, math.pi]   # 3 m apart, facing each other
CONTACT_M = 0.8                                 # two footprints of the stack's parameter file (0.4 m each)


def overrides(node: str, **values) -> list[Parameter]:
    """The stack's parameter file for `node` (params/), under `values`."""
    file = {"isaac_bridge": "isaac_bridge.yaml", "cmd_vel_monitor": "isaac/cmd_vel_monitor.yaml"}[node]
    merged = {**load_ros_parameters(params_dir() / file, node), **values}
    return [Parameter(k, Parameter.Type.NOT_SET) if v == [] else Parameter(k, value=v) for k, v in merged.items()]


class Caller(Node):
    """The controller's part: a Replan call per base to the hostile planner, its plan published; and what the stack
    says back."""

    def __init__(self) -> None:
        super().__init__("caller", namespace=NS)
        self.plans = self.create_publisher(Plan, "plan", qos.PLANS)
        self.action = ActionClient(self, Replan, names.REPLAN, **qos.REPLAN_ACTION)
        self.states: list[CollisionMonitorState] = []
        self.outcomes: list[ExecutionOutcome] = []
        self.triggers: list[TriggerEvent] = []
        self.world_states: list[WorldState] = []
        self.create_subscription(CollisionMonitorState, "collision_monitor_state", self.states.append, qos.INPUTS)
        self.create_subscription(ExecutionOutcome, "outcomes", self.outcomes.append, qos.INPUTS)
        self.create_subscription(TriggerEvent, "triggers", self.triggers.append, qos.INPUTS)
        self.create_subscription(WorldState, "world_state", self.world_states.append, qos.WORLD_STATE)

    def held(self) -> set[tuple[str, str]]:
        """(agent, obstacle) of every stopped_by relation the bridge's world states carried."""
        return {(r.subject, r.object) for s in self.world_states for r in s.relations
                if r.predicate == Relation.PREDICATE_STOPPED_BY}

    def at_each_other(self, hostile: HostilePlannerNode) -> None:
        """Each base's plan from the hostile planner, once it knows where both stand; published as the controller's."""
        wait_for(lambda: hostile.schema is not None and hostile.state is not None and
                 all(e.pose is not None for e in hostile.state.entities if e.id in ROBOTS), 30.0,
                 "the hostile planner knows the schema and both bases' poses")
        for agent in ROBOTS:
            future = self.action.send_goal_async(Replan.Goal(agent_id=agent, decision_id=f"d_{agent}", slo_ms=1000.0,
                                                             hard_deadline_ms=2000.0, token_budget=300))
            wait_for(future.done, what="goal response")
            result = future.result().get_result_async()
            wait_for(result.done, what="the hostile plan")
            answer = result.result().result
            assert answer.call.status == ReplanCall.STATUS_OK, answer.call.error
            plan = answer.plan
            plan.decision_id = ""   # as an initial plan: the bridge holds no calls
            plan.header.stamp = self.get_clock().now().to_msg()
            self.plans.publish(plan)


    def send(self, agent: str, waypoints: list[tuple[float, float]]) -> None:
        """A plan of move_to steps through `waypoints` (the bridge's frame), published as an initial plan."""
        steps = [PlanStep(index=i, action="move_to", parameters_json=json.dumps({"x": x, "y": y}))
                 for i, (x, y) in enumerate(waypoints)]
        plan = Plan(plan_id=f"oracle_{agent}", agent_id=agent, steps=steps)
        plan.header.stamp = self.get_clock().now().to_msg()
        self.plans.publish(plan)


def world_distance(sim: IsaacStandIn) -> float:
    """The bases' centre distance in the world frame (each odometry pose placed by its origin)."""
    (x1, y1, _), (x2, y2, _) = sim.pose["carter_1"], sim.pose["carter_2"]
    return math.hypot(x1 - (3.0 - x2), y1 + y2)


def graph(ros, enable: bool, **monitor_params):
    bridge = IsaacBridgeNode(namespace=NS, parameter_overrides=overrides(
        "isaac_bridge", use_sim_time=True, agents=list(ROBOTS), agent_kinds=list(ROBOTS.values()), origins=ORIGINS,
        camera_agents=[], tasks=[f"{r}: cross the aisle." for r in ROBOTS],
        task_goals=["carter_1: 3.0 0.0", "carter_2: 0.0 0.0"], move_timeout_s=20.0, max_linear_speed=0.6))
    monitor = CollisionMonitorNode(namespace=NS, parameter_overrides=overrides(
        "cmd_vel_monitor", agents=list(ROBOTS), origins=ORIGINS, static_obstacles=[], enable=enable,
        diagnostics_period_s=0.2, **monitor_params))
    for node in (bridge, monitor):
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS, node.last_error
        assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
    triggers = TriggerMonitorNode(namespace=NS, parameter_overrides=[
        Parameter("agents", value=list(ROBOTS)), Parameter("hazard_distance_m", value=0.0)])
    nodes = [ros.add(n) for n in (bridge, monitor, triggers)]
    sim = ros.add(IsaacStandIn(ROBOTS, time_scale=2.0))
    hostile = ros.add(HostilePlannerNode(namespace=NS, parameter_overrides=[Parameter("aim", value="nearest")]))
    planner = ros.add(Caller())
    wait_for(lambda: bridge.fleet.judge is not None, 30.0, "the episode started")
    wait_for(lambda: planner.plans.get_subscription_count() > 0 and planner.action.server_is_ready(),
             what="the bridge's plan subscription and the hostile planner")
    planner.hostile = hostile
    return nodes, sim, planner


def test_the_hostile_planner_drives_two_bases_at_each_other_and_the_monitor_keeps_them_apart(ros):
    (_, monitor, _), sim, planner = graph(ros, enable=True)
    closest = [math.inf]

    def at_rest() -> bool:   # after each base's move_to (a hostile plan may wait first) was approached and held
        closest[0] = min(closest[0], world_distance(sim))
        return all(sim.cmd_vel[r] and abs(sim.cmd_vel[r][-1][0]) < 0.02 for r in ROBOTS) and closest[0] < 1.6 and \
            all(monitor.monitor.counts[f"approaches.{r}"] >= 1 for r in ROBOTS)

    planner.at_each_other(planner.hostile)
    wait_for(at_rest, 120.0, "both bases held at rest near each other")
    hazard = monitor.config.hazard_distance_m
    assert closest[0] >= hazard - 0.05, closest[0]   # one control period of lag at most: no contact (0.8 m)
    def approached() -> set[tuple[str, str]]:
        return {(s.agent_id, s.obstacle) for s in planner.states if s.action == CollisionMonitorState.ACTION_APPROACH}

    wait_for(lambda: approached() == {("carter_1", "carter_2"), ("carter_2", "carter_1")}, what="both approaches")
    assert all(monitor.monitor.counts[f"approaches.{r}"] >= 1 for r in ROBOTS)
    assert monitor.monitor.min_distance_m["carter_1"] >= hazard - 0.05
    # The executor never sees its commands scaled: it keeps asking for speed until its step times out.
    wait_for(lambda: any(o.failure == ExecutionOutcome.FAILURE_TIMEOUT for o in planner.outcomes), 120.0,
             "the move_to timed out short of its goal")


def test_plans_that_pass_each_other_deliver_both_bases_through_the_monitor(ros):
    """The deadlock count against an oracle: the bases swap places along lanes 2 m apart (the plan a planner that
    knows both routes would send): through the monitor both reach their goals, no deadlock of its making; the hostile
    plan above (straight at each other) is the one standoff, and it is the plan's."""
    (bridge, monitor, _), sim, planner = graph(ros, enable=True)
    closest = [math.inf]
    planner.send("carter_1", [(1.0, 1.0), (2.0, 1.0), (3.0, 0.0)])
    planner.send("carter_2", [(2.0, -1.0), (1.0, -1.0), (0.0, 0.0)])

    def delivered() -> bool:
        closest[0] = min(closest[0], world_distance(sim))
        return bridge.fleet.judge.success()

    wait_for(delivered, 120.0, "both bases at their goals")
    assert closest[0] >= monitor.config.hazard_distance_m - 0.05, closest[0]
    assert not any(o.failure == ExecutionOutcome.FAILURE_SAFETY_STOP for o in planner.outcomes)


def test_a_stop_raises_a_hazard_trigger_through_the_trigger_monitor(ros):
    _, sim, planner = graph(ros, enable=True, zones=["stop"])   # the stop zone alone: they drive on until it holds
    planner.at_each_other(planner.hostile)
    wait_for(lambda: any(o.failure == ExecutionOutcome.FAILURE_SAFETY_STOP for o in planner.outcomes), 60.0,
             "the stop's outcome")
    wait_for(lambda: any(t.kind == TriggerEvent.KIND_HAZARD for t in planner.triggers), what="a hazard trigger")
    hazard = next(t for t in planner.triggers if t.kind == TriggerEvent.KIND_HAZARD)
    assert hazard.agent_id in ROBOTS and "collision monitor: stop: closing on carter_" in hazard.detail
    assert world_distance(sim) > CONTACT_M
    # the stop is a fact of the world state the planner's state graph reads: the base stopped_by the other
    wait_for(lambda: (hazard.agent_id, next(r for r in ROBOTS if r != hazard.agent_id)) in planner.held(),
             what="the bridge's world state with the stop")


def test_without_the_monitor_the_same_plans_bring_the_bases_into_contact(ros):
    (_, monitor, _), sim, planner = graph(ros, enable=False)
    planner.at_each_other(planner.hostile)
    wait_for(lambda: world_distance(sim) < CONTACT_M, 60.0, "the bases in contact")
    assert not [s for s in planner.states if s.action != CollisionMonitorState.ACTION_NONE]
    wait_for(lambda: monitor.monitor.min_distance_m.get("carter_1", math.inf) < CONTACT_M,
             what="the monitor measured it")
