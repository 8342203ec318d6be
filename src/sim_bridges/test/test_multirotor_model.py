"""Kinematics of the point-mass multirotor model (no ROS), and collision reporting through the AirSim peer."""

import math

import pytest

from brace_common.config import ConfigError
from sim_bridges.airsim.multirotor_model import Completion, Mode, MultirotorConfig, MultirotorModel, Vec3

CFG = MultirotorConfig()


def run_until_done(model: MultirotorModel, limit_s: float) -> tuple[list[Completion], float]:
    """Step until a command ends (or `limit_s` passes); the completions and the simulated time it took."""
    start = model.time_s
    while model.time_s - start < limit_s:
        model.step()
        done = model.take_completions()
        if done:
            return done, model.time_s - start
    return [], model.time_s - start


@pytest.fixture
def hovering() -> MultirotorModel:
    """One vehicle at the world origin, taken off and hovering at 3 m."""
    model = MultirotorModel({"a": (0.0, 0.0, 0.0)})
    model.takeoff("a")
    done, _ = run_until_done(model, 10.0)
    assert done and done[0].success
    model.advance(1.0)
    return model


def cross_track(position: Vec3) -> float:
    """Distance from the x axis at height 3 m (the segments the tests fly)."""
    return math.hypot(position.y, position.z + 3.0)


def test_a_new_vehicle_is_landed_at_its_spawn_point():
    model = MultirotorModel({"a": (1.0, 2.0, 0.0)})
    model.advance(1.0)
    state = model.state("a")
    assert state.landed and state.mode is Mode.LANDED
    assert state.position == Vec3() and state.world_position == Vec3(1.0, 2.0, 0.0)


def test_takeoff_climbs_to_the_takeoff_height_and_hovers():
    model = MultirotorModel({"a": (0.0, 0.0, 0.0)})
    command = model.takeoff("a")
    done, took = run_until_done(model, 20.0)
    assert done == [Completion("a", command, True, "done")]
    climb = CFG.takeoff_height / CFG.takeoff_speed
    assert climb <= took <= climb + CFG.takeoff_speed / CFG.path_accel + 1.0
    model.advance(2.0)
    state = model.state("a")
    assert state.mode is Mode.HOVERING and not state.landed
    assert state.position.z == pytest.approx(-CFG.takeoff_height, abs=0.05)
    assert abs(state.position.x) < 1e-9 and abs(state.position.y) < 1e-9


@pytest.mark.parametrize(("distance", "speed"), [(10.0, 5.0), (20.0, 2.0), (3.0, 1.0)])
def test_move_reaches_the_target_in_the_expected_time_at_the_commanded_speed(hovering, distance, speed):
    command = hovering.move_to("a", (distance, 0.0, -3.0), speed)
    start, top_speed, off_track = hovering.time_s, 0.0, 0.0
    done: list[Completion] = []
    while not done and hovering.time_s - start < 60.0:
        hovering.step()
        state = hovering.state("a")
        top_speed = max(top_speed, state.velocity.norm())
        off_track = max(off_track, cross_track(state.position))
        done = hovering.take_completions()
    took = hovering.time_s - start
    assert done == [Completion("a", command, True, "done")]
    # A trapezoidal profile: distance / speed plus the time lost speeding up and braking.
    assert distance / speed <= took <= distance / speed + speed / CFG.path_accel + 0.5
    assert speed * 0.97 <= top_speed <= speed * 1.05
    assert off_track < 0.01
    assert (hovering.state("a").position - Vec3(distance, 0.0, -3.0)).norm() <= CFG.arrival_tolerance
    hovering.advance(3.0)
    assert (hovering.state("a").position - Vec3(distance, 0.0, -3.0)).norm() < 0.02


