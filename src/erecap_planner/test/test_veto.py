"""The lookahead veto: a first step the world projects to lose the agent's task is replaced or refused."""

from __future__ import annotations

import pytest

from brace_common.action_schema import Step
from brace_common.vocabulary import Predicate
from brace_common.world_state import TASK_LOST, TASK_TYPE, Entity, Relation, WorldState
from brace_memory.lookahead import Projection
from erecap_planner.veto import VETOED_PREFIX, loses, refusal, vet


def state(task: str) -> WorldState:
    return WorldState("textworld", 0, 2, (Entity("player", "player"), Entity("task_0", TASK_TYPE, task)),
                      (Relation("player", Predicate.ASSIGNED, "task_0"),))


EAT, COOK, LOOK, WAIT = (Step("command", {"text": t}) for t in ("eat carrot", "cook carrot with oven", "look", "wait"))


class World:
    """A transition model that loses the task on the `losing` commands and cannot project `unknown` ones."""

    def __init__(self, losing=(), unknown=()) -> None:
        self.losing, self.unknown, self.asked = {s.call() for s in losing}, {s.call() for s in unknown}, []

    def __call__(self, agent: str, step: Step):
        self.asked.append(step)
        if step.call() in self.unknown:
            return None
        lost = step.call() in self.losing
        return Projection(True, "You lost!" if lost else "ok", state(TASK_LOST if lost else "open"))


def test_a_step_that_does_not_lose_passes_after_one_projection():
    world = World(losing=[EAT])
    out = vet(world, "player", LOOK, [LOOK, EAT])
    assert out.step == LOOK and out.vetoed == [] and world.asked == [LOOK]


def test_a_losing_step_gives_way_to_the_next_ranked_one_that_does_not_lose():
    world = World(losing=[EAT, COOK])
    out = vet(world, "player", EAT, [EAT, COOK, LOOK, WAIT])
    assert out.step == LOOK and [s for s, _ in out.vetoed] == [EAT, COOK]
    assert all(why == "You lost!" for _, why in out.vetoed) and world.asked == [EAT, COOK, LOOK]


def test_without_a_ranking_or_past_the_tries_the_plan_is_refused():
    world = World(losing=[EAT, COOK])
    alone = vet(world, "player", EAT)
    assert alone.step is None and [s for s, _ in alone.vetoed] == [EAT]
    assert refusal(alone).startswith(VETOED_PREFIX) and "eat carrot" in refusal(alone)
    capped = vet(World(losing=[EAT, COOK]), "player", EAT, [COOK, LOOK], tries=2)
    assert capped.step is None and len(capped.vetoed) == 2


def test_a_step_the_world_cannot_project_or_that_fails_harmlessly_passes():
    assert loses(World(unknown=[EAT]), "player", EAT) is None
    failing = lambda agent, step: Projection(False, "nothing happens", state("open"))  # noqa: E731
    assert loses(failing, "player", EAT) is None
    stateless = lambda agent, step: Projection(True, "ok", None)  # noqa: E731
    assert vet(stateless, "player", EAT).step == EAT


@pytest.mark.parametrize("agent, lost", [("player", True), ("someone", False)])
def test_only_the_callers_own_task_counts(agent, lost):
    assert (loses(World(losing=[EAT]), agent, EAT) is not None) == lost


def test_the_planner_parameters_name_what_the_veto_needs():
    from brace_common.config import ConfigError
    from erecap_planner.config import PlannerConfig

    PlannerConfig(veto_lost=True).validate()  # the prompt's lookahead lines (memory module lookahead) are not needed
    with pytest.raises(ConfigError, match="veto_lost"):
        PlannerConfig(veto_lost=True, recap_recursion=True, context_layout="recap", decoding="constrained").validate()
    with pytest.raises(ConfigError, match="veto_tries"):
        PlannerConfig(veto_tries=0).validate()
