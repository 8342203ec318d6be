"""The memory modules without ROS: ReCAP's goal stack, OmniAct's episodic and reflective memory, RAG, composition."""

from __future__ import annotations

import pytest

from brace_common.action_schema import Step
from brace_common.vocabulary import Block, Failure, Mode
from brace_memory.context_tree import ContextTree
from brace_memory.episodic import EpisodicMemory, record_line
from brace_memory.rag import load_passages, ranked_by_relevance
from brace_memory.records import MemoryRecord, RecordKind
from brace_memory.reflective import PREEMPTION, Prior, ReflectiveMemory, constraint_keys
from brace_memory.relevance import bm25, words
from brace_memory.store import MemoryStore
from brace_memory.system import MemorySystem, MemorySystemConfig, StepOutcome, check_modules

GOTO, PICK, PLACE = Step("move_to", {"target": "shelf_3"}), Step("pick", {"object": "box_7"}), \
    Step("place", {"object": "box_7", "target": "dock_2"})


def chars(lines: list[str]) -> list[int]:
    return [len(line) + 1 for line in lines]


def test_full_replan_decomposes_and_outcomes_advance_the_current_step():
    tree = ContextTree()
    tree.on_task("agent_0", "agent_0 must deliver box_7 to dock_2.")
    tree.on_plan("agent_0", 3, Mode.FULL_REPLAN, [GOTO, PICK, PLACE])
    tree.on_outcome("agent_0", "move_to", True)
    stack = tree.goal_stack("agent_0")
    assert stack[0] == "task: agent_0 must deliver box_7 to dock_2."
    assert stack[1].startswith("plan (t=3, full_replan): move_to(target=shelf_3) [done]; pick(object=box_7)")
    assert "now: pick(object=box_7)" in stack and "remaining: place(object=box_7, target=dock_2)" in stack


def test_partial_replan_after_a_failure_backtracks_and_the_repair_returns_to_the_parent():
    tree = ContextTree()
    tree.on_plan("agent_0", 3, Mode.FULL_REPLAN, [GOTO, PICK, PLACE])
    tree.on_outcome("agent_0", "move_to", True)
    tree.on_outcome("agent_0", "pick", False, "grasp slipped")
    tree.on_plan("agent_0", 6, Mode.PARTIAL_REPLAN, [GOTO, PICK])
    stack = tree.goal_stack("agent_0")
    assert "pick(object=box_7) [failed: grasp slipped]" in stack[0]  # the parent keeps its failed step
    assert stack[1].startswith(" repair (t=6, partial_replan): move_to(target=shelf_3); pick(object=box_7)")
    assert stack[-1] == "last rationale: repair after pick(object=box_7) failed (grasp slipped)"
    tree.on_outcome("agent_0", "move_to", True)
    tree.on_outcome("agent_0", "pick", True)
    stack = tree.goal_stack("agent_0")
    assert len([line for line in stack if "(t=" in line]) == 1  # the repair finished: back to the root
    assert "now: place(object=box_7, target=dock_2)" in stack and tree.counts["repairs_done"] == 1


def test_reuse_refines_the_remaining_steps_and_depth_bounds_the_levels():
    tree = ContextTree(depth=2)
    tree.on_plan("a", 1, Mode.FULL_REPLAN, [GOTO, PICK, PLACE])
    tree.on_outcome("a", "move_to", True)
    tree.on_plan("a", 2, Mode.REUSE_SUBPLAN, [PICK])
    assert [s.action for s in tree.trees["a"].levels[0].steps] == ["move_to", "pick"]
    for made_at in (3, 4, 5):
        tree.on_outcome("a", tree.current_step("a").action, False, "slip")
        tree.on_plan("a", made_at, Mode.PARTIAL_REPLAN, [GOTO, PICK])
    assert len(tree.trees["a"].levels) == 2 and tree.trees["a"].levels[-1].made_at == 5


def test_an_agent_id_never_becomes_a_path():
    with pytest.raises(ValueError, match="not an agent id"):
        ContextTree().on_task("agent_0/../../x", "escape")
    with pytest.raises(ValueError, match="not an agent id"):
        MemoryRecord("../x", RecordKind.NOTE, "k")
    with pytest.raises(ValueError, match="not an agent id"):
        MemoryRecord("agent_0\n", RecordKind.NOTE, "k")  # matched whole: no trailing newline


