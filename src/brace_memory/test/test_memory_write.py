"""A plan's explicit memory write (store_memory): the schema's skill, the split, the note reflective memory keeps."""

from __future__ import annotations

import pytest

from brace_common.action_schema import ActionSchema, PlanError, Step
from brace_memory.memory_write import MEMORY_WRITE_ACTION, split_memory_writes, with_memory_write
from brace_memory.reflective import MAX_NOTE_CHARS
from brace_memory.system import MemorySystem, MemorySystemConfig

WORLD = {"kinds": {"arm": ["pick"], "base": ["move_to"]},
         "actions": {"pick": {"object": {"choices": ["cup_3"]}}, "move_to": {"target": {"type": "string"}}}}


def chars(lines: list[str]) -> list[int]:
    return [len(line) + 1 for line in lines]


def test_the_skill_joins_every_kind_and_is_validated_like_any_step():
    schema = with_memory_write(ActionSchema.from_dict(WORLD))
    assert schema.actions_of("arm") == ("pick", MEMORY_WRITE_ACTION)
    assert schema.actions_of("base") == ("move_to", MEMORY_WRITE_ACTION)
    plan = schema.check_plan([{"action": "store_memory", "parameters": {"text": "cup_3 slips when wet"}},
                              {"action": "pick", "parameters": {"object": "cup_3"}}], kind="arm")
    assert [s.action for s in plan] == ["store_memory", "pick"]
    with pytest.raises(PlanError, match="store_memory.text must be a string"):
        schema.check_plan([{"action": "store_memory", "parameters": {"text": 3}}])
    with pytest.raises(PlanError, match="needs 'text'"):
        schema.check_plan([{"action": "store_memory", "parameters": {}}])
    assert any(s["properties"]["action"]["const"] == MEMORY_WRITE_ACTION
               for s in schema.json_schema()["properties"]["plan"]["items"]["anyOf"])


def test_a_world_with_its_own_store_memory_skill_is_refused():
    schema = with_memory_write(ActionSchema.from_dict(WORLD))
    with pytest.raises(ValueError, match="already has a skill 'store_memory'"):
        with_memory_write(schema)


def test_the_split_keeps_the_steps_in_order_and_drops_empty_notes():
    steps = [Step("store_memory", {"text": "first"}), Step("pick", {"object": "cup_3"}),
             Step("store_memory", {"text": "  "}), Step("move_to", {"target": "dock_2"}),
             Step("store_memory", {"text": "second"})]
    keep, notes = split_memory_writes(steps)
    assert keep == [steps[1], steps[3]] and notes == ["first", "second"]
    assert split_memory_writes([]) == ([], [])


def test_a_note_is_kept_for_the_agent_and_retrieved_by_its_next_calls():
    system = MemorySystem(MemorySystemConfig(["reflective"]))
    assert system.on_note("agent_0", 5, "dock_2 jams when two agents queue; use dock_1 " + "x" * 400)
    (note,) = system.store.records("agent_0", "note")
    assert len(note.fields["text"]) == MAX_NOTE_CHARS and note.first_step == 5
    got = system.retrieve("agent_0", "deliver box_7 to dock_2", 9, 10_000, chars)
    assert any("dock_2 jams when two agents queue" in line for line in got.lines)
    assert system.store.records("agent_1", "note") == []


def test_a_note_without_a_module_that_reads_it_is_dropped_and_counted():
    system = MemorySystem(MemorySystemConfig(["episodic"]))
    assert not system.on_note("agent_0", 5, "dock_2 jams")
    assert system.counts["notes_dropped"] == 1 and system.store.records("agent_0", "note") == []
