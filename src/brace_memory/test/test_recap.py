"""ReCAP Alg. 1 as the frame stack runs it: one test per line of the algorithm, the re-injection, the per-frame
window, the depth bound and durability across a killed process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from brace_common.action_schema import Step, Subtask
from brace_common.vocabulary import RecapNeed
from brace_memory.recap import RecapFrames
from brace_memory.record_index import RecordIndex
from brace_memory.records import RecordKind
from brace_memory.store import MemoryStore


def prim(action: str, **parameters) -> Subtask:
    return Subtask(Step(action, parameters))


def comp(action: str, **parameters) -> Subtask:
    return Subtask(Step(action, parameters), composite=True)


@pytest.fixture
def frames() -> RecapFrames:
    out = RecapFrames()
    out.on_task("cook", "make the meal and eat it", step=0)
    return out


def test_line_1_a_task_waits_for_pi_and_pi_sets_t_and_s(frames):
    assert frames.need("cook").need == RecapNeed.DECOMPOSE
    state = frames.on_plan("cook", 1, "first the potato", [prim("take", object="potato"), prim("eat")])
    assert state.need == RecapNeed.EXECUTE and state.depth == 0
    assert frames.executable("cook") == [Step("take", {"object": "potato"}), Step("eat")]
    assert frames.counts["decompositions"] == 1 and frames.counts["refinements"] == 0


def test_lines_3_to_5_and_9_a_primitive_runs_its_outcome_is_kept_and_s_becomes_s_tail(frames):
    frames.on_plan("cook", 1, "t", [prim("take", object="potato"), prim("eat")])
    state = frames.on_outcome("cook", 2, "take", True, "You take the potato")
    assert state.need == RecapNeed.REFINE
    top = frames.stack("cook")[-1]
    assert [s.step.action for s in top.subtasks] == ["eat"]          # line 9: S[1:]
    assert top.done == ["take(potato) -> ok"]                          # line 5: <T, S, S[0], O>
    assert frames.executable("cook") == []                             # nothing runs while ρ is due


def test_line_10_rho_refines_t_and_s_at_the_same_frame(frames):
    frames.on_plan("cook", 1, "t", [prim("take", object="potato"), prim("eat")])
    frames.on_outcome("cook", 2, "take", False, "The potato is not here")
    state = frames.on_plan("cook", 3, "it is in the kitchen", [prim("go", to="kitchen"), prim("take", object="potato")])
    assert state.need == RecapNeed.EXECUTE and state.depth == 0 and state.opened == 0
    assert frames.stack("cook")[-1].thought == "it is in the kitchen"
    assert frames.stack("cook")[-1].done == ["take(potato) -> failed: The potato is not here"]
    assert frames.counts["refinements"] == 1


def test_brace_reuse_keeps_s_tail_when_rho_is_not_admitted(frames):
    frames.on_plan("cook", 1, "t", [prim("take", object="potato"), prim("eat")])
    frames.on_outcome("cook", 2, "take", True)
    state = frames.reuse("cook", 3)
    assert state.need == RecapNeed.EXECUTE and frames.executable("cook") == [Step("eat")]
    assert frames.counts["reuses"] == 1 and frames.counts["refinements"] == 0


def test_lines_6_7_a_composite_s0_opens_a_child_whose_prompt_holds_the_parents_t_and_s(frames):
    state = frames.on_plan("cook", 1, "two parts", [comp("prepare", object="potato"), prim("eat")])
    assert state.need == RecapNeed.DECOMPOSE and state.depth == 1 and state.opened == 1
    assert frames.executable("cook") == []
    lines = frames.prompt_lines("cook")
    assert lines == ["task: make the meal and eat it", "think: two parts",
                     "subtasks: [prepare(potato)]; eat()", " subtask 1: [prepare(potato)]"]
    frames.on_plan("cook", 2, "slice it", [prim("slice", object="potato")])
    assert frames.executable("cook") == [Step("slice", {"object": "potato"})]
    assert frames.window_since("cook") == 1          # the child's window starts where it opened


def test_line_9_an_empty_s_returns_to_the_parent_with_its_t_and_s_tail_reinjected(frames):
    frames.on_plan("cook", 1, "two parts", [comp("prepare", object="potato"), prim("eat")])
    frames.on_plan("cook", 2, "slice it", [prim("slice", object="potato")])
    frames.on_outcome("cook", 3, "slice", True)
    state = frames.on_plan("cook", 4, "sliced", [])          # ρ at the child: nothing left
    assert state.closed == 1 and state.depth == 0 and state.need == RecapNeed.REFINE
    assert frames.stack("cook")[-1].done == ["[prepare(potato)] -> done"]
    assert frames.prompt_lines("cook")[-2:] == ["subtasks: eat()", "done: [prepare(potato)] -> done"]
    assert frames.window_since("cook") == 0          # back to the root's window
    frames.reuse("cook", 5)
    assert frames.executable("cook") == [Step("eat")]


def test_line_2_the_root_closes_when_its_s_is_empty_and_reuse_of_an_empty_s_closes_a_child(frames):
    frames.on_plan("cook", 1, "two parts", [comp("prepare", object="potato")])
    frames.on_plan("cook", 2, "slice it", [prim("slice", object="potato")])
    frames.on_outcome("cook", 3, "slice", True)
    assert frames.reuse("cook", 4).closed == 1       # ρ not admitted, S empty: the child closes
    state = frames.reuse("cook", 5)                  # and the root's S is empty too
    assert state.closed == 1 and state.need == RecapNeed.NOTHING and frames.stack("cook") == []
    assert frames.counts["frames_opened"] == 2 and frames.counts["frames_closed"] == 2


def test_an_outcome_of_another_step_is_counted_and_changes_nothing(frames):
    frames.on_plan("cook", 1, "t", [prim("take", object="potato")])
    assert frames.on_outcome("cook", 2, "eat", True).need == RecapNeed.EXECUTE
    assert frames.counts["outcomes_unmatched"] == 1
    assert [s.step.action for s in frames.stack("cook")[-1].subtasks] == ["take"]


def test_the_deepest_frame_refuses_composites_before_changing_anything():
    frames = RecapFrames(max_depth=2)
    frames.on_task("a", "task")
    frames.on_plan("a", 1, "", [comp("part", n="1")])
    with pytest.raises(ValueError, match="at most 2 frames"):
        frames.on_plan("a", 2, "", [prim("x"), comp("part", n="2")])
    assert frames.need("a").need == RecapNeed.DECOMPOSE and frames.stack("a")[-1].subtasks == []


def test_a_repeated_task_keeps_the_stack_and_a_new_one_starts_over(frames):
    frames.on_plan("cook", 1, "t", [comp("prepare", object="potato")])
    assert frames.on_task("cook", "make the meal  and eat it").depth == 1
    state = frames.on_task("cook", "clean up", step=9)
    assert state.need == RecapNeed.DECOMPOSE and state.depth == 0 and frames.prompt_lines("cook") == ["task: clean up"]


def test_stacks_are_per_agent(frames):
    frames.on_task("b", "other task")
    frames.on_plan("cook", 1, "t", [comp("prepare", object="potato")])
    assert frames.need("b").need == RecapNeed.DECOMPOSE and frames.need("b").depth == 0
    assert frames.prompt_lines("b") == ["task: other task"]


def test_the_prompt_shows_the_newest_done_subtasks_and_counts_older_ones(frames):
    frames.on_plan("cook", 1, "", [prim("go", to=str(i)) for i in range(7)])
    for i in range(6):
        frames.on_outcome("cook", 2 + i, "go", True)
        frames.reuse("cook", 2 + i)
    lines = frames.prompt_lines("cook")
    assert "(2 earlier subtasks done)" in lines and lines[-1] == "done: go(5) -> ok"


def test_the_stack_survives_a_killed_process(tmp_path):
    path = tmp_path / "memory.sqlite"
    script = textwrap.dedent(f"""
        import os
        from brace_common.action_schema import Step, Subtask
        from brace_memory.recap import RecapFrames
        from brace_memory.record_index import RecordIndex
        from brace_memory.store import MemoryStore
        frames = RecapFrames(RecordIndex(MemoryStore({str(path)!r})))
        frames.on_task("cook", "make the meal")
        frames.on_plan("cook", 1, "two parts", [Subtask(Step("prepare", {{"object": "potato"}}), True),
                                                 Subtask(Step("eat", {{}}))])
        frames.on_plan("cook", 2, "slice it", [Subtask(Step("slice", {{"object": "potato"}}))])
        os.kill(os.getpid(), 9)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == -9, done.stderr
    resumed = RecapFrames(RecordIndex(MemoryStore(path)))
    assert resumed.need("cook").depth == 1
    assert resumed.executable("cook") == [Step("slice", {"object": "potato"})]
    assert resumed.prompt_lines("cook")[:3] == ["task: make the meal", "think: two parts",
                                                "subtasks: [prepare(potato)]; eat()"]
    resumed.forget()
    assert RecapFrames(RecordIndex(MemoryStore(path))).stack("cook") == []


def test_an_unreadable_stack_is_counted_and_starts_empty(tmp_path):
    from brace_memory.records import MemoryRecord

    store = RecordIndex(MemoryStore(tmp_path / "m.sqlite"))
    store.put(MemoryRecord("cook", RecordKind.FRAME, "stack", {"task": "x", "frames": [{"goal": "x"}]}))
    frames = RecapFrames(store)
    assert frames.stack("cook") == [] and frames.counts["stacks_unreadable"] == 1