def test_episodic_memory_folds_a_segment_at_each_boundary_into_one_record():
    memory = EpisodicMemory(MemoryStore(None))
    memory.on_entry("agent_0", 0, "task", "agent_0 must deliver box_7 to dock_2.")
    for step in range(1, 6):
        memory.on_entry("agent_0", step, "observation", f"at shelf_3 step {step}, empty-handed")
    memory.on_entry("agent_0", 6, "action_outcome", "pick(object=box_7) succeeded")
    assert memory.on_entry("agent_0", 7, "failure_trace", "place(object=box_7) failed: dock_2 closed") is not None
    (record,) = memory.records("agent_0")
    assert (record.first_step, record.last_step, record.fields["topic"]) == (1, 7, "failure")
    line = record_line(record)
    assert line.startswith("[t=1-7 failure] request: agent_0 must deliver box_7 to dock_2.")
    assert "did: pick(object=box_7) succeeded" in line and "outcome: place(object=box_7) failed: dock_2 closed" in line
    assert "step 1" in line and "step 5" in line and "step 3" not in line  # first and last observation only
    assert memory.folded_through("agent_0") == 7 and memory.counts["entries_folded"] == 7


def test_a_handoff_message_and_a_plan_change_are_boundaries():
    system = MemorySystem(MemorySystemConfig(["episodic"]))
    system.on_entry("agent_1", 2, "observation", "at dock_1")
    system.on_entry("agent_1", 3, "message", "agent_1 hands box_7 to agent_2", frozenset({"agent_1", "agent_2"}))
    system.on_entry("agent_1", 4, "observation", "at dock_1, empty-handed")
    system.on_plan("agent_1", 5, Mode.FULL_REPLAN, [GOTO])
    topics = [r.fields["topic"] for r in system.episodic.records("agent_1")]
    assert topics == ["handoff", "plan change"]


