"""ReCAP's recursion on the call path: π / ρ / reuse calls on a two-level task, what each prompt re-injects, the
per-agent and per-frame window, malformed answers, and the constrained decoder on a tiny model."""

from __future__ import annotations

import json

import pytest
from test_plan_parser import RECAP_SCHEMA

from brace_common.action_schema import Step
from brace_common.counters import Health
from brace_common.vocabulary import Block, CallStatus, Mode, RecapKind, RecapNeed
from brace_memory.system import MemorySystem, MemorySystemConfig, StepOutcome
from erecap_planner.call_path import CallOptions, CallPath, CallRequest, Generated, LocalModel, PlannerCallPath
from erecap_planner.context import ContextBuffer, Entry
from erecap_planner.memory_phase import MemoryUse
from erecap_planner.plan_parser import parse_recap
from erecap_planner.testing import byte_tokenizer, tiny


class ScriptedModel:
    """The model's side of the call path, answering each call with the next scripted text (the prompts kept)."""

    name = "local"
    model_name = "scripted"

    def __init__(self, answers: list[dict]) -> None:
        self.tokenizer = byte_tokenizer()
        self.answers = [json.dumps(a) for a in answers]
        self.prompts: list[str] = []

    def generate(self, prompt, request, use, clock, outcome) -> Generated:
        self.prompts.append(self.tokenizer.decode(prompt.ids))
        outcome.tokens_after = len(prompt.ids)
        return Generated(self.answers.pop(0), 1)

    def health(self) -> Health:
        return Health({"backend": self.name})


def deliver(obj: str = "cup", dock: str = "dock_1") -> dict:
    return {"subtask": "deliver", "parameters": {"object": obj, "dock": dock}}


def act(action: str, **parameters) -> dict:
    return {"action": action, "parameters": parameters}


def setup(answers: list[dict], window: int = 8) -> tuple[CallPath, ScriptedModel, MemorySystem, ContextBuffer]:
    system = MemorySystem(MemorySystemConfig(recursion=True))
    model = ScriptedModel(answers)
    path = CallPath(model, CallOptions(compressor="none", layout="recap", recursion=True), None, RECAP_SCHEMA,
                    MemoryUse(system, 0.25, window))
    buffer = ContextBuffer()
    task = Entry("a", 0, Block.TASK, "bring the cup to dock 1, then wait", "task")
    buffer.add(task)
    system.on_context_entry(task)
    return path, model, system, buffer


def call(path: CallPath, buffer: ContextBuffer, step: int, mode: Mode = Mode.FULL_REPLAN):
    out = path.run(buffer, CallRequest("a", 4000, 60_000, 120_000, int(mode), step))
    assert out.status == CallStatus.OK, out.error
    return out


def outcome(system: MemorySystem, step: int, action: str, success: bool = True) -> None:
    system.on_outcome(StepOutcome("a", step, action, success))


def test_a_two_level_task_runs_pi_pi_reuse_rho_reuse_in_alg_1_order():
    path, model, system, buffer = setup([
        {"think": "deliver first", "subtasks": [deliver(), act("wait")]},
        {"think": "go get it", "subtasks": [act("pick", object="cup"), act("move_to", target="dock_1")]},
        {"think": "delivered", "subtasks": []}])
    first = call(path, buffer, 1)                                 # line 1 at the root; S[0] composite: line 7
    assert first.steps == [] and first.recap.kind == RecapKind.DECOMPOSE and first.recap.depth == 0
    assert (first.recap.need, first.recap.next_depth) == (RecapNeed.DECOMPOSE, 1)
    assert "Decompose the task for a" in model.prompts[0]             # the task is quoted once, in GOALS
    assert "task: bring the cup to dock 1, then wait" in model.prompts[0] and "Decompose 'bring" not in model.prompts[0]

    second = call(path, buffer, 2)                                # line 1 at the child, the parent's T and S in view
    assert "think: deliver first" in model.prompts[1] and "subtasks: [deliver(cup, dock_1)]; wait()" in model.prompts[1]
    assert "Decompose '[deliver(cup, dock_1)]'" in model.prompts[1]
    assert second.steps == [Step("pick", {"object": "cup"}), Step("move_to", {"target": "dock_1"})]
    assert (second.recap.kind, second.recap.depth, second.recap.need) == (RecapKind.DECOMPOSE, 1, RecapNeed.EXECUTE)

    outcome(system, 3, "pick")                                    # lines 4-5, 9: ρ is due
    assert system.recap_need("a").need == RecapNeed.REFINE
    reused = call(path, buffer, 3, Mode.REUSE_SUBPLAN)            # BRACE reuses S[1:]: no model call
    assert len(model.prompts) == 2 and reused.recap.kind == RecapKind.REUSE
    assert reused.steps == [Step("move_to", {"target": "dock_1"})] and reused.tokens_after == 0

    outcome(system, 4, "move_to")
    refined = call(path, buffer, 4)                               # line 10: ρ at the child says it is done
    assert "Refine the remaining subtasks of '[deliver(cup, dock_1)]'" in model.prompts[2]
    assert refined.steps == [] and refined.recap.kind == RecapKind.REFINE
    assert (refined.recap.need, refined.recap.next_depth) == (RecapNeed.REFINE, 0)   # back at the root (line 9)
    assert system.goal_stack("a")[-2:] == ["subtasks: wait()", "done: [deliver(cup, dock_1)] -> done"]

    last = call(path, buffer, 5, Mode.REUSE_SUBPLAN)
    assert last.steps == [Step("wait", {})] and last.recap.next_depth == 0
    health = system.health()
    assert health.values["memory.recap.decompositions"] == 2 and health.values["memory.recap.refinements"] == 1
    assert health.values["memory.recap.reuses"] == 2


