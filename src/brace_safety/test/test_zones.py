"""The zones: each action on a closing command, nothing on motion away, the approach's scaling, keep-out boxes, the
rules of the config, and (property) two agents driven at each other never inside the stop zone."""

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brace_common.config import ConfigError
from brace_common.vocabulary import ZoneAction
from brace_safety.airsim_guard import AirSimMonitorConfig
from brace_safety.zones import (
    Motion,
    Obstacle,
    Verdict,
    ZoneConfig,
    check,
    closing_speed,
    make_way,
    restore,
    right_of_way,
    stop_radius,
)

CFG = ZoneConfig(hazard_distance_m=1.0, slowdown_distance_m=2.0, slowdown_ratio=0.5, time_before_collision_s=2.0,
                 simulation_time_step_s=0.1, footprint_radius_m=0.3)


def toward_x(x: float, speed: float = 1.0) -> Motion:
    """An agent at (x, 0, 0) driving along +x."""
    return Motion((x, 0.0, 0.0), 0.0, (speed, 0.0, 0.0))


OTHER = Obstacle("b", (0.0, 0.0, 0.0))


def test_closing_inside_the_stop_zone_is_stopped():
    verdict = check(CFG, toward_x(-0.8), [OTHER])
    assert (verdict.action, verdict.speed_ratio, verdict.obstacle) == (ZoneAction.STOP, 0.0, "b")
    assert verdict.distance_m == pytest.approx(0.8) and "closing on b" in verdict.detail


def test_the_stop_zone_grows_by_the_stopping_distance_at_the_sensed_closing_speed():
    braking = replace(CFG, braking_deceleration_mps2=2.0)
    coming = Motion((-1.5, 0.0, 0.0), 0.0, (1.0, 0.0, 0.0), velocity=(1.0, 0.0, 0.0))
    towards_me = Obstacle("b", (0.0, 0.0, 0.0), velocity=(-1.0, 0.0, 0.0))   # closing at 2 m/s: 1 m to brake
    assert closing_speed(coming, towards_me) == pytest.approx(2.0)
    assert stop_radius(braking, coming, towards_me) == pytest.approx(2.0) and stop_radius(CFG, coming, towards_me) == 1.0
    verdict = check(braking, coming, [towards_me])
    assert verdict.action == ZoneAction.STOP and "< 2 m" in verdict.detail
    assert check(CFG, coming, [towards_me]).action != ZoneAction.STOP
    parting = Obstacle("b", (0.0, 0.0, 0.0), velocity=(3.0, 0.0, 0.0))       # it runs away faster than I come
    assert closing_speed(coming, parting) == 0.0 and check(braking, coming, [parting]).action != ZoneAction.STOP
    box = Obstacle("box", (1.0, 5.0, 0.0), half_extents_m=(2.0, 1.0, 1.0))   # nearest point (-1, 4, 0): along +y
    sideways = Motion((-1.0, 0.0, 0.0), 0.0, (0.0, 1.0, 0.0), velocity=(1.0, 3.0, 0.0))
    assert closing_speed(sideways, box) == pytest.approx(3.0)
    reacting = replace(braking, reaction_time_s=0.5)                          # + 2 m/s x 0.5 s
    assert stop_radius(reacting, coming, towards_me) == pytest.approx(3.0)
    assert stop_radius(replace(CFG, reaction_time_s=0.5), coming, towards_me) == pytest.approx(2.0)
    assert stop_radius(reacting, coming, parting) == 1.0


def test_moving_away_inside_the_stop_zone_passes():
    verdict = check(CFG, toward_x(0.8), [OTHER])
    assert (verdict.action, verdict.speed_ratio, verdict.obstacle) == (ZoneAction.NONE, 1.0, "b")


def test_closing_inside_the_slowdown_zone_is_slowed():
    verdict = check(CFG, toward_x(-1.5, speed=0.2), [OTHER])   # the stop zone 2.5 s away: the approach lets it be
    assert (verdict.action, verdict.speed_ratio) == (ZoneAction.SLOWDOWN, 0.5)
    fast = check(CFG, toward_x(-1.5, speed=1.0), [OTHER])      # 0.5 s away: the approach is the more restrictive
    assert (fast.action, fast.speed_ratio) == (ZoneAction.APPROACH, pytest.approx(0.25))


