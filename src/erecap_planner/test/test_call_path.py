"""The call path on a tiny model: phases, budgets, deadline and cancellation."""

from __future__ import annotations

import time
from typing import Optional

import pytest
from test_context import buffer
from test_plan_parser import SCHEMA

from brace_common.action_schema import ActionSchema, Step
from brace_common.config import ConfigError
from brace_common.vocabulary import Block, CallStatus, Failure, Mode, Predicate
from brace_common.world_state import TASK_LOST, TASK_TYPE, Entity, Relation, WorldState
from brace_memory.lookahead import Projection
from brace_memory.system import MemorySystem, MemorySystemConfig, StepOutcome
from erecap_planner.call_path import CallOptions, CallPath, CallRequest, LocalModel, PlannerCallPath, json_object_closed
from erecap_planner.context import ContextBuffer, ContextLimits, Entry
from erecap_planner.memory_phase import MemoryUse
from erecap_planner.predictor import PredictorBank
from erecap_planner.pruning import PruneSchedule
from erecap_planner.testing import KINDS, byte_tokenizer, tiny
from erecap_planner.veto import VETOED_PREFIX

PHASES = ["context_compress", "retrieve", "prefill", "decode", "parse"]


def path(compressor: str, memory: Optional[MemoryUse] = None, **options) -> CallPath:
    model = tiny("llama")
    schedule = PruneSchedule(layers=(1, 3), keep_ratio=0.7)
    local = LocalModel(model, byte_tokenizer(), schedule, PredictorBank.for_model(model.config, [1, 3]))
    return PlannerCallPath(local, CallOptions(compressor=compressor, max_new_tokens=12, **options), SCHEMA, memory)


@pytest.mark.parametrize("compressor", ["erecap", "none", "random", "recency", "summary"])
def test_phases_and_budget(compressor):
    seen = []
    out = path(compressor).run(buffer(30), CallRequest("a", token_budget=600, slo_ms=60_000, hard_deadline_ms=120_000),
                               on_phase=lambda p, ms: seen.append(p))
    assert [p.phase for p in out.phases] == PHASES == seen
    assert out.tokens_before > 600
    if compressor == "none":
        assert out.tokens_after == out.tokens_before
    else:
        assert out.tokens_after <= 600
    compress = out.phases[0]
    assert (compress.tokens_in, compress.tokens_out) == (out.tokens_before, out.tokens_after)
    # A random tiny model does not write a plan: a counted planner error, no steps, no exception.
    assert out.status == CallStatus.PLANNER_ERROR and out.steps == [] and out.error
    assert out.latency_ms >= sum(p.duration_ms for p in out.phases) * 0.99
    assert out.slo_met


def test_hard_deadline_stops_the_call():
    out = path("erecap").run(buffer(30), CallRequest("a", 600, slo_ms=0.5, hard_deadline_ms=1.0))
    assert out.status == CallStatus.DEADLINE and out.steps == [] and not out.slo_met
    assert "deadline" in out.error


def test_queue_wait_counts_in_latency_and_uses_up_the_deadline():
    now = time.monotonic()
    out = path("none").run(buffer(30), CallRequest("a", 600, 60_000, 120_000), queued_at=now - 0.25)
    assert out.phases[0].phase == "queue" and out.phases[0].duration_ms >= 250
    assert [p.phase for p in out.phases[1:]] == PHASES
    assert out.latency_ms >= sum(p.duration_ms for p in out.phases) * 0.99 >= 250
    late = path("none").run(buffer(30), CallRequest("a", 600, slo_ms=100, hard_deadline_ms=200),
                            queued_at=time.monotonic() - 0.3)
    assert late.status == CallStatus.DEADLINE and late.steps == [] and not any(p.phase == "prefill" for p in late.phases)


def test_cancel_stops_the_call():
    out = path("recency").run(buffer(30), CallRequest("a", 600, 60_000, 120_000), cancelled=lambda: True)
    assert out.status == CallStatus.CANCELLED and out.steps == []


