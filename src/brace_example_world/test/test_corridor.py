"""The corridor's core: schema, steps, entries, state and verdict (ROS-free)."""

from __future__ import annotations

import pytest

from brace_common.validation import InvalidInput
from brace_common.vocabulary import Activity, Block
from brace_example_world.corridor import Corridor, cell


def test_agents_walk_one_cell_a_step_to_their_targets_and_the_oracle_plan_succeeds():
    world = Corridor(num_agents=3, num_cells=10, seed=4, max_steps=30)
    schema = world.schema(max_plan_steps=2)
    for agent in world.agents:
        assert world.position[agent] != world.goal[agent]
        plan = schema.plan_from_pairs([(s.action, s.parameters_json()) for s in [world.oracle_step(agent)]])
        assert world.agrees(agent, plan)
        world.set_plan(agent, plan)
    distance = max(abs(world.position[a] - world.goal[a]) for a in world.agents)
    reached = []
    while not world.finished:
        reached += [e.agent for e in world.step() if e.action == "move_to"]
    assert sorted(reached) == sorted(world.agents) and world.t == distance
    verdict = world.metrics()
    assert (verdict.success, verdict.steps, verdict.delivered, verdict.tasks) == (True, distance, 3, 3)


def test_an_agent_without_a_plan_stays_and_the_episode_fails_at_max_steps():
    world = Corridor(num_agents=1, num_cells=5, seed=0, max_steps=3)
    start = dict(world.position)
    while not world.finished:
        assert world.step() == []
    assert world.position == start and world.t == 3
    assert not world.metrics().success and world.metrics().delivered == 0


def test_the_schema_refuses_a_cell_that_is_not_in_the_corridor_and_long_plans():
    world = Corridor(num_agents=1, num_cells=4, seed=1, max_steps=10)
    schema = world.schema(max_plan_steps=2)
    with pytest.raises(InvalidInput):
        schema.plan_from_pairs([("move_to", '{"target": "cell_9"}')])
    with pytest.raises(InvalidInput):
        schema.plan_from_pairs([("wait", "{}")] * 3)
    assert not world.agrees("agent_0", schema.plan_from_pairs([("wait", "{}")]))


def test_what_the_stack_hears_tasks_states_reports_and_the_scene_graph():
    world = Corridor(num_agents=2, num_cells=6, seed=2, max_steps=10)
    tasks = world.task_entries()
    assert [(e.agent_id, e.block, e.text) for e in tasks] == [
        (a, Block.TASK, f"{a}: go to {cell(world.goal[a])}") for a in world.agents]
    world.set_plan("agent_0", [world.oracle_step("agent_0")])
    events = world.step()
    entries = world.step_entries(events)
    assert {e.agent_id for e in entries if e.block == Block.STATE} == set(world.agents)
    reports = {r.agent_id: r for r in world.reports()}
    assert reports["agent_1"].has_goal is False and reports["agent_0"].x == world.position["agent_0"]
    state = world.state(episode=0)
    assert state.activity("agent_0").activity in (Activity.EXECUTING, Activity.IDLE)
    assert state.activity("agent_1").activity == Activity.IDLE
    assert {(r.subject, r.object) for r in state.related("target")} == {(a, cell(world.goal[a])) for a in world.agents}
