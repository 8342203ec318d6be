"""The warehouse's oracle decomposition: a plan cut after each closing step, and ReCAP's frames driven by the
oracle's answers finishing episodes (π at every frame, ρ after every step and, as a periodic trigger would ask,
every 5 steps: a carrier's open-ended wait ends only by a refinement)."""

from __future__ import annotations

import pytest

from brace_common.action_schema import ActionSchema, Step
from brace_common.vocabulary import RecapNeed
from brace_common.world_feed import outcomes
from brace_memory.recap import RecapFrames
from sim_bridges.warehouse.warehouse_decomposition import oracle_answer, segments
from sim_bridges.warehouse.warehouse_feed import world_schema
from sim_bridges.warehouse.warehouse_world import Warehouse, WorldConfig


def test_a_plan_is_cut_after_each_step_that_closes_a_subtask():
    plan = [Step("move_to", {"target": "shelf_2"}), Step("pick", {"object": "cup_3"}),
            Step("move_to", {"target": "dock_1"}), Step("place", {"object": "cup_3", "target": "dock_1"}),
            Step("move_to", {"target": "park_0"})]
    assert [(p.subtask.values_text(), len(p.steps)) for p in segments(plan)] == [
        ("fetch(cup_3)", 2), ("deliver(cup_3, dock_1)", 2), ("stand_by()", 1)]


def serve(world: Warehouse, frames: RecapFrames, agent: str, schema: ActionSchema, periodic: bool) -> int:
    """Answer the agent's frames by the oracle until it has steps to run or its root closed (`periodic`: refine a
    frame that runs its steps too); the calls made."""
    calls = 0
    while (frames.need(agent).need in (RecapNeed.DECOMPOSE, RecapNeed.REFINE) or periodic and not calls) \
            and frames.need(agent).need != RecapNeed.NOTHING and calls < 10:
        thought, subtasks = oracle_answer(world, agent, frames.goal_step(agent))
        for s in subtasks:
            raw = {"subtask" if s.composite else "action": s.step.action, "parameters": s.step.parameters}
            (schema.check_subtask if s.composite else schema.check)(raw)
        frames.on_plan(agent, world.t, thought, subtasks)
        calls += 1
    return calls


@pytest.mark.parametrize("agents", [1, 2])
def test_the_oracles_decomposition_finishes_episodes_through_the_frames(agents):
    finished = 0
    for seed in range(4):
        world = Warehouse(WorldConfig(num_agents=agents, seed=seed, max_steps=200))
        schema = world_schema(world)
        assert set(schema.subtasks) == {"fetch", "deliver", "hand_over", "stand_by"}
        frames = RecapFrames()
        for agent in world.agents:
            frames.on_task(agent, f"{agent}'s deliveries")
        while not world.finished:
            for agent in world.agents:
                if frames.need(agent).need == RecapNeed.NOTHING:
                    frames.reopen(agent, world.t)       # a world whose task goes on: the root again
                serve(world, frames, agent, schema, world.t % 5 == 0)
                world.set_plan(agent, frames.executable(agent))
            for event in outcomes(world.step()):
                frames.on_outcome(event.agent, world.t, event.action, event.success, event.text)
        finished += world.success
        assert frames.counts["decompositions"] > 0 and frames.counts["refinements"] > 0
    assert finished >= 3