def memory_use(share: float = 0.25, modules=("reflective",), layout_window: int = 8) -> MemoryUse:
    system = MemorySystem(MemorySystemConfig(modules))
    system.on_plan("a", 1, Mode.FULL_REPLAN, [Step("move_to", {"target": "shelf_1"})])
    system.on_outcome(StepOutcome("a", 2, "move_to", False, "blocked by agent b", Failure.COLLISION.value))
    return MemoryUse(system, share, layout_window)


@pytest.mark.parametrize("compressor", ["erecap", "recency", "summary"])
def test_retrieved_memory_counts_inside_the_budget(compressor):
    p = path(compressor, memory=memory_use(0.4))
    out = p.run(buffer(30), CallRequest("a", 600, 60_000, 120_000))
    compress, retrieve = out.phases[0], out.phases[1]
    assert 0 < retrieve.tokens_out <= 240  # 40% of B_t
    assert out.tokens_after <= 600  # memory included: the call is never larger than the controller allowed
    if compressor != "erecap":
        assert compress.tokens_out <= 600 - 240
        assert out.tokens_after == compress.tokens_out + retrieve.tokens_out


def test_memory_lines_are_spliced_before_the_request():
    p = path("recency", memory=memory_use(0.5))
    seen = []
    p.compressor.compress = (lambda original: lambda ctx, budget, **kw: seen.append(budget) or original(
        ctx, budget, **kw))(p.compressor.compress)
    out = p.run(buffer(5), CallRequest("a", 10_000, 60_000, 120_000))
    assert seen == [5_000]  # the compressor gets B_t minus memory's reserve
    assert out.tokens_after == out.tokens_before + out.phases[1].tokens_out


def test_a_constraint_in_the_constraints_block_is_not_retrieved_again():
    rule = "shelf_1 is closed for maintenance."
    memory = memory_use(0.5, modules=("episodic", "reflective"))
    held = buffer(5)
    held.add(Entry("supervisor", 0, Block.CONSTRAINTS, rule, "constraint"))
    memory.system.on_entry("supervisor", 0, "constraint", rule)
    p = path("recency", memory=memory)
    request = CallRequest("a", 10_000, 60_000, 120_000)
    ids, _ = p.prompt(held, request)
    assert p.tokenizer.decode(ids).count(rule) == 1  # the block's; not again in MEMORY
    history = buffer(5)
    history.add(Entry("supervisor", 0, Block.HISTORY, rule, "constraint"))
    memory.system.on_entry("supervisor", 0, "task_done", "briefing done")  # folds the history entry away
    text = p.tokenizer.decode(p.prompt(history, request)[0])
    assert text.count(rule) == 1 and text.index(rule) > text.index("MEMORY:")


def test_a_call_without_memory_reserves_nothing():
    p = path("recency", memory=memory_use(0.5))
    out = p.run(buffer(30), CallRequest("a", 600, 60_000, 120_000, memory=False))
    assert out.phases[1].tokens_out == 0 and out.phases[0].tokens_out == 600


def test_json_object_closed():
    assert not json_object_closed('{"plan": [{"action": "a"')
    assert json_object_closed('text {"plan": [{"action": "}"}]} trailing')
    assert not json_object_closed('"}"')


@pytest.mark.parametrize("compressor", ["erecap", "summary"])
def test_candidate_decoding_always_yields_a_valid_plan(compressor):
    p = path(compressor, decoding="candidates")
    out = p.run(buffer(30), CallRequest("a", 600, 60_000, 120_000))
    assert out.status == CallStatus.OK and len(out.steps) == 1 and out.steps[0].action in SCHEMA.actions
    assert out.phases[3].tokens_out == len(p.candidates) == 4  # move_to x 3 targets, wait


