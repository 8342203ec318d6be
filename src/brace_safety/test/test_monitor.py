"""The team's monitor: sources, stale poses, counting per agent and zone when an intervention begins, static
obstacles, the health it reports and its config rules."""

import math

import pytest

from brace_common.config import ConfigError
from brace_common.vocabulary import ZoneAction
from brace_safety.monitor import CollisionMonitor, MonitorConfig, Sensed, static_obstacle

CFG = dict(hazard_distance_m=1.0, slowdown_distance_m=2.0, time_before_collision_s=1.0, footprint_radius_m=0.3,
           source_timeout_s=0.5, agents=["a", "b"])


def at(x: float, t: float, vx: float = 0.0) -> Sensed:
    return Sensed((x, 0.0, 0.0), 0.0, (vx, 0.0, 0.0), t)


def test_a_stop_is_counted_once_while_it_lasts_and_again_when_it_begins_anew():
    mon = CollisionMonitor(MonitorConfig(**CFG))
    mon.sense("a", at(0.0, 0.0))
    mon.sense("b", at(0.9, 0.0))
    first = mon.guard("a", (1.0, 0.0, 0.0), 0.0, 0.1)
    assert (first.verdict.action, first.motion.linear, first.changed, first.began) == \
        (ZoneAction.STOP, (0.0, 0.0, 0.0), True, True)
    again = mon.guard("a", (1.0, 0.0, 0.0), 0.0, 0.2)
    assert (again.verdict.action, again.changed, again.began) == (ZoneAction.STOP, False, False)
    away = mon.guard("a", (-1.0, 0.0, 0.0), 0.0, 0.3)
    assert (away.verdict.action, away.motion.linear, away.changed) == (ZoneAction.NONE, (-1.0, 0.0, 0.0), True)
    assert mon.guard("a", (1.0, 0.0, 0.0), 0.0, 0.4).began
    assert (mon.counts["stops.a"], mon.counts["stops.b"], mon.counts["commands"]) == (2, 0, 4)


def test_a_restore_is_counted_when_it_begins_and_its_end_reported_once():
    mon = CollisionMonitor(MonitorConfig(**{**CFG, "zones": ["stop", "restore"]}))
    assert "restores.a" in list(mon.counts) and "restores.a" not in list(CollisionMonitor(MonitorConfig(**CFG)).counts)
    mon.sense("a", at(0.0, 0.0))
    mon.sense("b", at(0.8, 0.0))
    out = mon.restore("a", 1.5, 0.1)
    assert (out.verdict.action, out.motion.linear, out.began) == (ZoneAction.RESTORE, (-1.5, 0.0, 0.0), True)
    assert not mon.restore("a", 1.5, 0.2).began and mon.counts["restores.a"] == 1
    mon.sense("a", at(-0.3, 0.3))
    ended = mon.restore("a", 1.5, 0.3)
    assert (ended.verdict.action, ended.verdict.obstacle, ended.changed, ended.motion) == \
        (ZoneAction.NONE, "b", True, None)
    assert mon.restore("a", 1.5, 0.4) is None and mon.counts["restores.a"] == 1
    assert mon.restore("a", 1.5, 9.0) is None                    # its own pose is stale: nothing it can do


def crossing(zones: list[str]) -> CollisionMonitor:
    """a (the right of way: first in `agents`) and b, 1.5 m before the point where their courses (+x, +y) cross."""
    mon = CollisionMonitor(MonitorConfig(**{**CFG, "zones": zones}))
    mon.sense("a", Sensed((-1.5, 0.0, 0.0), 0.0, (1.0, 0.0, 0.0), 0.0))
    mon.sense("b", Sensed((0.0, -1.5, 0.0), 0.0, (0.0, 1.0, 0.0), 0.0))
    return mon