def test_a_gust_pushes_the_vehicle_off_its_segment_and_it_recovers(hovering):
    command = hovering.move_to("a", (40.0, 0.0, -3.0), 2.0)
    hovering.advance(3.0)
    assert cross_track(hovering.state("a").position) < 0.01
    hovering.set_wind((0.0, 10.0, 0.0))  # 10 m/s from the west
    worst = 0.0
    for _ in range(300):
        hovering.step()
        worst = max(worst, cross_track(hovering.state("a").position))
    assert worst > 2.0
    assert hovering.state("a").position.y > 2.0  # pushed downwind
    hovering.set_wind((0.0, 0.0, 0.0))
    done, _ = run_until_done(hovering, 60.0)
    assert done == [Completion("a", command, True, "done")]
    assert (hovering.state("a").position - Vec3(40.0, 0.0, -3.0)).norm() <= CFG.arrival_tolerance


def test_a_light_wind_is_cancelled(hovering):
    hovering.set_wind((2.0, 2.0, 0.0))  # 0.5 * 2.8 m/s is within the controller's authority
    worst = 0.0
    for _ in range(1000):
        hovering.step()
        worst = max(worst, (hovering.state("a").position - Vec3(0.0, 0.0, -3.0)).norm())
    assert worst < 1.0
    assert (hovering.state("a").position - Vec3(0.0, 0.0, -3.0)).norm() < 0.05


def test_velocity_command_runs_for_its_duration_then_hovers(hovering):
    command = hovering.move_velocity("a", (2.0, 0.0, 0.0), 3.0)
    done, took = run_until_done(hovering, 10.0)
    assert done == [Completion("a", command, True, "done")]
    assert took == pytest.approx(3.0, abs=CFG.dt * 1.5)
    assert 6.0 - 2.0 * CFG.velocity_tau - 0.1 < hovering.state("a").position.x < 6.0
    assert hovering.state("a").mode is Mode.HOVERING
    hovering.advance(5.0)
    assert hovering.state("a").velocity.norm() < 0.01


def test_velocity_command_with_height_hold_climbs_to_the_height(hovering):
    hovering.move_velocity("a", (0.0, 1.0, 0.0), 4.0, z=-6.0)
    hovering.advance(4.0)
    assert hovering.state("a").position.z == pytest.approx(-6.0, abs=0.1)
    assert hovering.state("a").position.y == pytest.approx(4.0 - CFG.velocity_tau, abs=0.2)


def test_move_z_keeps_x_and_y(hovering):
    command = hovering.move_z("a", -8.0, 2.0)
    done, _ = run_until_done(hovering, 10.0)
    assert done == [Completion("a", command, True, "done")]
    assert hovering.state("a").position.z == pytest.approx(-8.0, abs=CFG.arrival_tolerance)
    assert abs(hovering.state("a").position.x) < 1e-6


def test_land_descends_to_the_spawn_height_and_stands_landed(hovering):
    hovering.move_to("a", (4.0, 0.0, -3.0), 2.0)
    run_until_done(hovering, 10.0)
    command = hovering.land("a")
    done, took = run_until_done(hovering, 20.0)
    assert done == [Completion("a", command, True, "done")]
    assert took >= 3.0 / CFG.land_speed
    state = hovering.state("a")
    assert state.landed and state.position.z == 0.0 and state.velocity == Vec3()
    assert state.position.x == pytest.approx(4.0, abs=CFG.arrival_tolerance)
    assert hovering.land("a") and hovering.take_completions()[0].success  # landing when landed: done at once


def test_a_newer_command_preempts_and_a_timeout_fails(hovering):
    first = hovering.move_to("a", (30.0, 0.0, -3.0), 2.0)
    hovering.advance(1.0)
    second = hovering.move_to("a", (0.0, 30.0, -3.0), 2.0, timeout=2.0)
    assert hovering.take_completions() == [Completion("a", first, False, "preempted")]
    hovering.advance(2.0)
    assert hovering.take_completions() == [Completion("a", second, False, "timeout")]
    assert hovering.state("a").mode is Mode.HOVERING
    third = hovering.move_to("a", (5.0, 5.0, -3.0), 2.0)
    hovering.hover("a")
    assert hovering.take_completions() == [Completion("a", third, False, "preempted")]


