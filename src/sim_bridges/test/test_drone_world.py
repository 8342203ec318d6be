"""DroneWorld and its feed flown through AirSim's real client against brace-airsim-peer (ROS-free)."""

from __future__ import annotations

from functools import partial

import pytest

from brace_common.action_schema import Step
from brace_common.validation import InvalidInput
from brace_common.vocabulary import Activity, Block, EntryKind, Failure
from brace_common.world_state import Pose, Relation
from sim_bridges.airsim import drone_feed
from sim_bridges.airsim.airsim_link import AirSimLink, LinkDown, continue_for
from sim_bridges.airsim.airsim_peer import AirSimPeer
from sim_bridges.airsim.drone_world import DroneWorld, read_settings, world_state
from sim_bridges.airsim.intersection import IntersectionConfig, fly_to, routes, settings


@pytest.fixture
def fly():
    """fly(cfg) -> a started DroneWorld on a fresh peer (closed afterwards)."""
    opened = []

    def make(cfg: IntersectionConfig) -> DroneWorld:
        peer = AirSimPeer(settings(cfg), port=0).start()
        link = AirSimLink("127.0.0.1", peer.port, 5.0)
        opened.append((peer, link))
        link.connect()
        client = link.client()
        origins, _ = read_settings(client.getSettingsString())
        client.simPause(True)
        world = DroneWorld(cfg, client, origins, 1.0, partial(continue_for, client, limit_s=5.0), link.vector)
        world.start()
        world.peer = peer
        return world

    yield make
    for peer, link in opened:
        link.close()
        peer.stop()


def run_oracle(world: DroneWorld, skip_yield: bool = False) -> list:
    events = []
    while not world.finished:
        events += world.step()
        for name, d in world.drones.items():
            if d.current is None and not d.done:
                plan = world.oracle_plan(name)
                world.set_plan(name, [s for s in plan if not (skip_yield and s.action == "yield_to")])
    return events


def test_the_oracle_lands_every_drone_at_its_goal_without_a_near_miss(fly):
    world = fly(IntersectionConfig(num_agents=4, gust_probability=0.0))
    events = run_oracle(world)
    m = world.metrics()
    assert m.success and m.delivered == 4 and m.metric("collisions") == 0 and m.metric("near_misses") == 0
    assert m.metric("min_distance_m") > 4.0
    assert 0 < m.metric("path_efficiency") <= 1.0 and m.metric("coordination_wait") > 0  # the later drones yielded
    done = [e for e in events if e.kind == EntryKind.TASK_DONE]
    assert sorted(e.agent for e in done) == sorted(world.drones)
    cleared = [e for e in events if e.kind == EntryKind.MESSAGE and "cleared" in e.text]
    assert [e.to for e in cleared][:3] == ["drone_1", "drone_2", "drone_3"]  # each tells the next in the order
    for name, d in world.drones.items():
        assert abs(d.position[0] - routes(world.cfg)[name].goal[0]) < 2.0 and d.altitude < 0.5


def test_positions_are_world_frame_although_the_api_speaks_each_vehicles_local_frame(fly):
    world = fly(IntersectionConfig(num_agents=2, gust_probability=0.0))
    for name, d in world.drones.items():
        assert d.position[:2] == pytest.approx(routes(world.cfg)[name].start[:2], abs=1e-6)
    moves = [p for m, p in world.peer.received if m == "moveToPosition"]
    assert moves == []  # nothing moves before a plan
    world.step()
    world.set_plan("drone_0", [fly_to(world.cfg, routes(world.cfg)["drone_0"].goal)])
    assert world.drones["drone_0"].plan[0].action == "takeoff"  # still on the ground: it takes off first
    for _ in range(6):
        world.step()
    x, y, z = [p for m, p in world.peer.received if m == "moveToPosition"][-1][:3]
    gx, gy, _ = routes(world.cfg)["drone_0"].goal
    ox, oy, _ = routes(world.cfg)["drone_0"].start
    assert (x, y, z) == pytest.approx((gx - ox, gy - oy, -10.0))


