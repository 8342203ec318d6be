"""The cmd_vel_monitor node over DDS: two bases (a unicycle stand-in publishing odometry and following cmd_vel, as
Isaac Sim's differential controller does) commanded straight at each other through the monitor, as a hostile
planner would; each zone's action, the stop's outcome, the state topic, the diagnostics, and the node's rules."""

from __future__ import annotations

import math
from functools import partial

import pytest
from brace_msgs.msg import CollisionMonitorState, ExecutionOutcome
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter

from brace_common import qos
from brace_common.names import DEFAULT_NAMESPACE as NS
from brace_common.testing import wait_for
from brace_common.vocabulary import Failure, ZoneAction
from brace_safety.cmd_vel_monitor_node import CollisionMonitorNode

ROBOTS = ("carter_1", "carter_2")
ORIGINS = [0.0, 0.0, 0.0, 4.0, 0.0, math.pi]   # 4 m apart, facing each other
MOTION_S = 60.0   # waits on the stand-in's motion: its timer runs slower on a busy machine
ZONES = {"hazard_distance_m": 1.0, "slowdown_distance_m": 2.0, "time_before_collision_s": 1.0,
         "footprint_radius_m": 0.3, "source_timeout_s": 0.5, "diagnostics_period_s": 0.1}


class Bases(Node):
    """Two bases: each follows its latest /<robot>/cmd_vel as a unicycle and publishes /<robot>/odom (pose from
    where it started) every `period_s`; a driver sends each a forward speed on /<robot>/cmd_vel_nav."""

    def __init__(self, period_s: float = 0.02) -> None:
        super().__init__("bases")
        self.period_s = period_s
        self.pose = {r: [0.0, 0.0, 0.0] for r in ROBOTS}
        self.cmd = {r: Twist() for r in ROBOTS}
        self.received = {r: [] for r in ROBOTS}
        self.speed = {r: 0.0 for r in ROBOTS}
        self.odom = {r: self.create_publisher(Odometry, f"/{r}/odom", qos.ROBOT_FEEDBACK) for r in ROBOTS}
        self.nav = {r: self.create_publisher(Twist, f"/{r}/cmd_vel_nav", qos.SIM_COMMANDS) for r in ROBOTS}
        for r in ROBOTS:
            self.create_subscription(Twist, f"/{r}/cmd_vel", partial(self.on_cmd, r), qos.SIM_COMMANDS)
        self.create_timer(period_s, self.tick)

    def on_cmd(self, robot: str, msg: Twist) -> None:
        self.cmd[robot] = msg
        self.received[robot].append(msg.linear.x)

    def tick(self) -> None:
        for r in ROBOTS:
            x, y, yaw = self.pose[r]
            v, w = self.cmd[r].linear.x, self.cmd[r].angular.z
            self.pose[r] = [x + v * math.cos(yaw) * self.period_s, y + v * math.sin(yaw) * self.period_s,
                            yaw + w * self.period_s]
            msg = Odometry()
            msg.pose.pose.position.x, msg.pose.pose.position.y = self.pose[r][0], self.pose[r][1]
            msg.pose.pose.orientation.z, msg.pose.pose.orientation.w = math.sin(yaw / 2), math.cos(yaw / 2)
            msg.twist.twist.linear.x, msg.twist.twist.angular.z = v, w
            self.odom[r].publish(msg)
            drive = Twist()
            drive.linear.x = self.speed[r]
            self.nav[r].publish(drive)

    def distance(self) -> float:
        """Centre distance in the world frame (carter_2 starts at (4, 0) facing -x: its odometry x runs toward -x)."""
        (x1, y1, _), (x2, y2, _) = self.pose["carter_1"], self.pose["carter_2"]
        return math.hypot(x1 - (4.0 - x2), y1 + y2)


class Listener(Node):
    """The stack's side: the monitor's states, outcomes and diagnostics."""

    def __init__(self) -> None:
        super().__init__("listener", namespace=NS)
        self.states: list[CollisionMonitorState] = []
        self.outcomes: list[ExecutionOutcome] = []
        self.diagnostics: list[dict[str, str]] = []
        self.create_subscription(CollisionMonitorState, "collision_monitor_state", self.states.append, qos.INPUTS)
        self.create_subscription(ExecutionOutcome, "outcomes", self.outcomes.append, qos.INPUTS)
        self.create_subscription(DiagnosticArray, "/diagnostics", lambda m: self.diagnostics.extend(
            {kv.key: kv.value for kv in s.values} for s in m.status if "collision monitor" in s.name), qos.DIAGNOSTICS)

    def actions(self, agent: str) -> list[ZoneAction]:
        return [ZoneAction(s.action) for s in self.states if s.agent_id == agent]


def monitor(**params) -> CollisionMonitorNode:
    values = {**ZONES, "agents": list(ROBOTS), "origins": ORIGINS, **params}
    node = CollisionMonitorNode(namespace=NS, parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])
    assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS, node.last_error
    assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
    return node


