"""The airsim_monitor node over DDS, between a client and brace-airsim-peer: a drone sent at another through the proxy
is slowed, then stopped outside the stop zone, each a CollisionMonitorState and the stop an ExecutionOutcome; a
drone brought inside the stop zone by a command the proxy never saw (as wind would) is restored out, a state too;
of two drones whose courses cross, the one without the right of way yields, and both arrive."""

from __future__ import annotations

import math
from typing import Optional

import pytest
from brace_msgs.msg import CollisionMonitorState, ExecutionOutcome
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter

from brace_common import qos
from brace_common.local_http import free_port
from brace_common.msgpack_rpc import MsgpackRpcClient
from brace_common.names import DEFAULT_NAMESPACE as NS
from brace_common.testing import wait_for
from brace_common.vocabulary import Failure
from brace_safety.airsim_monitor_node import AirSimMonitorNode
from sim_bridges.airsim.airsim_peer import AirSimPeer

ZONES = {"hazard_distance_m": 5.0, "slowdown_distance_m": 9.0, "slowdown_ratio": 0.5, "footprint_radius_m": 0.5,
         "control_period_s": 0.1, "braking_deceleration_mps2": 3.0, "reaction_time_s": 0.4, "restore_speed_mps": 3.0,
         "diagnostics_period_s": 0.2}
ORIGINS = {"drone_0": 0.0, "drone_1": 20.0}   # north (m) of the settings' origin, side by side at the same height
CROSSING = {"drone_0": (0.0, 0.0), "drone_1": (10.0, -10.0)}   # (north, east): 10 m each from where courses cross
WAIT_S = 60.0   # waits on the peer's simulated motion: a busy machine runs it slower


class Listener(Node):
    """The stack's side: the monitor's states and outcomes."""

    def __init__(self) -> None:
        super().__init__("listener", namespace=NS)
        self.states: list[CollisionMonitorState] = []
        self.outcomes: list[ExecutionOutcome] = []
        self.create_subscription(CollisionMonitorState, "collision_monitor_state", self.states.append, qos.INPUTS)
        self.create_subscription(ExecutionOutcome, "outcomes", self.outcomes.append, qos.INPUTS)

    def seen(self, action: int, agent: str = "drone_1", obstacle: str = "drone_0") -> bool:
        return any(s.action == action and s.agent_id == agent and s.obstacle == obstacle for s in self.states)


@pytest.fixture
def drones(ros):
    """drones(zones, origins) -> (through the monitor, straight to the peer, listener, distance()): two drones (20 m
    apart unless `origins` says where, north and east), taken off through the monitor node."""
    opened = []

    def make(zones: list[str], origins: Optional[dict[str, tuple[float, float]]] = None):
        origins = origins or {n: (x, 0.0) for n, x in ORIGINS.items()}
        peer = AirSimPeer({"SettingsVersion": 2.0, "SimMode": "Multirotor", "ClockSpeed": 2.0,
                           "Vehicles": {n: {"VehicleType": "SimpleFlight", "X": x, "Y": y, "Z": 0.0}
                                        for n, (x, y) in origins.items()}}, port=0).start()
        opened.append(peer)
        port = free_port()
        params = {**ZONES, "zones": zones, "port": port, "airsim_port": peer.port, "autostart": False}
        node = ros.add(AirSimMonitorNode(namespace=NS, parameter_overrides=[Parameter(k, value=v)
                                                                            for k, v in params.items()]))
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS, node.last_error
        assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS, node.last_error
        opened.append(node)
        wait_for(lambda: node.guard.connected, 10.0, "the monitor connected to the peer")
        listener = ros.add(Listener())
        through, direct = (MsgpackRpcClient("127.0.0.1", p, 10.0) for p in (port, peer.port))
        opened.extend((through, direct))
        for name in origins:
            through.call_sync("enableApiControl", True, name)
            through.call_sync("armDisarm", True, name)
            through.call_sync("takeoff", 20.0, name, timeout_s=30.0)

        def where(name: str) -> tuple[float, float, float]:
            s = direct.call_sync("getMultirotorState", name)["kinematics_estimated"]["position"]
            return origins[name][0] + s["x_val"], origins[name][1] + s["y_val"], s["z_val"]

        def distance() -> float:
            return math.dist(*(where(n) for n in origins))

        listener.where = where
        return through, direct, listener, distance

    yield make
    for thing in reversed(opened):
        if isinstance(thing, MsgpackRpcClient):
            thing.close()
        elif isinstance(thing, AirSimMonitorNode):
            thing.trigger_deactivate()
        else:
            thing.stop()