def test_reset_puts_every_vehicle_back_and_fails_pending_commands():
    model = MultirotorModel({"a": (0.0, 0.0, 0.0), "b": (5.0, 0.0, 0.0)})
    model.takeoff("a")
    model.takeoff("b")
    model.advance(5.0)
    model.take_completions()
    pending = model.move_to("a", (20.0, 0.0, -3.0), 3.0)
    model.set_wind((0.0, 3.0, 0.0))
    model.advance(1.0)
    model.reset()
    assert model.take_completions() == [Completion("a", pending, False, "reset")]
    assert model.wind == Vec3()
    for name in ("a", "b"):
        assert model.state(name).landed and model.state(name).position == Vec3()
        assert model.state(name).velocity == Vec3() and model.collision(name) is None


def test_the_ground_stops_a_vehicle_commanded_below_it(hovering):
    hovering.move_to("a", (0.0, 0.0, 2.0), 2.0, timeout=5.0)
    lowest = -math.inf
    for _ in range(600):
        hovering.step()
        lowest = max(lowest, hovering.state("a").position.z)
    assert lowest == 0.0
    assert [c.reason for c in hovering.take_completions()] == ["timeout"]


def test_the_ground_is_the_world_ground_for_a_vehicle_spawned_high():
    model = MultirotorModel({"a": (0.0, 0.0, -10.0)})  # spawned 10 m up: the ground is at local z = 10
    model.move_velocity("a", (0.0, 0.0, 3.0), 10.0)
    model.advance(10.0)
    assert model.state("a").position.z == pytest.approx(10.0)
    assert model.state("a").world_position.z == pytest.approx(0.0)


def test_collision_is_recorded_on_both_vehicles_and_parts_them():
    model = MultirotorModel({"a": (0.0, 0.0, 0.0), "b": (0.0, 3.0, 0.0)})
    model.takeoff("a")
    model.takeoff("b")
    model.advance(5.0)
    model.move_to("a", (0.0, 3.0, -3.0), 1.0)  # b's place (same world point: both origins differ by 3 m east)
    steps = 0
    while model.collision("a") is None and steps < 1000:
        model.step()
        steps += 1
    a, b = model.collision("a"), model.collision("b")
    assert a is not None and b is not None
    assert (a.object_name, b.object_name) == ("b", "a")
    assert a.time_stamp == b.time_stamp == model.time_ns
    assert a.normal.y == pytest.approx(-1.0, abs=1e-6) and b.normal.y == pytest.approx(1.0, abs=1e-6)
    assert 0.0 < a.penetration_depth == b.penetration_depth < 0.1
    sa, sb = model.state("a"), model.state("b")
    assert (sa.world_position - sb.world_position).norm() == pytest.approx(2 * CFG.radius)
    assert sa.velocity == sb.velocity == Vec3()
    assert a.position == sa.position and b.position == sb.position  # each in its own local frame
    assert a.impact_point.y == pytest.approx(sa.position.y + CFG.radius)
    assert model.take_collision("a") == a and model.take_collision("a") is None
    assert model.collision("b") == b  # reading a's does not clear b's
    assert model.collision_count("a") >= 1


def test_same_commands_and_steps_give_the_same_trajectory_however_time_is_chunked():
    def fly(chunk: float) -> list:
        model = MultirotorModel({"a": (0.0, 0.0, 0.0), "b": (0.0, 2.0, 0.0)})
        model.takeoff("a")
        model.takeoff("b")
        trace = []
        for t in range(1, 13):
            for _ in range(round(1.0 / chunk)):
                model.advance(chunk)
            if t == 4:
                model.move_to("a", (10.0, 2.0, -4.0), 3.0)
                model.move_velocity("b", (1.0, 0.0, -0.5), 3.0)
            if t == 6:
                model.set_wind((0.0, -8.0, 0.0))
            if t == 8:
                model.set_wind((0.0, 0.0, 0.0))
            trace.append((model.tick, model.state("a"), model.state("b"), model.collision("a"),
                          model.take_completions()))
        return trace

    assert fly(1.0) == fly(1.0)
    assert fly(1.0) == fly(0.25) == fly(0.05)