def test_a_contact_is_one_collision_and_the_drones_drop_their_plans(fly):
    cfg = IntersectionConfig(num_agents=2, gust_probability=0.0)
    world = fly(cfg)
    for _ in range(4):
        world.step()
    meet = (-3.0, 3.0, -10.0)  # where the south and west lanes cross
    for name in world.drones:
        world.set_plan(name, [Step("move_to", {"x": meet[0], "y": meet[1], "z": meet[2], "speed": 5.0})])
    events = []
    for _ in range(20):
        events += world.step()
    failures = [e for e in events if e.failure == Failure.COLLISION]
    assert {e.agent for e in failures} == {"drone_0", "drone_1"}
    assert world.collisions == 1 and world.min_distance < 1.01 and not world.success
    assert all(d.current is None for d in world.drones.values())


def test_a_gust_pushes_drones_off_their_segment_and_is_announced(fly):
    cfg = IntersectionConfig(num_agents=1, gust_probability=1.0, gust_speed_mps=12.0, gust_steps=4)
    world = fly(cfg)
    for _ in range(4):
        world.step()
    world.set_plan("drone_0", [fly_to(cfg, routes(cfg)["drone_0"].goal)])
    events, errors = [], []
    for _ in range(8):
        events += world.step()
        errors.append(world.tracking_error("drone_0"))
    assert any(e.agent == "tower" and "gust" in e.text for e in events)
    assert max(errors) > 1.0
    assert any(m == "simSetWind" for m, _ in world.peer.received)


def test_the_feed_opens_with_protected_routes_and_order_and_grows_history(fly):
    world = fly(IntersectionConfig(num_agents=3, gust_probability=0.0))
    opening = drone_feed.episode_entries(world, 0)
    assert {e.block for e in opening} == {Block.TASK, Block.CONSTRAINTS, Block.COORDINATION}
    assert any("cross after drone_1" in e.text and e.block == Block.COORDINATION for e in opening)
    events = world.step()
    entries = drone_feed.step_entries(world, events, observe_every=1)
    states = [e for e in entries if e.block == Block.STATE]
    assert len(states) == 3 and all("before the intersection" in e.text or "ground" in e.text for e in states)
    assert sum(e.block == Block.HISTORY for e in entries) >= 3
    reports = drone_feed.agent_reports(world)
    d0 = world.drones["drone_0"]
    assert (reports[0].x, reports[0].y, reports[0].z) == pytest.approx((d0.position[1], d0.position[0],
                                                                        -d0.position[2]))  # ENU


@pytest.mark.parametrize("raw, reason", [
    ([("warp", "{}")], "unknown_skill"),
    ([("move_to", '{"x": 1, "y": 2, "z": -10}')], "missing_parameter"),
    ([("move_to", '{"x": true, "y": 2, "z": -10, "speed": 5}')], "bad_parameter"),
    ([("move_to", '{"x": 1, "y": 2, "z": -10, "speed": 0}')], "bad_parameter"),
    ([("move_to", '{"x": 1, "y": 2, "z": -10, "speed": 5, "yaw": 3}')], "bad_parameter"),
    ([("yield_to", '{"agent": "drone_7"}')], "bad_parameter"),
    ([("yield_to", '{"agent": "drone_1"}')], "bad_parameter"),   # drone_1's plan: it yields to other drones only
    ([("land", "[1]")], None),
    ([("hover", "{}")] * 65, "long_plan"),
])
def test_bad_plans_are_refused_naming_what_is_wrong(raw, reason):
    with pytest.raises(InvalidInput) as err:
        drone_feed.plan_from_steps(raw, IntersectionConfig(num_agents=2), "drone_1")
    if reason:
        assert err.value.reason == reason