def test_the_approach_scales_the_command_so_the_stop_zone_is_the_time_away():
    # 3 m out at 1 m/s: the stop zone's edge (1 m) is 2 m = 2 s away: just not within 2 s; at 2.5 m it is 1.5 s.
    assert check(CFG, toward_x(-3.05), [OTHER]).action is ZoneAction.NONE
    verdict = check(CFG, toward_x(-2.5), [OTHER])
    assert verdict.action is ZoneAction.APPROACH
    assert verdict.speed_ratio == pytest.approx(1.5 / 2.0)  # the edge reached in 1.5 s (between two steps)


def test_the_most_restrictive_zone_of_all_obstacles_wins():
    far, near = Obstacle("far", (0.0, 0.0, 0.0)), Obstacle("near", (-1.2, 0.3, 0.0))
    verdict = check(CFG, toward_x(-2.0), [far, near])
    assert (verdict.action, verdict.obstacle) == (ZoneAction.STOP, "near")


def test_a_command_past_an_obstacle_beside_it_passes():
    side = Motion((0.0, -0.5, 0.0), -math.pi / 2, (1.0, 0.0, 0.0))   # driving along -y, away from b at the origin
    assert check(CFG, side, [OTHER]).action is ZoneAction.NONE


def test_a_turning_unicycle_is_simulated_along_its_arc():
    # At (-3, 0) heading +y and turning right at 0.5 rad/s: the arc bends toward b but the straight line does not.
    curving = Motion((-3.0, 0.0, 0.0), math.pi / 2, (1.0, 0.0, 0.0), yaw_rate=-0.5)
    straight = Motion((-3.0, 0.0, 0.0), math.pi / 2, (1.0, 0.0, 0.0))
    assert check(CFG, straight, [OTHER]).action is ZoneAction.NONE
    assert check(CFG, curving, [Obstacle("b", (-1.2, 1.5, 0.0))]).action is ZoneAction.APPROACH


def test_a_moving_obstacle_is_met_where_it_will_be():
    oncoming = Obstacle("b", (0.0, 0.0, 0.0), velocity=(-1.0, 0.0, 0.0))
    assert check(CFG, toward_x(-4.0), [OTHER]).action is ZoneAction.NONE
    verdict = check(CFG, toward_x(-4.0), [oncoming])
    assert verdict.action is ZoneAction.APPROACH and verdict.speed_ratio == pytest.approx(1.5 / 2.0)  # 3 m at 2 m/s


def test_a_keep_out_box_is_measured_from_its_surface():
    box = Obstacle("bowl", (0.0, 0.0, 0.0), half_extents_m=(0.5, 0.5, 0.5))
    assert box.distance((0.2, 0.1, 0.0)) == 0.0 and box.distance((1.5, 0.5, 0.5)) == pytest.approx(1.0)
    verdict = check(CFG, toward_x(-1.4), [box])
    assert (verdict.action, verdict.distance_m) == (ZoneAction.STOP, pytest.approx(0.9))


def test_without_motion_or_when_disabled_nothing_acts_but_the_nearest_is_reported():
    still = Motion((-0.8, 0.0, 0.0), 0.0, (0.0, 0.0, 0.0))
    assert check(CFG, still, [OTHER]) .action is ZoneAction.NONE
    off = ZoneConfig(**{**CFG.__dict__, "enable": False})
    verdict = check(off, toward_x(-0.8), [OTHER])
    assert (verdict.action, verdict.speed_ratio, verdict.obstacle) == (ZoneAction.NONE, 1.0, "b")
    assert verdict.distance_m == pytest.approx(0.8)


def test_zones_left_out_do_not_act():
    approach_only = ZoneConfig(**{**CFG.__dict__, "zones": ["approach"]})
    verdict = check(approach_only, toward_x(-0.8), [OTHER])   # inside the stop zone: the approach stops it
    assert (verdict.action, verdict.speed_ratio) == (ZoneAction.APPROACH, 0.0)
    assert check(approach_only, toward_x(-1.5), [OTHER]).action is ZoneAction.APPROACH