def test_a_reuse_call_of_a_frame_not_waiting_for_rho_asks_the_model():
    path, model, _, buffer = setup([{"think": "", "subtasks": [act("wait")]}])
    out = call(path, buffer, 1, Mode.REUSE_SUBPLAN)              # the root has no (T, S) yet: π runs
    assert out.recap.kind == RecapKind.DECOMPOSE and out.steps == [Step("wait", {})] and len(model.prompts) == 1


def test_the_window_is_the_agents_own_history_since_its_frame_opened():
    path, model, system, buffer = setup([{"think": "", "subtasks": [deliver()]},
                                         {"think": "", "subtasks": [act("wait")]}], window=3)
    buffer.add(Entry("a", 0, Block.HISTORY, "a saw the cup before"))
    call(path, buffer, 5)                                        # the child opens at step 5
    for step, agent in ((4, "a"), (5, "b"), (6, "a"), (7, "a"), (8, "a"), (9, "a")):
        buffer.add(Entry(agent, step, Block.HISTORY, f"{agent} event {step}"))
    call(path, buffer, 9)
    prompt = model.prompts[1]
    assert "a event 7" in prompt and "a event 8" in prompt and "a event 9" in prompt
    assert "a event 6" not in prompt                              # beyond the window of 3
    assert "b event 5" not in prompt and "a event 4" not in prompt and "before" not in prompt


@pytest.mark.parametrize("answer, reason", [
    ({"plan": [act("wait")]}, "bad_shape"),
    ({"subtasks": [{"subtask": "fly", "parameters": {}}]}, "unknown_action"),
])
def test_a_malformed_answer_is_a_planner_error_and_leaves_the_frames(answer, reason):
    path, _, system, buffer = setup([answer])
    out = path.run(buffer, CallRequest("a", 4000, 60_000, 120_000, 0, 1))
    assert out.status == CallStatus.PLANNER_ERROR and out.error.startswith(reason) and out.recap is None
    assert system.recap_need("a").need == RecapNeed.DECOMPOSE


def test_a_composite_at_the_deepest_frame_is_a_planner_error():
    system = MemorySystem(MemorySystemConfig(recursion=True, recap_max_depth=1))
    model = ScriptedModel([{"subtasks": [deliver()]}])
    path = CallPath(model, CallOptions(compressor="none", layout="recap", recursion=True), None, RECAP_SCHEMA,
                    MemoryUse(system))
    out = path.run(ContextBuffer(), CallRequest("a", 4000, 60_000, 120_000))
    assert out.status == CallStatus.PLANNER_ERROR and out.error.startswith("too_deep")


def test_recursion_needs_the_recap_layout_and_a_memory_with_recursion():
    from brace_common.config import ConfigError

    with pytest.raises(ConfigError, match="recap_recursion"):
        CallOptions(layout="focus", recursion=True)
    with pytest.raises(ConfigError, match="recap_recursion"):
        CallOptions(layout="recap", recursion=True, decoding="candidates")
    with pytest.raises(ValueError, match="recursion"):
        CallPath(ScriptedModel([]), CallOptions(compressor="none", layout="recap", recursion=True), None, RECAP_SCHEMA,
                 MemoryUse(MemorySystem(MemorySystemConfig())))


@pytest.mark.parametrize("compressor", ["erecap", "recency"])
def test_the_constrained_decoder_answers_every_call_of_a_tiny_model(compressor):
    from erecap_planner.predictor import PredictorBank
    from erecap_planner.pruning import PruneSchedule

    model = tiny("llama")
    system = MemorySystem(MemorySystemConfig(recursion=True, recap_max_depth=2))
    local = LocalModel(model, byte_tokenizer(), PruneSchedule(layers=(1, 3), keep_ratio=0.7),
                       PredictorBank.for_model(model.config, [1, 3]))
    path = PlannerCallPath(local, CallOptions(compressor=compressor, decoding="constrained", layout="recap",
                                              recursion=True, think_tokens=8), RECAP_SCHEMA, MemoryUse(system))
    buffer = ContextBuffer()
    buffer.add(Entry("a", 0, Block.TASK, "bring the cup", "task"))
    system.on_context_entry(buffer.blocks("recap")[0][1][0])
    for step in range(1, 5):
        before = system.recap_need("a")
        out = path.run(buffer, CallRequest("a", 600, 60_000, 120_000, 0, step))
        assert out.status == CallStatus.OK, out.error
        assert out.recap.depth == before.depth
        if before.depth == 1:                                      # the deepest of 2 frames: no composite
            assert not any(s.composite for s in out.recap.subtasks)
        thought, subtasks = parse_recap(out.output_text, RECAP_SCHEMA)
        assert (thought, subtasks) == (out.recap.thought, out.recap.subtasks)
        for done in out.steps:
            system.on_outcome(StepOutcome("a", step, done.action, True))