def test_of_two_agents_limiting_each_other_the_one_without_the_right_of_way_yields_and_is_counted():
    mon = crossing(["stop", "slowdown", "approach", "yield"])
    first = mon.guard("a", (1.0, 0.0, 0.0), 0.0, 0.1)
    assert first.verdict.action is ZoneAction.APPROACH and first.verdict.obstacle == "b"   # slowed, not held
    second = mon.guard("b", (0.0, 1.0, 0.0), 0.0, 0.1)
    assert (second.verdict.action, second.verdict.obstacle, second.motion.linear) == \
        (ZoneAction.YIELD, "a", (0.0, 0.0, 0.0))
    assert (mon.counts["yields.b"], mon.counts["yields.a"]) == (1, 0)
    plain = crossing(["stop", "slowdown", "approach"])
    plain.guard("a", (1.0, 0.0, 0.0), 0.0, 0.1)
    assert plain.guard("b", (0.0, 1.0, 0.0), 0.0, 0.1).verdict.action is ZoneAction.APPROACH
    assert "yields.b" not in list(plain.counts)


def test_an_agent_with_the_right_of_way_but_no_command_is_not_yielded_to():
    mon = crossing(["stop", "slowdown", "approach", "yield"])
    mon.guard("a", (1.0, 0.0, 0.0), 0.0, 0.1)
    mon.idle("a")                                   # its command ended: hovering
    assert mon.guard("b", (0.0, 1.0, 0.0), 0.0, 0.1).verdict.action is ZoneAction.APPROACH


def test_an_agent_in_the_way_of_one_with_the_right_of_way_is_flown_out_of_it_until_clear():
    mon = CollisionMonitor(MonitorConfig(**{**CFG, "zones": ["stop", "slowdown", "approach", "yield"]}))
    mon.sense("a", Sensed((-1.6, 0.0, 0.0), 0.0, (0.0, 0.0, 0.0), 0.0))
    mon.sense("b", Sensed((0.0, 0.3, 0.0), 0.0, (0.0, 0.0, 0.0), 0.0))   # hovering beside a's course
    assert mon.guard("a", (1.0, 0.0, 0.0), 0.0, 0.1).verdict.obstacle == "b"
    out = mon.restore("b", 2.0, 0.1)
    assert (out.verdict.action, out.verdict.obstacle, out.began) == (ZoneAction.YIELD, "a", True)
    assert out.motion.linear == pytest.approx((0.0, 2.0, 0.0))         # square off a's course, to b's side
    assert mon.restore("a", 2.0, 0.1) is None                           # a moves under its own command
    mon.sense("b", Sensed((0.0, 3.0, 0.0), 0.0, (0.0, 0.0, 0.0), 0.2))
    assert mon.guard("a", (1.0, 0.0, 0.0), 0.0, 0.2).verdict.action is ZoneAction.NONE
    ended = mon.restore("b", 2.0, 0.2)
    assert (ended.verdict.action, ended.motion) == (ZoneAction.NONE, None) and mon.counts["yields.b"] == 1


def test_an_agent_moving_under_its_own_command_makes_way_only_for_one_with_the_right_of_way():
    mon = CollisionMonitor(MonitorConfig(**{**CFG, "zones": ["stop", "slowdown", "approach", "yield"]}))
    mon.sense("a", Sensed((0.0, 0.3, 0.0), 0.0, (0.0, 0.0, 0.0), 0.0))
    mon.sense("b", Sensed((-1.6, 0.0, 0.0), 0.0, (0.0, 0.0, 0.0), 0.0))
    mon.guard("a", (0.0, 0.0, 1.0), 0.0, 0.1)                          # a climbs: its own command, not closing
    assert mon.guard("b", (1.0, 0.0, 0.0), 0.0, 0.1).verdict.obstacle == "a"
    assert mon.restore("a", 2.0, 0.1) is None                           # b has no right of way over a
    mon.idle("a")
    assert mon.restore("a", 2.0, 0.2).verdict.action is ZoneAction.YIELD   # hovering, a makes way for anyone


def test_an_agent_whose_own_pose_is_stale_or_missing_is_stopped():
    mon = CollisionMonitor(MonitorConfig(**CFG))
    unseen = mon.guard("a", (1.0, 0.0, 0.0), 0.0, 0.0)
    assert (unseen.verdict.action, unseen.motion) == (ZoneAction.STOP, None) and "no pose yet" in unseen.verdict.detail
    mon.sense("a", at(0.0, 0.0))
    assert mon.guard("a", (1.0, 0.0, 0.0), 0.0, 0.4).verdict.action is ZoneAction.NONE
    stale = mon.guard("a", (1.0, 0.0, 0.0), 0.0, 0.6)
    assert stale.verdict.action is ZoneAction.STOP and "0.60 s old" in stale.verdict.detail
    assert mon.counts["stale_sources"] == 2 and "stale_sources" in mon.health().warnings