def test_episodic_keys_continue_after_a_restart(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    EpisodicMemory(store).boundary("a", 1, "x") or None
    first = EpisodicMemory(store)
    first.on_entry("a", 1, "observation", "one")
    first.boundary("a", 1, "plan change")
    second = EpisodicMemory(store)  # a new planner process on the same store
    second.on_entry("a", 2, "observation", "two")
    second.boundary("a", 2, "plan change")
    assert [r.key for r in store.records("a", RecordKind.EPISODIC)] == ["e000000001", "e000000002"]


def test_reflective_memory_counts_repeated_failures_in_one_record_with_its_strategy():
    memory = ReflectiveMemory(MemoryStore(None))
    for step in (4, 9):
        memory.on_failure("agent_0", step, "pick", {"object": "box_7"}, Failure.GRASP.label, "closed on nothing",
                          location="shelf_3")
    (record,) = memory.store.records("agent_0", RecordKind.FAILURE)
    assert (record.count, record.first_step, record.last_step) == (2, 4, 9)
    assert record.fields["object"] == "box_7" and "re-grasp" in record.fields["strategy"]
    memory.on_failure("agent_0", 10, "move_to", {"target": "dock_2"}, PREEMPTION, "verifier: box fell")
    lines = memory.ranked("agent_0", "pick box_7 from shelf_3", 11)
    assert lines[0].startswith("failure x2 (t=4..9): pick(object=box_7) at shelf_3 - grasp")
    assert "preemption" in lines[1] and "re-observe" in lines[1]


def test_priors_are_retrieved_by_key_before_scored_records():
    priors = (Prior("box_7 is fragile: push it, never grasp it", frozenset({"box_7"})),
              Prior("dock_3 closes at step 30", frozenset({"dock_3"})))
    memory = ReflectiveMemory(MemoryStore(None), priors)
    memory.note("agent_0", 1, "shelf_9 is blocked by a pallet", importance=0.2)
    lines = memory.ranked("agent_0", "deliver box_7 to dock_2", 2)
    assert lines == ["box_7 is fragile: push it, never grasp it", "note: shelf_9 is blocked by a pallet"]


def test_a_constraint_entry_becomes_one_team_wide_record_that_a_repeat_updates():
    system = MemorySystem(MemorySystemConfig(["episodic", "reflective"]))
    rule = "dock_2 closes at step 30: from then on deliver to dock_5."
    system.on_entry("supervisor", 4, "constraint", rule)
    system.on_entry("supervisor", 9, "constraint", "  dock_2 closes at step 30:\n from then on deliver to dock_5. ")
    (record,) = system.store.records("supervisor", RecordKind.CONSTRAINT)
    assert (record.count, record.first_step, record.last_step, record.fields["text"]) == (2, 4, 9, rule)
    system.on_entry("agent_1", 12, "task", "agent_1 must deliver box_4 to dock_2 or dock_5.")
    got = system.retrieve("agent_1", system.query("agent_1", "at park_1, holding box_4"), 200, 1000, chars)
    assert got.lines[0] == f"constraint x2 (t=4, from supervisor): {rule}"  # another agent's call reads it
    assert got.by_module["reflective"] == 1


def test_constraints_naming_the_call_s_ids_come_first_and_one_in_the_prompt_is_not_repeated():
    memory = ReflectiveMemory(MemoryStore(None))
    memory.note("agent_0", 99, "the forklift on aisle 3 is charging", importance=1.0)
    memory.on_constraint("supervisor", 1, "box_3 is fragile: never place it yourself, hand it to agent_2.")
    memory.on_constraint("supervisor", 2, "shelf_4 is under maintenance from step 40.")
    lines = memory.ranked("agent_0", "agent_0 must bring box_3 to dock_1", 100)
    assert "box_3 is fragile" in lines[0]  # key match (box_3) before the newer, more important note
    assert lines[1].startswith("note:") and "shelf_4" in lines[2]
    held = memory.ranked("agent_0", "box_3", 100, in_prompt=["box_3 is fragile: never place it yourself, "
                                                            "hand it to agent_2."])
    assert not any("box_3" in line for line in held)
    assert constraint_keys("shelf_4 is under maintenance from step 40.") == {"shelf_4"}  # a step is no key


def test_constraints_outlive_the_run_and_are_kept_only_where_a_module_reads_them(tmp_path):
    episodic = MemorySystem(MemorySystemConfig(["episodic"]))
    episodic.on_entry("supervisor", 1, "constraint", "dock_2 closes at step 30.")
    assert episodic.store.records("supervisor", RecordKind.CONSTRAINT) == []
    system = MemorySystem(MemorySystemConfig(["reflective"]), MemoryStore(tmp_path / "m.sqlite"))
    system.on_entry("supervisor", 1, "constraint", "dock_2 closes at step 30.")
    system.start_episode()
    system.store.close()
    again = MemorySystem(MemorySystemConfig(["rag_memory"]), MemoryStore(tmp_path / "m.sqlite"))  # the next run
    assert again.retrieve("agent_0", "deliver to dock_2", 50, 1000, chars).lines == [
        "constraint (t=1, from supervisor): dock_2 closes at step 30."]


def test_bm25_ranks_by_shared_words_and_keeps_ids_whole():
    assert words("Deliver box_7 to the dock_2.") == ["deliver", "box_7", "dock_2"]
    scores = bm25("box_7 dock_2", ["box_7 sits on shelf_3", "dock_2 closes at noon, box_7 goes there", "nothing"])
    assert scores[1] == 1.0 and 0 < scores[0] < 1 and scores[2] == 0
    assert ranked_by_relevance("dock_2", ["a", "dock_2 is east", "b"]) == ["dock_2 is east"]


def test_a_corpus_file_loads_and_a_malformed_one_names_the_passage(tmp_path):
    good = tmp_path / "corpus.yaml"
    good.write_text("- text: 'pick needs an empty gripper'\n  keys: [pick]\n- 'docks close at night'\n")
    assert [p.text for p in load_passages(good)] == ["pick needs an empty gripper", "docks close at night"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("- text: ''\n")
    with pytest.raises(ValueError, match="passage 0"):
        load_passages(bad)


def test_retrieval_fills_the_cap_in_module_priority_and_never_exceeds_it():
    corpus = [Prior("dock_2 is on the east wall", frozenset()), Prior("pallets block shelf_9", frozenset())]
    system = MemorySystem(MemorySystemConfig(["episodic", "reflective", "rag_static", "rag_memory"], max_lines=4),
                          corpus=corpus)
    system.on_entry("agent_0", 0, "task", "agent_0 must deliver box_7 to dock_2.")
    system.on_plan("agent_0", 1, Mode.FULL_REPLAN, [GOTO, PICK, PLACE])
    system.on_entry("agent_0", 2, "action_outcome", "move_to(target=shelf_3) succeeded")
    system.on_outcome(StepOutcome("agent_0", 2, "move_to", True))
    system.on_outcome(StepOutcome("agent_0", 3, "pick", False, "slipped", Failure.DROP_SLIP.value))
    system.on_entry("agent_0", 3, "failure_trace", "pick(object=box_7) failed: slipped")
    query = system.query("agent_0", "at shelf_3, empty-handed")
    assert "pick(object=box_7)" in query and "deliver box_7" in query
    got = system.retrieve("agent_0", query, 4, 10_000, chars)
    assert got.by_module == {"reflective": 1, "episodic": 1, "rag_static": 1}  # rag_memory: all already in
    assert got.lines[0].startswith("failure (t=3..3): pick(object=box_7)")
    assert got.tokens == sum(chars(got.lines))
    small = system.retrieve("agent_0", query, 4, 200, chars)
    assert small.tokens <= 200 and small.left_out > 0
    assert system.retrieve("agent_0", query, 4, 0, chars).lines == []


def test_unknown_or_repeated_modules_are_rejected():
    with pytest.raises(ValueError, match="'omniact' is not a memory module"):
        check_modules(["omniact"])
    with pytest.raises(ValueError, match="twice"):
        check_modules(["episodic", "episodic"])


def test_an_episode_start_keeps_stored_records_and_drops_goal_stacks(tmp_path):
    system = MemorySystem(MemorySystemConfig(["reflective"]), MemoryStore(tmp_path / "m.sqlite"))
    system.on_plan("a", 1, Mode.FULL_REPLAN, [PICK])
    system.on_outcome(StepOutcome("a", 2, "pick", False, "slipped", Failure.DROP_SLIP.value))
    system.start_episode()
    assert system.goal_stack("a") == []
    system.store.close()
    again = MemorySystem(MemorySystemConfig(["reflective"]), MemoryStore(tmp_path / "m.sqlite"))  # the next run
    assert "pick(object=box_7)" in again.retrieve("a", "pick box_7", 3, 1000, chars).lines[0]


def test_episodic_retrieval_reads_the_current_episode_and_rag_memory_every_episode(tmp_path):
    system = MemorySystem(MemorySystemConfig(["episodic", "rag_memory"]), MemoryStore(tmp_path / "m.sqlite"))
    system.on_entry("a", 3, "action_outcome", "picked box_7 at shelf_2")
    system.on_entry("a", 4, "task_done", "delivered box_7")
    assert system.retrieve("a", "box_7", 5, 1000, chars).by_module == {"episodic": 1}
    system.start_episode()  # steps start again: t=3-4 would read as this episode's
    got = system.retrieve("a", "box_7", 5, 1000, chars)
    assert got.by_module == {"rag_memory": 1} and "delivered box_7" in got.lines[0]
    system.on_entry("a", 2, "failure_trace", "pick cup_1 failed")
    got = system.retrieve("a", "cup_1", 5, 1000, chars)
    assert got.by_module["episodic"] == 1 and "cup_1" in got.lines[0]
    system.store.close()
    again = MemorySystem(MemorySystemConfig(["episodic"]), MemoryStore(tmp_path / "m.sqlite"))  # the next run: a new episode
    assert again.retrieve("a", "cup_1", 5, 1000, chars).lines == []


def test_without_modules_only_the_goal_stack_is_kept_and_nothing_is_written():
    system = MemorySystem(MemorySystemConfig([]))
    system.on_entry("a", 1, "failure_trace", "pick failed")
    system.on_plan("a", 2, Mode.FULL_REPLAN, [PICK])
    system.on_outcome(StepOutcome("a", 3, "pick", False, "slipped", Failure.DROP_SLIP.value))
    assert system.store.records("a") == [] and not system.retrieving()
    assert "pick(object=box_7) [failed: slipped]" in system.goal_stack("a")[0]


def test_goal_stack_shows_the_newest_done_steps_and_keeps_the_task_across_a_part_done():
    from brace_memory.context_tree import MAX_DONE_SHOWN, ContextTree

    tree = ContextTree()
    tree.on_task("a", "cook the meal")
    tree.on_plan("a", 0, Mode.FULL_REPLAN, [Step("command", {"text": "look"})])
    for i in range(MAX_DONE_SHOWN + 3):
        tree.on_outcome("a", "command", True)
        tree.on_plan("a", i + 1, Mode.REUSE_SUBPLAN, [Step("command", {"text": f"go {i}"})])
    stack = tree.goal_stack("a")
    plan = next(line for line in stack if line.startswith("plan"))
    assert "(3 earlier steps done)" in plan and plan.count("[done]") == MAX_DONE_SHOWN
    assert f"now: command(text=go {MAX_DONE_SHOWN + 2})" in stack or any(
        line.startswith("now:") and f"go {MAX_DONE_SHOWN + 2}" in line for line in stack)
    tree.on_task_done("a")
    assert tree.goal_stack("a")[0] == "task: cook the meal"
    assert not any(line.startswith("plan") for line in tree.goal_stack("a"))


def test_a_constraint_stated_for_an_agent_stays_with_its_task_in_the_goal_stack():
    from brace_memory.context_tree import MAX_CONSTRAINTS

    system = MemorySystem(MemorySystemConfig([]))
    system.on_entry("player", 0, "task", "cook a meal")
    system.on_entry("player", 3, "constraint", "recipe: ingredients: carrot;\n directions: slice the carrot")
    system.on_plan("player", 4, Mode.FULL_REPLAN, [PICK])
    stack = system.goal_stack("player")
    assert stack[:2] == ["task: cook a meal", "must: recipe: ingredients: carrot; directions: slice the carrot"]
    for n in range(MAX_CONSTRAINTS + 1):
        system.on_entry("player", 5 + n, "constraint", f"rule {n}")
    system.on_entry("player", 9, "constraint", "rule 1")  # a repeat moves up, not twice
    assert MAX_CONSTRAINTS == 2
    assert [line for line in system.goal_stack("player") if line.startswith("must: ")] == ["must: rule 2",
                                                                                         "must: rule 1"]
    system.on_entry("player", 0, "constraint", "one command per step", block=Block.CONSTRAINTS)
    assert "must: one command per step" not in system.goal_stack("player")  # a standing rule: every prompt has it
    system.start_episode()
    assert system.goal_stack("player") == []


def test_a_constraint_the_goal_stack_shows_is_not_retrieved_again():
    system = MemorySystem(MemorySystemConfig(["reflective"]))
    rule = "recipe: ingredients: carrot; directions: slice the carrot, roast the carrot, prepare meal"
    system.on_entry("player", 3, "constraint", rule)
    assert system.goal_constraints("player") == [rule]
    assert system.retrieve("player", "carrot", 4, 1000, chars).lines == [f"constraint (t=3, from player): {rule}"]
    assert system.retrieve("player", "carrot", 4, 1000, chars, system.goal_constraints("player")).lines == []


def test_a_state_snapshot_is_no_episodic_observation():
    system = MemorySystem(MemorySystemConfig(["episodic"]))
    system.on_entry("a", 1, "observation", "at park_1, empty-handed", block=Block.STATE)
    system.on_entry("a", 2, "observation", "shelf_3 audit: 12 items", block=Block.HISTORY)
    system.on_entry("a", 3, "action_outcome", "picked box_7")
    system.on_entry("a", 4, "task_done", "delivered box_7")
    record = system.episodic.records("a")[0]
    assert record.fields["observations"][0] == "shelf_3 audit: 12 items" and "park_1" not in system.line(record)


def test_health_reports_what_a_planner_publishes_and_a_misspelt_counter_fails():
    system = MemorySystem(MemorySystemConfig(["episodic", "reflective"]))
    system.on_entry("agent_0", 1, "task", "agent_0 must deliver box_7 to dock_2.")
    system.tree.on_task("agent_0", "agent_0 must deliver box_7 to dock_2.")
    system.tree.on_plan("agent_0", 1, Mode.FULL_REPLAN, [GOTO, PICK])
    system.on_entry("agent_0", 2, "failure_trace", "move_to(target=shelf_3) failed: blocked")
    values = system.health().values
    assert values["memory.retrievals"] == 0 and values["memory.tree.plans"] == 1
    assert values["memory.store.written"] >= 1 and not any(k.startswith("memory.summaries.") for k in values)
    assert system.episodic.health("episodic.").values == {"episodic.records": 1, "episodic.entries_folded": 1}
    assert set(system.reflective.health().values) == {"failures", "notes", "constraints"}
    with pytest.raises(KeyError):
        system.counts["retrieval"] += 1