def losing(*steps: Step):
    """A world's lookahead in which `steps` lose the agent's task (and everything else is harmless)."""
    lost = {s.call() for s in steps}
    task = (Entity("a", "robot"), Entity("task_0", TASK_TYPE))
    assigned = (Relation("a", Predicate.ASSIGNED, "task_0"),)

    def predict(agent: str, step: Step) -> Projection:
        state = TASK_LOST if step.call() in lost else "open"
        return Projection(True, "lost" if step.call() in lost else "ok",
                          WorldState("w", 0, 1, (task[0], Entity("task_0", TASK_TYPE, state)), assigned))
    return predict


def test_the_veto_replaces_a_losing_step_by_the_next_ranked_and_without_a_ranking_refuses_the_plan():
    p = path("none", decoding="candidates", veto_lost=True)
    request = CallRequest("a", 600, 60_000, 120_000)
    best = p.run(buffer(30), request).steps[0]  # no predict yet: the veto has nothing to project with
    p.predict = losing(best)
    out = p.run(buffer(30), request)
    assert out.status == CallStatus.OK and len(out.steps) == 1 and out.steps[0] != best
    assert out.vetoed == [best.text()] and [ph.phase for ph in out.phases] == PHASES
    p.predict = losing(*p.candidates)
    refused = p.run(buffer(30), request)
    assert refused.status == CallStatus.PLANNER_ERROR and refused.steps == [] and len(refused.vetoed) == 3  # tries
    assert refused.error.startswith(VETOED_PREFIX)
    constrained = path("none", decoding="constrained", veto_lost=True)
    first = constrained.run(buffer(30), request).steps[0]
    constrained.predict = losing(first)
    out = constrained.run(buffer(30), request)  # a generated plan has no ranking behind it
    assert out.status == CallStatus.PLANNER_ERROR and out.steps == [] and out.vetoed == [first.text()]
    off = path("none", decoding="candidates")
    off.predict = losing(best)
    assert off.run(buffer(30), request).steps == [best]  # veto_lost off: nothing is projected


def test_the_veto_refuses_settings_it_cannot_keep():
    with pytest.raises(ConfigError, match="veto_tries"):
        CallOptions(veto_lost=True, veto_tries=0)
    with pytest.raises(ConfigError, match="veto_lost"):
        CallOptions(veto_lost=True, recursion=True, layout="recap", decoding="constrained")


@pytest.mark.parametrize("decoding", ["candidates", "constrained"])
def test_an_agents_plan_never_names_it_where_the_schema_refuses_its_own_id(decoding):
    schema = ActionSchema.from_dict({"max_steps": 2, "entities": {"agent": ["a", "b", "c"]}, "actions": {
        "yield_to": {"agent": {"type": "string", "entity": "agent", "not_self": True}}}})
    p = path("none", decoding=decoding)
    p.set_schema(schema)
    assert len(p.candidates) == 3  # every agent's calls; each agent's own leave its id out
    for agent in ("a", "b", "c"):
        use = p.use_for(p.use, agent)
        assert use is p.use_for(p.use, agent) and {s.parameters["agent"] for s in use.candidates} == {"a", "b", "c"} - {agent}
        if decoding == "constrained":  # the agent's decoder reuses the schema's tokenisation
            assert use.constrained.encoded is p.use.constrained.encoded and len(use.constrained.steps) == 2
        out = p.run(buffer(30), CallRequest(agent, 600, 60_000, 120_000))
        assert out.status == CallStatus.OK and out.steps
        assert all(s.parameters["agent"] != agent for s in out.steps)


@pytest.mark.parametrize("decoding", ["candidates", "constrained"])
def test_an_agent_with_only_calls_naming_itself_gets_a_planner_error_not_a_crash(decoding):
    p = path("none", decoding=decoding)
    p.set_schema(ActionSchema.from_dict({"max_steps": 1, "entities": {"agent": ["a"]}, "actions": {
        "yield_to": {"agent": {"type": "string", "entity": "agent", "not_self": True}}}}))
    out = p.run(buffer(30), CallRequest("a", 600, 60_000, 120_000))
    assert out.status == CallStatus.PLANNER_ERROR and out.error.startswith("names_self") and out.steps == []


