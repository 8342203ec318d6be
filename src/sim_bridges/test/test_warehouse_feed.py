"""What the warehouse publishes: blocks, growth, drift sensor, schema, plans from messages."""

from __future__ import annotations

import pytest

from brace_common.action_schema import ActionSchema, Step
from brace_common.vocabulary import Block, EntryKind
from sim_bridges.warehouse import warehouse_feed as feed
from sim_bridges.warehouse.warehouse_world import Event, Warehouse, WorldConfig


def test_episode_opens_with_task_and_constraints():
    world = Warehouse(WorldConfig(num_agents=3, seed=1))
    entries = feed.episode_entries(world, 0)
    assert entries[0].kind == EntryKind.TASK and entries[0].block == Block.TASK
    tasks = [e for e in entries[1:] if e.kind == EntryKind.TASK]
    assert len(tasks) == len(world.tasks) + sum(t.giver is not None for t in world.tasks)
    for task in world.tasks:
        assert any(task.obj in e.text and task.dock in e.text for e in tasks)
    assert any(e.block == Block.CONSTRAINTS for e in entries)


def test_history_grows_with_time_and_agents():
    def history(k: int, steps: int) -> int:
        world = Warehouse(WorldConfig(num_agents=k, seed=0))
        for name in world.agents:
            world.set_plan(name, world.oracle_plan(name))
        n = 0
        for _ in range(steps):
            n += sum(e.block == Block.HISTORY for e in feed.step_entries(world, world.step(), 2))
        return n

    assert history(2, 20) > history(2, 10) > 0
    assert history(4, 10) > history(1, 10)


def test_directed_messages_are_coordination_broadcasts_are_history():
    world = Warehouse(WorldConfig(num_agents=2, seed=0))
    events = [Event("agent_0", 1, "message", "agent_0 -> agent_1: box_7 is yours", to="agent_1"),
              Event("agent_1", 1, "message", "agent_1 -> all: blocked on the way to dock_1"),
              Event("supervisor", 1, "message", "cup_3 was moved from shelf_1 to shelf_2"),
              Event("supervisor", 1, "message", "supervisor -> agent_0: box_7 was moved from shelf_1 to shelf_2",
                    to="agent_0")]
    blocks = {e.text: e.block for e in feed.step_entries(world, events, 0)}
    assert blocks[events[0].text] == blocks[events[3].text] == Block.COORDINATION
    assert blocks[events[1].text] == blocks[events[2].text] == Block.HISTORY


def test_a_finished_task_is_a_task_entry_naming_its_agents():
    world = Warehouse(WorldConfig(num_agents=2, seed=0, drift=0.0, grasp_failure=0.0))
    entries = []
    while not world.finished:
        for name in world.agents:
            world.set_plan(name, world.oracle_plan(name))
        entries += feed.step_entries(world, world.step(), 0)
    assert world.success
    done = [e for e in entries if e.kind == "task_done"]
    task = world.tasks[0]
    assert [(e.block, e.agent_id) for e in done] == [(Block.TASK, task.carrier)]
    assert done[0].text == f"task done: {task.obj} delivered at {task.dock} by {task.giver} and {task.carrier}"


def test_drift_sensor_sees_a_moved_object():
    world = Warehouse(WorldConfig(num_agents=1, seed=0, handoff_tasks=0, drift=0.0))
    task = world.tasks[0]
    world.set_plan("agent_0", world.oracle_plan("agent_0"))
    assert feed.tracking_error(world, "agent_0") == 0.0
    old = world.objects[task.obj]
    world.objects[task.obj] = next(s for s in world.shelves if s != old)
    assert feed.tracking_error(world, "agent_0") > 0.0
    report = feed.agent_reports(world)[0]
    assert report.has_goal and report.tracking_error > 0.0