def test_a_drone_sent_at_another_is_slowed_then_stopped_outside_the_stop_zone_as_states_and_an_outcome(drones):
    through, _, listener, distance = drones(["stop", "slowdown"])
    # drone_1 to where drone_0 hovers (its NED frame starts 20 m north of drone_0's), at 4 m/s
    through.call("moveToPosition", -20.0, 0.0, -3.0, 4.0, 60.0, 0, {"is_rate": False, "yaw_or_rate": 0.0}, -1, 0,
                 "drone_1")
    wait_for(lambda: listener.seen(CollisionMonitorState.ACTION_SLOWDOWN), WAIT_S, "the slowdown's state")
    wait_for(lambda: listener.seen(CollisionMonitorState.ACTION_STOP), WAIT_S, "the stop's state")
    slowdown = next(s for s in listener.states if s.action == CollisionMonitorState.ACTION_SLOWDOWN)
    assert slowdown.speed_ratio == pytest.approx(0.5) and ZONES["hazard_distance_m"] < slowdown.distance_m
    wait_for(lambda: any(o.failure == Failure.SAFETY_STOP and o.agent_id == "drone_1" for o in listener.outcomes),
             what="the stop's outcome")
    stop = next(o for o in listener.outcomes if o.failure == Failure.SAFETY_STOP)
    assert not stop.success and "closing on drone_0" in stop.detail
    assert distance() >= ZONES["hazard_distance_m"] - 0.3   # held outside the stop zone (one check of lag at most)


def test_a_drone_brought_into_the_stop_zone_is_restored_out_as_a_state(drones):
    _, direct, listener, distance = drones(["stop", "slowdown", "approach", "restore"])
    # straight to the peer, as a gust would: to 3 m north of drone_0
    direct.call("moveToPosition", -17.0, 0.0, -3.0, 2.0, 60.0, 0, {"is_rate": False, "yaw_or_rate": 0.0}, -1, 0,
                "drone_1")
    wait_for(lambda: listener.seen(CollisionMonitorState.ACTION_RESTORE), WAIT_S, "the restore's state")
    restore = next(s for s in listener.states if s.action == CollisionMonitorState.ACTION_RESTORE
                   and s.agent_id == "drone_1")
    # inside the stop zone grown by the closing speed (reaction_time_s, braking), flown out at restore_speed_mps
    assert restore.distance_m < ZONES["slowdown_distance_m"] and "commanded out at 3 m/s" in restore.detail
    wait_for(lambda: [s.action for s in listener.states if s.agent_id == "drone_1"][-1]
             == CollisionMonitorState.ACTION_NONE, WAIT_S, "the restore's end")
    assert distance() >= ZONES["hazard_distance_m"] - 0.3
    assert not any(o.failure == Failure.SAFETY_STOP for o in listener.outcomes)   # a restore is not a stop


def test_of_two_drones_whose_courses_cross_the_one_without_the_right_of_way_yields_and_both_arrive(drones):
    through, _, listener, distance = drones(["stop", "slowdown", "approach", "restore", "yield"], CROSSING)
    closest = [math.inf]
    # drone_0 north and drone_1 east at 4 m/s, each 10 m from where their courses cross (their own NED frames)
    for name, (north, east) in (("drone_0", (20.0, 0.0)), ("drone_1", (0.0, 20.0))):
        through.call("moveToPosition", north, east, -3.0, 4.0, 60.0, 0, {"is_rate": False, "yaw_or_rate": 0.0}, -1, 0,
                     name)

    def arrived() -> bool:
        closest[0] = min(closest[0], distance())
        return all(math.dist(listener.where(n)[:2], goal) < 1.0
                   for n, goal in (("drone_0", (20.0, 0.0)), ("drone_1", (10.0, 10.0))))

    wait_for(arrived, WAIT_S, "both drones at their targets")
    assert listener.seen(CollisionMonitorState.ACTION_YIELD, "drone_1", "drone_0")   # drone_0 has the right of way
    assert not listener.seen(CollisionMonitorState.ACTION_YIELD, "drone_0", "drone_1")
    assert closest[0] >= ZONES["hazard_distance_m"] - 0.3
    assert not any(o.failure == Failure.SAFETY_STOP for o in listener.outcomes)   # a yield is not a hazard