def test_unknown_decoding_is_rejected():
    with pytest.raises(ValueError, match="decoding"):
        path("none", decoding="beam")


@pytest.mark.parametrize("compressor", ["erecap", "summary"])
def test_a_protected_flood_never_keeps_a_call_past_its_deadline(compressor):
    """QA measured: 300 protected TASK entries of 8,000 characters, held whole (limits raised), took seconds to render
    past a hard deadline; the render fits the call's token cap first and checks the deadline as it goes. Counted,
    not timed: a stop asked at the fifth check (cancel and deadline are one check) ends the call in the render."""
    flood = ContextBuffer(limits=ContextLimits(block_entries=1_000, block_chars=10**8, total_chars=10**8))
    for i in range(300):
        flood.add(Entry("a", i, Block.TASK, f"task {i:03d} " + "y" * 7_991, "task"))
    call_path = path(compressor, max_context_tokens=32_768)
    checks: list[int] = []

    def stop_at_the_fifth_check() -> bool:
        checks.append(1)
        return len(checks) >= 5

    out = call_path.run(flood, CallRequest("a", 384, slo_ms=60_000, hard_deadline_ms=120_000),
                        cancelled=stop_at_the_fifth_check)
    assert out.status == CallStatus.CANCELLED and out.steps == [], out.error
    assert [p.phase for p in out.phases] == ["context_compress"] and len(checks) == 6  # the sixth reads the status
    out = call_path.run(flood, CallRequest("a", 384, slo_ms=1.0, hard_deadline_ms=1.0))
    assert out.status == CallStatus.DEADLINE and out.steps == [], out.error
    out = call_path.run(flood, CallRequest("a", 384, slo_ms=60_000, hard_deadline_ms=120_000))
    assert 0 < out.tokens_before <= 32_768  # the newest protected entries, within the cap


@pytest.mark.parametrize("kind", KINDS)
def test_every_family_plans_from_a_local_folder_pruned_and_constrained(kind, tmp_path):
    # A model folder of each family (Llama, Qwen2, Mistral, Qwen3, Gemma 3), loaded as model_path loads it, plans
    # through E-RECAP's pruned prefill and constrained decoding: the budget holds and the plan is a schema plan.
    from erecap_planner.models import load_model
    from erecap_planner.testing import saved_tiny

    model, tok = load_model(saved_tiny(tmp_path / kind, kind), device="cpu", dtype="float32")
    schedule = PruneSchedule(layers=(1, 3), keep_ratio=0.7)
    planner = PlannerCallPath(LocalModel(model, tok, schedule, PredictorBank.for_model(model.config, [1, 3])),
                              CallOptions(decoding="constrained", max_new_tokens=40), SCHEMA)
    out = planner.run(buffer(30), CallRequest("a", token_budget=300, slo_ms=60_000, hard_deadline_ms=120_000))
    assert out.status == CallStatus.OK and out.steps, out.error
    assert out.tokens_before > 300 >= out.tokens_after
    assert all(SCHEMA.check_step(s.action, s.parameters) == s for s in out.steps)


def test_in_model_pruning_gets_the_protected_blocks_fitted_to_the_budget():
    """Protected blocks over B_t: the in-model pruner is handed at most B_t protected tokens, the state's front
    unmarked first (the overflow rule every compressor shares), the constraint still marked."""
    c = ContextBuffer()
    c.add(Entry("a", 0, Block.CONSTRAINTS, "RULE keep off the ramp", "constraint"))
    c.add(Entry("a", 1, Block.STATE, "FRONT " + "shelf dust " * 60 + "at dock_2", "observation"))
    ids, protect = path("erecap").prompt(c, CallRequest("a", 600, 60_000, 120_000))
    assert sum(protect) == 600 < len(ids)
    tok = byte_tokenizer()
    marked = tok.decode([t for t, p in zip(ids, protect, strict=True) if p])
    assert "RULE keep off the ramp" in marked and "at dock_2" in marked and "FRONT" not in marked