def test_another_agents_stale_pose_stands_still_where_it_was_last_seen():
    mon = CollisionMonitor(MonitorConfig(**CFG))
    mon.sense("b", at(3.0, 0.0, vx=-2.0))   # coming at a at 2 m/s, then silent
    mon.sense("a", at(0.0, 1.0))
    assert [o.velocity for o in mon.obstacles("a", 0.2)] == [(-2.0, 0.0, 0.0)]
    assert [o.velocity for o in mon.obstacles("a", 1.0)] == [(0.0, 0.0, 0.0)]
    assert mon.guard("a", (0.5, 0.0, 0.0), 0.0, 1.0).verdict.action is ZoneAction.NONE   # 2 m to the zone at 0.5 m/s


def test_static_obstacles_and_keep_out_boxes_are_obstacles_of_every_agent():
    mon = CollisionMonitor(MonitorConfig(**{**CFG, "static_obstacles": ["franka_1: 1.5 0", "shelf: 0 -3 0 1 1 1"]}))
    mon.sense("a", at(0.7, 0.0))
    verdict = mon.guard("a", (1.0, 0.0, 0.0), 0.0, 0.0).verdict
    assert (verdict.action, verdict.obstacle) == (ZoneAction.STOP, "franka_1")
    assert static_obstacle("shelf: 0 -3 0 1 1 1").distance((0.0, 0.0, 0.0)) == pytest.approx(2.0)


def test_unknown_agents_are_counted_not_sensed_and_the_closest_distance_is_kept():
    mon = CollisionMonitor(MonitorConfig(**CFG))
    mon.sense("zz", at(0.0, 0.0))
    mon.sense("a", at(0.0, 0.0))
    mon.sense("b", at(2.0, 0.0))
    mon.sense("b", at(1.2, 0.1))
    mon.sense("b", at(5.0, 0.2))
    health = mon.health()
    assert mon.counts["unknown_agents"] == 1 and "zz" not in mon.sensed
    assert health.values["min_distance_m"] == 1.2 and "unknown_agents" in health.warnings


def test_disabled_an_unchecked_agent_passes_but_is_reported():
    mon = CollisionMonitor(MonitorConfig(**{**CFG, "enable": False}))
    guarded = mon.guard("a", (1.0, 0.0, 0.0), 0.0, 0.0)
    assert (guarded.verdict.action, guarded.verdict.speed_ratio) == (ZoneAction.NONE, 1.0)
    assert "cannot check" in guarded.verdict.detail and mon.counts["stale_sources"] == 1


@pytest.mark.parametrize("change, parameter", [
    ({"agents": []}, "agents"),
    ({"agents": ["a", "a"]}, "agents"),
    ({"agents": ["bad id!"]}, "agents"),
    ({"static_obstacles": ["pillar 1 2"]}, "static_obstacles"),
    ({"static_obstacles": ["box: 0 0 0 1 1 0"]}, "static_obstacles"),
    ({"static_obstacles": ["p: 1 nan"]}, "static_obstacles"),
    ({"source_timeout_s": 0.0}, "source_timeout_s"),
])
def test_a_bad_config_names_its_parameter(change, parameter):
    with pytest.raises(ConfigError) as err:
        MonitorConfig(**{**CFG, **change}).validate()
    assert err.value.parameter == parameter


def test_the_health_names_each_agents_action():
    mon = CollisionMonitor(MonitorConfig(**CFG))
    mon.sense("a", at(0.0, 0.0))
    mon.sense("b", at(1.5, 0.0))
    mon.guard("a", (0.1, 0.0, 0.0), 0.0, 0.0)
    assert mon.health().values["action.a"] == "slowdown" and not math.isnan(mon.health().values["min_distance_m"])