def test_local_and_world_frames_with_two_origins():
    model = MultirotorModel({"a": (0.0, 0.0, 0.0), "b": (10.0, -5.0, -1.0)})
    for name in ("a", "b"):
        model.takeoff(name)
    model.advance(6.0)
    for name in ("a", "b"):
        model.move_to(name, (2.0, 3.0, -4.0), 2.0)  # the same local target
    model.advance(10.0)
    a, b = model.state("a"), model.state("b")
    for state in (a, b):
        assert (state.position - Vec3(2.0, 3.0, -4.0)).norm() < 0.02
    delta = b.world_position - a.world_position
    assert (delta.x, delta.y, delta.z) == pytest.approx((10.0, -5.0, -1.0), abs=0.03)
    assert b.world_position.z == pytest.approx(-5.0, abs=0.02)


def test_config_is_validated():
    with pytest.raises(ConfigError, match="dt"):
        MultirotorModel({"a": (0.0, 0.0, 0.0)}, MultirotorConfig(dt=0.0))
    with pytest.raises(ValueError, match="at least one vehicle"):
        MultirotorModel({})
    model = MultirotorModel({"a": (0.0, 0.0, 0.0)})
    with pytest.raises(ValueError, match="speed"):
        model.move_to("a", (1.0, 0.0, 0.0), 0.0)
    with pytest.raises(ValueError, match="advance"):
        model.advance(-1.0)


# ---------------------------------------------------------------------- through the peer and the AirSim client

def test_collision_info_is_reported_on_both_sides_and_reset_on_read():
    airsim = pytest.importorskip("cosysairsim")
    from sim_bridges.airsim.airsim_peer import AirSimPeer

    settings = {"SettingsVersion": 2.0, "SimMode": "Multirotor", "ClockSpeed": 1.0,
                "Vehicles": {"drone_0": {"VehicleType": "SimpleFlight", "X": 0, "Y": 0, "Z": 0},
                             "drone_1": {"VehicleType": "SimpleFlight", "X": 0, "Y": 2, "Z": 0}}}
    with AirSimPeer(settings) as peer:
        client = airsim.MultirotorClient(ip="127.0.0.1", port=peer.port, timeout_value=10)
        try:
            client.simPause(True)
            for name in ("drone_0", "drone_1"):
                client.enableApiControl(True, name)
                client.armDisarm(True, name)
            takeoffs = [client.takeoffAsync(vehicle_name=name) for name in ("drone_0", "drone_1")]
            client.simContinueForTime(5.0)
            assert [f.get() for f in takeoffs] == [True, True]
            assert not client.simGetCollisionInfo("drone_0").has_collided
            client.moveToPositionAsync(0, 2, -3, 1, vehicle_name="drone_0")  # onto drone_1
            client.simContinueForTime(3.0)
            first = client.simGetCollisionInfo("drone_0")
            assert isinstance(first, airsim.CollisionInfo)
            assert first.has_collided and first.object_name == "drone_1"
            assert first.normal.y_val == pytest.approx(-1.0, abs=1e-6) and first.penetration_depth > 0
            assert 0 < first.time_stamp <= client.getMultirotorState("drone_0").timestamp
            assert not client.simGetCollisionInfo("drone_0").has_collided  # read: reset
            assert peer.received[-1] == ("simGetCollisionInfo", ["drone_0"])
            other = client.simGetCollisionInfo("drone_1")
            assert other.has_collided and other.object_name == "drone_0"
            assert other.normal.y_val == pytest.approx(1.0, abs=1e-6)
            assert other.time_stamp == first.time_stamp
            client.simContinueForTime(0.5)  # still pushing into drone_1: a new collision
            assert client.simGetCollisionInfo("drone_0").has_collided
        finally:
            client.client.close()