RESTORING = replace(CFG, zones=["stop", "restore"], braking_deceleration_mps2=2.0)


def held_at(x: float, y: float = 0.0, vx: float = 0.0) -> Motion:
    """An agent its command does not move, at (x, y, 0), sensed moving along +x at `vx`."""
    return Motion((x, y, 0.0), 0.0, (0.0, 0.0, 0.0), velocity=(vx, 0.0, 0.0))


def test_the_restore_zone_flies_an_agent_inside_the_stop_zone_straight_out():
    verdict, velocity = restore(RESTORING, held_at(-0.6), [OTHER], 2.0)
    assert (verdict.action, verdict.obstacle, verdict.distance_m) == (ZoneAction.RESTORE, "b", pytest.approx(0.6))
    assert velocity == pytest.approx((-2.0, 0.0, 0.0)) and "commanded out at 2 m/s" in verdict.detail
    assert restore(RESTORING, held_at(-1.2), [OTHER], 2.0) is None          # outside, still: nothing to do
    # outside hazard_distance_m but pushed in at 1 m/s: inside the braking-grown zone (1 + 1 / 4 m) -> out already
    verdict, velocity = restore(RESTORING, held_at(-1.2, vx=1.0), [OTHER], 2.0)
    assert verdict.action is ZoneAction.RESTORE and velocity == pytest.approx((-2.0, 0.0, 0.0))
    assert restore(RESTORING, held_at(-1.2, vx=-1.0), [OTHER], 2.0) is None  # moving out: leave it
    assert restore(RESTORING, held_at(-1.2, vx=0.05), [OTHER], 2.0) is None  # settling, not pushed


def test_the_restore_zone_weighs_every_obstacle_by_how_deep_inside_it_is():
    deep, shallow = Obstacle("deep", (0.5, 0.0, 0.0)), Obstacle("shallow", (0.0, 0.9, 0.0))
    verdict, velocity = restore(RESTORING, held_at(0.0), [deep, shallow], 1.0)
    assert verdict.obstacle == "deep" and math.hypot(*velocity) == pytest.approx(1.0)
    assert velocity[0] < -0.9 and -0.2 < velocity[1] < 0.0       # mostly away from the deeper one
    box = Obstacle("box", (2.0, 0.0, 0.0), half_extents_m=(1.5, 1.0, 1.0))    # surface at x = 0.5
    assert restore(RESTORING, held_at(0.0), [box], 1.0)[1] == pytest.approx((-1.0, 0.0, 0.0))
    _, anywhere = restore(RESTORING, held_at(0.0), [Obstacle("same", (0.0, 0.0, 0.0))], 1.0)
    assert math.hypot(*anywhere) == pytest.approx(1.0)            # coincident: a fixed direction, not NaN


def test_the_restore_zone_acts_only_when_listed_enabled_and_given_a_speed():
    inside = held_at(-0.6)
    assert restore(CFG, inside, [OTHER], 2.0) is None
    assert restore(replace(RESTORING, enable=False), inside, [OTHER], 2.0) is None
    assert restore(RESTORING, inside, [OTHER], 0.0) is None
    assert check(RESTORING, Motion((-0.6, 0.0, 0.0), 0.0, (1.0, 0.0, 0.0)), [OTHER]).action is ZoneAction.STOP


@pytest.mark.parametrize("zone", ["restore", "yield"])
def test_only_a_monitor_that_commands_motion_itself_may_have_the_restore_and_yield_zones(zone):
    moving = replace(RESTORING, zones=["stop", zone])
    with pytest.raises(ConfigError) as err:
        moving.validate()
    assert err.value.parameter == "zones" and "airsim_monitor" in str(err.value) and zone in str(err.value)
    AirSimMonitorConfig(**{**moving.__dict__, "footprint_radius_m": 0.3}).validate()


