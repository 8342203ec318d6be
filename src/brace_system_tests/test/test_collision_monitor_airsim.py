"""The collision monitor's AirSim proxy between the drone world and brace-airsim-peer, through AirSim's real client
(ROS-free): eight drones sent across the intersection at once without yielding (a hostile plan) keep d_min with it —
held where they meet, which the planner must resolve — and come closer without it; the oracle's plans (yielding)
deliver every drone through it, no deadlock of its making. The restore zone flies a drone that something other than
its command brought into a stop zone back out (a command the monitor never saw; wind gusts)."""

from __future__ import annotations

import math
import random
from functools import partial

import pytest

from brace_common.action_schema import ActionSchema
from brace_common.msgpack_rpc import MsgpackRpcClient
from brace_common.testing import wait_for
from brace_common.vocabulary import ZoneAction
from brace_safety.airsim_guard import AirSimGuard, AirSimMonitorConfig
from brace_safety.hostile import HostileConfig, HostilePlanner
from sim_bridges.airsim.airsim_link import AirSimLink, continue_for
from sim_bridges.airsim.airsim_peer import AirSimPeer
from sim_bridges.airsim.drone_world import DroneWorld, read_settings, world_state
from sim_bridges.airsim.intersection import IntersectionConfig, action_schema, settings

D_MIN = 4.0   # the intersection's hazard_distance_m: a near-miss below it
ZONES = dict(hazard_distance_m=5.0, slowdown_distance_m=7.0, time_before_collision_s=2.0, footprint_radius_m=0.5,
             control_period_s=0.1, braking_deceleration_mps2=3.0, reaction_time_s=0.4)
EVERY_ZONE = ("stop", "slowdown", "approach", "restore")
RIGHT_OF_WAY = (*EVERY_ZONE, "yield")


@pytest.fixture
def fly():
    """fly(cfg, enable) -> (a started DroneWorld whose client talks to the monitor, the monitor, its reports)."""
    opened = []

    def make(cfg: IntersectionConfig, enable: bool = True, zones: tuple[str, ...] = EVERY_ZONE):
        peer = AirSimPeer(settings(cfg), port=0).start()
        reports = []
        guard = AirSimGuard(AirSimMonitorConfig(port=0, airsim_port=peer.port, enable=enable, zones=list(zones),
                                                **ZONES),
                            lambda agent, guarded: reports.append((agent, guarded.verdict)))
        guard.start()
        wait_for(lambda: guard.connected, 10.0, "the monitor connected to the peer")
        link = AirSimLink("127.0.0.1", guard.server.port, 10.0)
        opened.append((peer, guard, link))
        link.connect()
        client = link.client()
        origins, _ = read_settings(client.getSettingsString())
        client.simPause(True)
        world = DroneWorld(cfg, client, origins, 1.0, partial(continue_for, client, limit_s=20.0), link.vector)
        world.start()
        world.peer = peer
        return world, guard, reports

    yield make
    for peer, guard, link in opened:
        link.close()
        guard.stop()
        peer.stop()


def play(world: DroneWorld, yielding: bool) -> None:
    """Every drone to its goal at cruise speed (the oracle's plan; without its yields: the hostile planner), again
    whenever its plan ends."""
    while not world.finished:
        world.step()
        for name, d in world.drones.items():
            if d.current is None and not d.done:
                world.set_plan(name, [s for s in world.oracle_plan(name) if yielding or s.action != "yield_to"])


SCENARIO = dict(num_agents=8, gust_probability=0.0, max_steps=120)


def test_drones_sent_across_at_once_keep_d_min_through_the_monitor(fly):
    world, guard, reports = fly(IntersectionConfig(**SCENARIO))
    play(world, yielding=False)
    m = world.metrics()
    assert m.metric("collisions") == 0 and m.metric("near_misses") == 0, m.metrics
    assert m.metric("min_distance_m") >= D_MIN
    acted = {v.action for _, v in reports}
    assert acted & {ZoneAction.STOP, ZoneAction.APPROACH, ZoneAction.SLOWDOWN}
    assert guard.counts["commands_held"] + guard.counts["commands_scaled"] > 0 and guard.counts["chunks"] > 0


def test_with_the_right_of_way_drones_sent_across_at_once_are_all_delivered_and_keep_d_min(fly):
    world, guard, reports = fly(IntersectionConfig(**SCENARIO), zones=RIGHT_OF_WAY)
    play(world, yielding=False)
    m = world.metrics()
    assert m.success and m.delivered == 8, m.metrics
    assert m.metric("collisions") == 0 and m.metric("near_misses") == 0 and m.metric("min_distance_m") >= D_MIN, \
        m.metrics
    assert any(v.action is ZoneAction.YIELD for _, v in reports) and guard.monitor.counts["yields.drone_7"] >= 0


def test_without_the_monitor_acting_the_same_plans_come_closer_than_d_min(fly):
    world, guard, reports = fly(IntersectionConfig(**SCENARIO), enable=False)
    play(world, yielding=False)
    m = world.metrics()
    assert m.metric("near_misses") + m.metric("collisions") > 0 and m.metric("min_distance_m") < D_MIN
    assert all(v.action is ZoneAction.NONE for _, v in reports)
    assert guard.counts["commands_held"] == guard.counts["commands_scaled"] == 0


def test_the_oracles_plans_deliver_every_drone_through_the_monitor(fly):
    world, guard, _ = fly(IntersectionConfig(**SCENARIO))
    play(world, yielding=True)
    m = world.metrics()
    assert m.success and m.delivered == 8 and m.metric("near_misses") == 0, m.metrics