def test_two_bases_driven_at_each_other_stop_outside_the_stop_zone_and_back_away(ros):
    node = ros.add(monitor())
    bases, stack = ros.add(Bases()), ros.add(Listener())
    wait_for(lambda: all(bases.received[r] for r in ROBOTS), what="commands through the monitor")
    bases.speed = {r: 1.0 for r in ROBOTS}                 # the hostile planner: full speed at the other
    wait_for(lambda: all(ZoneAction.APPROACH in stack.actions(r) for r in ROBOTS), MOTION_S, "both approaching")
    wait_for(lambda: all(bases.received[r][-1] < 0.01 for r in ROBOTS) and len(stack.diagnostics) > 3,
             MOTION_S, "both brought to rest")
    assert bases.distance() >= ZONES["hazard_distance_m"] - 0.05   # a control period of lag at most
    assert all(0.99 <= bases.received[r][0] or bases.received[r][0] == 0.0 for r in ROBOTS)
    bases.speed = {r: -0.5 for r in ROBOTS}                # backing away passes unchanged
    wait_for(lambda: all(bases.received[r][-1] == -0.5 for r in ROBOTS), MOTION_S, "backing away let through")
    wait_for(lambda: all(stack.actions(r)[-1] is ZoneAction.NONE for r in ROBOTS), MOTION_S, "the state back to none")
    wait_for(lambda: bases.distance() > 2.5, MOTION_S, "the bases apart")
    diagnostics = stack.diagnostics[-1]
    for r in ROBOTS:
        assert int(diagnostics[f"approaches.{r}"]) >= 1
    assert float(diagnostics["min_distance_m"]) >= ZONES["hazard_distance_m"] - 0.05
    node.trigger_deactivate()


def test_a_stop_is_an_outcome_for_the_trigger_monitor_and_a_state(ros):
    ros.add(monitor(zones=["stop"]))   # no approach or slowdown: the stop zone alone acts
    bases, stack = ros.add(Bases()), ros.add(Listener())
    wait_for(lambda: all(bases.received[r] for r in ROBOTS), what="commands through the monitor")
    bases.speed = {"carter_1": 1.0, "carter_2": 0.0}
    wait_for(lambda: stack.outcomes, MOTION_S, "the stop's outcome")   # 3 m of the stand-in's time: slower when busy
    outcome = stack.outcomes[0]
    assert (outcome.agent_id, outcome.success, outcome.failure) == ("carter_1", False, Failure.SAFETY_STOP)
    assert "closing on carter_2" in outcome.detail
    wait_for(lambda: bases.received["carter_1"][-1] == 0.0, MOTION_S, "carter_1 stopped")
    stop = next(s for s in stack.states if s.action == ZoneAction.STOP)
    assert (stop.agent_id, stop.obstacle, stop.speed_ratio) == ("carter_1", "carter_2", 0.0)
    assert 0.9 <= stop.distance_m <= 1.0   # just inside the zone (float32)
    wait_for(lambda: len(stack.diagnostics) > 2 and stack.diagnostics[-1]["stops.carter_1"] == "1",
             what="one stop counted")
    assert len(stack.outcomes) == 1   # held in the zone: one stop, one outcome


def test_a_robot_without_fresh_odometry_is_stopped(ros):
    ros.add(monitor())
    bases, stack = ros.add(Bases()), ros.add(Listener())
    bases.speed = {r: 0.3 for r in ROBOTS}
    wait_for(lambda: all(bases.received[r] and bases.received[r][-1] == 0.3 for r in ROBOTS), MOTION_S, "moving")
    bases.odom["carter_2"] = bases.create_publisher(Odometry, "/unheard/odom", qos.ROBOT_FEEDBACK)  # its source falls silent
    wait_for(lambda: bases.received["carter_2"][-1] == 0.0, MOTION_S, "carter_2 held without odometry")
    assert bases.received["carter_1"][-1] > 0.0
    # its state is another subscriber's message than the held command: wait for it, do not race it
    wait_for(lambda: any(s.agent_id == "carter_2" and "cannot check its motion" in s.detail for s in stack.states),
             what="carter_2's state: held, its pose stale")


def test_disabled_it_passes_every_command_and_still_reports(ros):
    ros.add(monitor(enable=False, source_timeout_s=0.5))
    bases, stack = ros.add(Bases()), ros.add(Listener())
    bases.speed = {r: 1.0 for r in ROBOTS}
    wait_for(lambda: bases.distance() < 0.8, MOTION_S, "the bases closer than the stop zone")
    assert all(v in (0.0, 1.0) for r in ROBOTS for v in bases.received[r])
    wait_for(lambda: stack.diagnostics and float(stack.diagnostics[-1]["min_distance_m"]) < 0.8,
             what="the closest distance reported")
    assert not stack.outcomes


@pytest.mark.parametrize("params, parameter", [
    ({"origins": [0.0, 0.0]}, "origins"),
    ({"cmd_vel_out_topic": "cmd_vel_nav"}, "cmd_vel_out_topic"),
    ({"zones": ["stop", "swerve"]}, "zones"),
    ({"agents": ["carter_1", "carter_1"]}, "agents"),
])
def test_a_bad_parameter_stops_configure_naming_it(ros, params, parameter):
    values = {**ZONES, "agents": list(ROBOTS), "origins": ORIGINS, **params}
    node = ros.add(CollisionMonitorNode(namespace=NS,
                                        parameter_overrides=[Parameter(k, value=v) for k, v in values.items()]))
    assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
    assert f"'{parameter}'" in node.last_error