def test_the_yield_zone_holds_motion_limited_for_an_agent_with_the_right_of_way_but_never_softens_a_stop():
    yielding = replace(CFG, zones=["stop", "slowdown", "approach", "yield"])
    approach = Verdict(ZoneAction.APPROACH, 0.4, "first", 1.5, "first within 1 m in 0.4 s < 1 s")
    held = right_of_way(yielding, approach, {"first"})
    assert (held.action, held.speed_ratio, held.obstacle) == (ZoneAction.YIELD, 0.0, "first")
    assert held.detail.startswith("yielding to first (right of way): first within")
    assert right_of_way(yielding, approach, {"other"}) is approach            # not one with the right of way
    assert right_of_way(CFG, approach, {"first"}) is approach                 # the zone not listed
    assert right_of_way(replace(yielding, enable=False), approach, {"first"}) is approach
    stop = Verdict(ZoneAction.STOP, 0.0, "first", 0.9, "closing on first")
    assert right_of_way(yielding, stop, {"first"}) is stop


def test_make_way_flies_an_agent_square_off_the_course_of_the_one_it_holds_back_to_its_own_side():
    yielding = replace(CFG, zones=["stop", "yield"])
    first = Obstacle("first", (-2.0, 0.0, 0.0))
    aside, ahead = held_at(0.0), held_at(0.0, 0.5)
    verdict, velocity = make_way(yielding, ahead, [(first, (2.0, 0.0, 0.0))], 3.0)
    assert (verdict.action, verdict.obstacle) == (ZoneAction.YIELD, "first") and "flown out of its way" in verdict.detail
    assert velocity == pytest.approx((0.0, 3.0, 0.0))                       # square off its course, level
    _, on_course = make_way(yielding, aside, [(first, (2.0, 0.0, 0.0))], 3.0)
    assert on_course == pytest.approx((0.0, 3.0, 0.0))                      # on it: to its left
    _, no_course = make_way(yielding, aside, [(first, (0.0, 0.0, 0.0))], 3.0)
    assert no_course == pytest.approx((3.0, 0.0, 0.0))                      # no course: straight away
    assert make_way(yielding, aside, [], 3.0) is None
    assert make_way(CFG, aside, [(first, (2.0, 0.0, 0.0))], 3.0) is None


@pytest.mark.parametrize("change, parameter", [
    ({"zones": ["stop", "brake"]}, "zones"),
    ({"zones": ["stop", "stop"]}, "zones"),
    ({"slowdown_distance_m": 0.9}, "slowdown_distance_m"),
    ({"hazard_distance_m": 0.5}, "hazard_distance_m"),
    ({"simulation_time_step_s": 0.5, "time_before_collision_s": 0.2}, "simulation_time_step_s"),
    ({"slowdown_ratio": 1.5}, "slowdown_ratio"),
])
def test_a_bad_config_names_its_parameter(change, parameter):
    with pytest.raises(ConfigError) as err:
        ZoneConfig(**{**CFG.__dict__, **change}).validate()
    assert err.value.parameter == parameter


@settings(max_examples=25, deadline=None)
@given(start=st.floats(1.2, 8.0), speed=st.floats(0.05, 3.0), offset=st.floats(-0.5, 0.5),
       period=st.sampled_from([0.02, 0.05, 0.1]))
def test_two_agents_driven_at_each_other_never_enter_the_stop_zone(start, speed, offset, period):
    """Both commanded straight at the other every control period (a hostile planner); each command passes the
    monitor with the other where it was sensed, standing still."""
    a, b = [-start / 2, 0.0, 0.0], [start / 2, offset, 0.0]
    closest = math.dist(a, b)
    for _ in range(int(8.0 / period)):
        moves = []
        for me, other in ((a, b), (b, a)):
            heading = math.atan2(other[1] - me[1], other[0] - me[0])
            verdict = check(CFG, Motion(tuple(me), heading, (speed, 0.0, 0.0)), [Obstacle("o", tuple(other))])
            v = speed * verdict.speed_ratio
            moves.append((v * math.cos(heading) * period, v * math.sin(heading) * period))
        for p, (dx, dy) in zip((a, b), moves, strict=True):
            p[0] += dx
            p[1] += dy
        closest = min(closest, math.dist(a, b))
    assert closest >= min(CFG.hazard_distance_m, start) - 1e-9
