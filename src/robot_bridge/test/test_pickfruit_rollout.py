"""PickFruit without ROS: plans run through the executor's step monitor on the world, with the nodes' context texts."""

from __future__ import annotations

import pytest

from brace_common.vocabulary import Block, EntryKind, Failure
from robot_bridge.openvla.step_monitor import describe_step, outcome_text
from robot_bridge.pickfruit.pickfruit_rollout import PickFruitRollout
from robot_bridge.pickfruit.pickfruit_world import SKILLS_TEXT, PickFruitConfig, PickFruitWorld, scene_text, task_text


def rollout(slip: float = 0.0, seed: int = 3) -> tuple[PickFruitRollout, str]:
    roll = PickFruitRollout(PickFruitWorld(PickFruitConfig(slip_probability=slip)))
    (fruit,) = roll.start(seed)
    return roll, fruit


def plan(fruit: str) -> list[tuple[str, dict]]:
    return [("pick", {"object": fruit}), ("place", {"object": fruit, "target": "bowl"})]


def test_the_oracle_plan_delivers_and_the_context_reads_as_the_nodes_write_it():
    roll, fruit = rollout()
    assert [line.text for line in roll.lines[:2]] == [task_text(fruit), SKILLS_TEXT]
    assert roll.lines[2].block == Block.STATE and roll.lines[2].text == scene_text(roll.world.describe())
    records = roll.execute(plan(fruit))
    assert [r.result.success for r in records] == [True, True] and roll.world.success()
    history = [line for line in roll.lines if line.block == Block.HISTORY]
    assert [line.text for line in history] == [outcome_text(describe_step(r.action, r.parameters), r.result)
                                               for r in records]
    assert all(line.kind == EntryKind.ACTION_OUTCOME for line in history)
    assert history[0].step < history[1].step                           # the executor's ticks
    assert f"{fruit} in the bowl" in roll.lines[-2].text               # the scene after the release
    assert roll.world.counts.grasps == 1 and roll.world.counts.releases == 1


def test_a_slip_fails_the_step_and_the_rest_of_the_plan_is_abandoned():
    roll, fruit = rollout(slip=1.0)
    records = roll.execute(plan(fruit))
    assert [r.result.success for r in records] == [True, False]
    assert records[1].result.failure == Failure.DROP_SLIP and "slipped" in records[1].text
    assert roll.lines[-1].kind == EntryKind.FAILURE_TRACE and not roll.world.success()
    assert roll.world.counts.slips == 1


def test_a_wrong_fruit_is_delivered_but_the_task_is_not():
    roll, fruit = rollout()
    other = next(f for f in roll.world.config.fruits if f != fruit)
    assert all(r.result.success for r in roll.execute(plan(other)))
    assert roll.world.snapshot()[other].in_bowl and not roll.world.success()


def test_max_steps_stops_mid_plan_and_bad_steps_are_refused():
    roll, fruit = rollout()
    assert len(roll.execute(plan(fruit), max_steps=1)) == 1 and roll.world.snapshot()[fruit].held
    with pytest.raises(ValueError):    # InstructionError or StepError, as the executor rejects the plan
        roll.step("dance", {})
