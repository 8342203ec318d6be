"""TwinRig without ROS: an episode's reset, plans and outcomes, scene changes, its end and what diagnostics report."""

from __future__ import annotations

import itertools
import time

import pytest

from brace_common.vocabulary import Failure, TriggerKind
from robot_bridge.pickfruit.pickfruit_world import HOME_GRIPPER_M, HOME_JOINTS
from robot_bridge.pickfruit.twin_rig import TwinRig
from robot_bridge.pickfruit.twin_world_config import TwinWorldConfig

PERIODIC, DRIFT = int(TriggerKind.PERIODIC), int(TriggerKind.DRIFT)
ports = itertools.count()


def rig_of(task: str) -> TwinRig:
    """A rig of `task`, not started (no bus, no server): the episode logic needs neither."""
    return TwinRig(TwinWorldConfig(task=task, can_port=f"twin_rig_test_{next(ports)}", act_port=0,
                                   max_episode_s=30.0))


@pytest.fixture
def rig():
    """A PickFruit rig, not started."""
    return rig_of("pickfruit")


def test_an_episode_starts_with_the_table_reset_and_the_arm_at_home(rig):
    rig.twin.place([0.3, 1.2, -0.9, 0.4, 0.6, -0.2], 0.01)   # where the last episode left it
    rig.failures["grasp"] += 1
    objects = rig.start_episode(seed=4)
    assert objects == list(rig.world.task) and objects
    state = rig.twin.state()
    assert state.joints_rad == pytest.approx(HOME_JOINTS) and state.gripper_m == pytest.approx(HOME_GRIPPER_M)
    assert rig.failures.total() == 0 and rig.started_at is not None and rig.over() is None
    assert rig.tick() == rig.world.describe(), "the first tick publishes the scene"
    assert rig.tick() is None, "an unchanged scene is not published again"
    assert rig.world_state(episode=0).step == 1


def test_a_plan_begun_anew_tells_the_stand_in_to_start_over():
    rig = rig_of("pusht")
    rig.start_episode(seed=0)
    push = [("push", '{"object": "t_block", "target": "goal"}')]
    rig.plan(push, PERIODIC)          # nothing ran: begun anew
    assert rig.policy.anew
    rig.policy.anew = False
    rig.plan(push, PERIODIC)          # confirms the running step: the stand-in goes on
    assert not rig.policy.anew and rig.counts["instructions_anew"] == 1
    rig.plan(push, DRIFT)             # repairs a drift: begun anew
    assert rig.policy.anew and rig.counts["plans"] == 3 and rig.counts["instructions_anew"] == 2


def test_failed_outcomes_are_counted_by_category(rig):
    rig.start_episode(seed=0)
    assert rig.outcome("pick", True, Failure.NONE.value)
    assert rig.outcome("pick", False, Failure.GRASP.value)
    assert not rig.outcome("pick", False, 99), "no such category"
    assert rig.counts["outcomes"] == 3 and rig.counts["failed_outcomes"] == 2
    assert rig.failures[Failure.GRASP.label] == 1 and rig.failures.total() == 1


def test_an_episode_ends_after_max_episode_s_with_its_record(rig):
    rig.start_episode(seed=0)
    rig.outcome("pick", False, Failure.GRASP.value)
    rig.started_at = time.monotonic() - 31.0   # the episode began max_episode_s ago
    elapsed = rig.over()
    assert elapsed is not None and elapsed > 30.0
    result = rig.end_episode(elapsed, episode=2, seed=7, plans=3)
    assert not result.success and rig.started_at is None and rig.elapsed() == 0.0
    assert result.metrics[f"failure_{Failure.GRASP.label}"] == 1.0


def test_health_reports_the_server_the_twin_the_counts_and_the_world(rig):
    values = rig.health().values
    assert values["act_url"] == "stopped" and values["twin.gripper_m"] == round(HOME_GRIPPER_M, 4)
    assert values["plans"] == 0 and "world.grasps" in values and "twin.enabled" in values