def test_a_good_plan_parses_with_its_numbers():
    steps = drone_feed.plan_from_steps([("yield_to", '{"agent": "drone_0"}'),
                                        ("move_to", '{"x": -3.0, "y": 40, "z": -10.0, "speed": 5.0}'), ("land", "{}"),
                                        ("hover", "{}")], IntersectionConfig(num_agents=2))
    assert [s.action for s in steps] == ["yield_to", "move_to", "land", "hover"] and steps[1].parameters["y"] == 40


def test_a_dead_simulator_raises_link_down_within_the_timeout():
    link = AirSimLink("127.0.0.1", 1, 1.0)  # nothing listens on port 1
    with pytest.raises(LinkDown):
        link.connect()
    with pytest.raises(LinkDown):
        link.client().ping()
    link.close()


def test_settings_give_origins_and_clock_speed_or_say_what_is_wrong():
    origins, speed = read_settings('{"ClockSpeed": 2, "Vehicles": {"a": {"X": 1, "Y": 2, "Z": 0}}}')
    assert origins == {"a": (1.0, 2.0, 0.0)} and speed == 2.0
    for bad in ("not json", "{}", '{"Vehicles": {"a": {"X": "far"}}}', '{"Vehicles": {"a": {}}, "ClockSpeed": 0}'):
        with pytest.raises(ValueError):
            read_settings(bad)


def test_a_replan_during_the_landing_does_not_climb_back_and_a_landed_drone_stays_down(fly):
    cfg = IntersectionConfig(num_agents=1, gust_probability=0.0)
    world = fly(cfg)
    goal = routes(cfg)["drone_0"].goal
    world.set_plan("drone_0", [fly_to(cfg, goal), Step("land")])
    while world.drones["drone_0"].current is None or world.drones["drone_0"].current.action != "land":
        world.step()
    world.step()
    world.step()
    low = world.drones["drone_0"].altitude
    assert low < cfg.cruise_altitude_m - 1.0
    world.set_plan("drone_0", [fly_to(cfg, goal), Step("land")])  # the periodic replan while it lands
    world.step()
    assert world.drones["drone_0"].current.action == "land" and world.drones["drone_0"].altitude <= low
    while not world.drones["drone_0"].done:
        world.step()
    assert world.set_plan("drone_0", [fly_to(cfg, goal), Step("land")]) is False
    world.step()
    assert world.drones["drone_0"].altitude < 0.5 and world.success


def test_the_world_state_follows_the_crossing(fly):
    cfg = IntersectionConfig(num_agents=4, seed=0, gust_probability=0.0)
    world = fly(cfg)
    first = world_state(world, 2)
    assert (first.world, first.episode, first.step) == ("airsim", 2, 0)
    order = world.order()
    assert first.related("after") == [Relation(b, "after", a) for a, b in zip(order, order[1:], strict=False)]
    assert first.activity("drone_0").action == "takeoff"
    gx, gy, gz = routes(cfg)["drone_0"].goal
    assert first.entity("task_drone_0").pose == Pose(gy, gx, -gz)  # ENU, as agent_states
    seen, boxed, yielding = set(), set(), set()
    while not world.finished:
        world.step()
        state = world_state(world, 2)
        seen |= {e.state for e in state.entities if e.type == "drone"}
        boxed |= {r.subject for r in state.related("in")}
        yielding |= {r.subject for r in state.related("yields_to")}
        assert {(r.subject, r.object) for r in state.related("near")} == world.reported_pairs
        x, y, z = world.drones["drone_1"].position
        assert state.entity("drone_1").pose == Pose(y, x, -z)
        for name, d in world.drones.items():
            if d.current is None and not d.done:
                world.set_plan(name, world.oracle_plan(name))
    final = world_state(world, 2)
    assert {"flying", "arrived"} <= seen and boxed == set(world.drones) and yielding
    assert all(e.state == "done" for e in final.entities if e.type == "task")
    assert all(a.activity == Activity.IDLE for a in final.agents)