def test_schema_enumerates_the_world():
    world = Warehouse(WorldConfig(num_agents=2))
    schema = feed.action_schema(world)
    assert set(schema["actions"]["move_to"]["target"]["choices"]) == {*world.shelves, *world.docks, *world.parks}
    assert schema["actions"]["handoff"]["to_agent"]["choices"] == ["agent_0", "agent_1"]
    assert schema["actions"]["handoff"]["to_agent"]["not_self"] is True   # a handoff goes to another agent
    handoff = Step("handoff", {"object": "cup_3", "to_agent": "agent_1"})
    assert ActionSchema.from_dict(schema).allows(handoff, "agent_0") and not feed.WAREHOUSE_SKILLS.allows(handoff,
                                                                                                      "agent_1")


def test_plans_from_messages():
    steps = feed.plan_from_steps([("move_to", '{"target": "dock_1"}'), ("wait", "")])
    assert steps == [Step("move_to", {"target": "dock_1"}), Step("wait", {})]
    with pytest.raises(ValueError):
        feed.plan_from_steps([("move_to", "[1, 2]")])


def test_oracle_agreement_compares_first_steps():
    world = Warehouse(WorldConfig(num_agents=1, seed=2, handoff_tasks=0))
    oracle = world.oracle_plan("agent_0")
    assert feed.agrees_with_oracle(world, "agent_0", oracle)
    assert not feed.agrees_with_oracle(world, "agent_0", [Step("wait")])
    # A leading move_to where the agent already stands is a no-op: the next step is what is compared.
    here = feed.place_near(world, world.agents["agent_0"].pos)
    assert here == "park_0"
    assert feed.agrees_with_oracle(world, "agent_0", [Step("move_to", {"target": here}), *oracle])
    assert not feed.agrees_with_oracle(world, "agent_0", [Step("move_to", {"target": here}), Step("wait")])


@pytest.mark.parametrize("raw,reason", [
    ([("move_to", '{"target": ["shelf_0"]}')], "bad_parameter"),       # a list where a place belongs
    ([("move_to", '{"target": ' + "[" * 100 + "]" * 100 + "}")], "deep_parameters_json"),
    ([("move_to", "[1]")], "bad_parameters_json"),
    ([("wait", "{}")] * 65, "long_plan"),
    ([("move to", "{}")], "bad_action"),
])
def test_hostile_plans_are_refused_before_the_world_sees_them(raw, reason):
    from brace_common.validation import InvalidInput

    with pytest.raises(InvalidInput) as err:
        feed.plan_from_steps(raw)
    assert err.value.reason == reason
    assert feed.plan_from_steps([("move_to", '{"target": "shelf_0"}'), ("wait", "")])[0].parameters == {"target": "shelf_0"}


def test_a_lookahead_about_a_recent_state_is_answered_as_it_was_in_time_and_an_older_one_refused():
    """A planner that read the state a step or two late is answered about the state it read."""
    world = Warehouse(WorldConfig(num_agents=2, seed=3, grasp_failure=0.0, drift=0.0))
    for name in world.agents:
        world.set_plan(name, world.oracle_plan(name))
    recent = feed.RecentWorlds(2)
    target = world.oracle_plan("agent_0")[0].parameters["target"]
    step = ("move_to", f'{{"target": "{target}"}}')
    in_time = []
    for t in range(3):
        in_time.append(feed.answer_lookahead(world, 0, 0, t, "agent_0", *step, recent))
        recent.record(0, world)
        world.step()
    assert world.t == 3 and all(p.valid and p.state.step == t + 1 for t, p in enumerate(in_time))
    assert [feed.answer_lookahead(world, 0, 0, t, "agent_0", *step, recent) for t in (1, 2)] == in_time[1:]
    gone = feed.answer_lookahead(world, 0, 0, 0, "agent_0", *step, recent)  # three steps back: not kept
    assert not gone.valid and "nor one of the 2 before it" in gone.reason
    assert not feed.answer_lookahead(world, 0, 1, 2, "agent_0", *step, recent).valid  # another episode
    recent.clear()
    assert not feed.answer_lookahead(world, 0, 0, 2, "agent_0", *step, recent).valid
    assert feed.answer_lookahead(world, 0, 0, 3, "agent_0", *step, feed.RecentWorlds(0)).valid  # the live state