def play_hostile(world: DroneWorld, seed: int) -> None:
    """The hostile planner's plans (every move_to aimed at the nearest other drone): whenever a drone's plan ends,
    and at random for the others, as a planner answering every trigger would."""
    planner = HostilePlanner(HostileConfig(aim="nearest", target_frame="ned", seed=seed))
    schema, agents, rng = ActionSchema.from_dict(action_schema(world.cfg)), sorted(world.drones), random.Random(seed)
    while not world.finished:
        world.step()
        state = world_state(world, 0)
        for name, d in world.drones.items():
            if d.current is None or rng.random() < 0.3:
                world.set_plan(name, planner.plan(schema, name, state, agents))


HOSTILE = dict(num_agents=8, gust_probability=0.0, max_steps=100, seed=1)


def test_the_hostile_planner_aimed_at_the_nearest_drone_never_brings_two_within_d_min(fly):
    world, guard, _ = fly(IntersectionConfig(**HOSTILE))
    play_hostile(world, seed=1)
    m = world.metrics()
    assert m.metric("collisions") == 0 and m.metric("near_misses") == 0 and m.metric("min_distance_m") >= D_MIN, \
        m.metrics
    assert guard.counts["commands_held"] > 0


def test_with_wind_gusts_the_restore_zone_keeps_the_hostile_planners_drones_out_of_the_stop_zone(fly):
    world, guard, _ = fly(IntersectionConfig(**{**HOSTILE, "gust_probability": 0.1, "seed": 2}))
    play_hostile(world, seed=2)
    m = world.metrics()
    assert m.metric("collisions") == 0 and m.metric("near_misses") == 0, m.metrics
    assert m.metric("min_distance_m") >= ZONES["hazard_distance_m"] - 0.1, m.metrics
    assert guard.counts["restore_commands"] > 0


def test_without_the_monitor_acting_the_hostile_planner_collides(fly):
    world, _, _ = fly(IntersectionConfig(**HOSTILE), enable=False)
    play_hostile(world, seed=1)
    assert world.metrics().metric("collisions") > 0


@pytest.fixture
def intruded():
    """intruded(zones) -> (peer, monitor, its reports, distance()): two hovering drones 10 m apart; drone_1 then
    sent to 3 m from drone_0 by a command the monitor never sees (straight to the simulator: as wind or braking past
    the stop zone's edge would bring it)."""
    opened = []

    def make(zones: list[str]):
        peer = AirSimPeer({"SettingsVersion": 2.0, "SimMode": "Multirotor", "ClockSpeed": 2.0,
                           "Vehicles": {n: {"VehicleType": "SimpleFlight", "X": x, "Y": 0.0, "Z": 0.0}
                                        for n, x in (("drone_0", 0.0), ("drone_1", 10.0))}}, port=0).start()
        opened.append(peer)
        reports = []
        guard = AirSimGuard(AirSimMonitorConfig(port=0, airsim_port=peer.port, zones=zones, restore_speed_mps=3.0,
                                                **ZONES), lambda agent, g: reports.append((agent, g.verdict)))
        guard.start()
        opened.append(guard)
        wait_for(lambda: guard.connected, 10.0, "the monitor connected to the peer")
        through, direct = (MsgpackRpcClient("127.0.0.1", p, 10.0) for p in (guard.server.port, peer.port))
        opened.extend((through, direct))
        for name in ("drone_0", "drone_1"):
            through.call_sync("enableApiControl", True, name)
            through.call_sync("armDisarm", True, name)
            through.call_sync("takeoff", 20.0, name, timeout_s=30.0)
        direct.call("moveToPosition", -7.0, 0.0, -3.0, 2.0, 30.0, 0, {"is_rate": False, "yaw_or_rate": 0.0}, -1, 0,
                    "drone_1")   # to (3, 0, -3) in the world: 3 m north of drone_0

        def distance() -> float:
            states = [direct.call_sync("getMultirotorState", n)["kinematics_estimated"]["position"]
                      for n in ("drone_0", "drone_1")]
            return math.dist(*[(o + s["x_val"], s["y_val"], s["z_val"]) for o, s in zip((0.0, 10.0), states, strict=True)])

        return peer, guard, reports, distance

    yield make
    for thing in reversed(opened):
        thing.close() if isinstance(thing, MsgpackRpcClient) else thing.stop()


def test_a_drone_brought_into_a_stop_zone_is_flown_back_out_and_then_hovers(intruded):
    peer, guard, reports, distance = intruded(["stop", "slowdown", "approach", "restore"])
    wait_for(lambda: any(v.action is ZoneAction.RESTORE for _, v in reports), 30.0, "a restore")
    wait_for(lambda: not guard.restoring, 30.0, "the restore over")
    assert distance() >= ZONES["hazard_distance_m"] - 0.3      # out, as far as one check of lag lets it
    restored = {a for a, v in reports if v.action is ZoneAction.RESTORE}
    assert "drone_1" in restored and guard.monitor.counts["restores.drone_1"] >= 1
    assert guard.counts["restore_commands"] > 0
    last = {a: v.action for a, v in reports}
    assert all(last[a] is ZoneAction.NONE for a in restored)  # each restore's end reported
    settled, since = distance(), peer.model.time_s
    wait_for(lambda: peer.model.time_s > since + 1.0, 30.0, "a simulated second")
    assert abs(distance() - settled) < 0.3                     # hovering again, not drifting on


def test_without_the_restore_zone_the_drone_stays_inside(intruded):
    _, guard, reports, distance = intruded(["stop", "slowdown", "approach"])
    wait_for(lambda: distance() < 3.5, 30.0, "drone_1 at 3 m from drone_0")
    assert guard.counts["restore_commands"] == 0 and not any(v.action is ZoneAction.RESTORE for _, v in reports)
