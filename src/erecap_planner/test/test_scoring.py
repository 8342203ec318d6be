"""Candidate scoring on the pruned cache equals the unmodified model's log-likelihood at r = 1."""

from __future__ import annotations

import pytest
import torch

from brace_common.action_schema import ActionSchema, Step
from erecap_planner.predictor import PredictorBank
from erecap_planner.pruned_forward import ErecapModel
from erecap_planner.pruning import PruneSchedule
from erecap_planner.scoring import JSON_PREFIX, best_step, candidate_text, enumerate_steps, score_candidates
from erecap_planner.testing import byte_tokenizer, tiny

TOK = byte_tokenizer()
SHELVES, DOCKS = [f"shelf_{i}" for i in range(6)], ["dock_1", "dock_2", "dock_3"]
OBJECTS, AGENTS = ["cup_3", "box_1", "shoe_5", "book_2", "can_4"], [f"agent_{i}" for i in range(4)]


def warehouse_schema() -> ActionSchema:
    """Warehouse-like skills with every value enumerated (9 targets, 5 objects, 3 docks, 4 agents)."""
    return ActionSchema.from_dict({"max_steps": 8, "actions": {
        "move_to": {"target": {"choices": SHELVES + DOCKS}},
        "pick": {"object": {"choices": OBJECTS}},
        "place": {"object": {"choices": OBJECTS}, "target": {"choices": DOCKS}},
        "handoff": {"object": {"choices": OBJECTS}, "to_agent": {"choices": AGENTS}},
        "wait": {}}})


def reference_logprob(model, prompt: list[int], continuation: list[int]) -> float:
    ids = torch.tensor([prompt + continuation])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].float(), -1)
    return sum(float(logp[len(prompt) - 1 + i, tok]) for i, tok in enumerate(continuation))


def test_enumeration_covers_the_schema():
    steps = enumerate_steps(warehouse_schema())
    assert len(steps) == 9 + 5 + 5 * 3 + 5 * 4 + 1
    schema = ActionSchema.from_dict({"actions": {"say": {"text": {}}, "wait": {}}})
    assert [s.action for s in enumerate_steps(schema)] == ["wait"]  # free-text parameters cannot be enumerated


def test_scores_match_the_unmodified_model():
    model = tiny("qwen2")
    prompt = TOK("some context about shelves and docks, plan now:", add_special_tokens=False)["input_ids"]
    steps = [Step("move_to", {"target": "dock_1"}), Step("wait", {}), Step("pick", {"object": "cup_3"})]
    runner = ErecapModel(model)
    scores = score_candidates(runner, runner.prefill(torch.tensor(prompt)), TOK, steps, normalise=False)
    prefix = TOK(JSON_PREFIX, add_special_tokens=False)["input_ids"]
    for step, score in zip(steps, scores.tolist(), strict=True):
        cont = TOK(candidate_text(step), add_special_tokens=False)["input_ids"]
        assert abs(score - reference_logprob(model, prompt + prefix, cont)) < 1e-3


def test_best_step_on_a_pruned_cache():
    model = tiny("llama")
    bank = PredictorBank.for_model(model.config, [1, 3])
    runner = ErecapModel(model, PruneSchedule(layers=(1, 3), keep_ratio=0.6), bank)
    prompt = torch.randint(0, 256, (400,), generator=torch.Generator().manual_seed(0))
    steps = enumerate_steps(warehouse_schema())
    step, score = best_step(runner, runner.prefill(prompt, token_budget=64), TOK, steps)
    assert step in steps and score < 0


def test_candidates_are_scored_in_batches_that_match_one_forward_and_stop_at_an_abort(monkeypatch):
    from erecap_planner import scoring
    from erecap_planner.pruned_forward import CallAborted

    model = tiny("llama")
    runner = ErecapModel(model)
    prompt = torch.randint(0, 256, (200,), generator=torch.Generator().manual_seed(1))
    steps = enumerate_steps(warehouse_schema())  # 50 candidates: 7 batches of 8
    batched = score_candidates(runner, runner.prefill(prompt), TOK, steps)
    monkeypatch.setattr(scoring, "CANDIDATE_BATCH", len(steps))
    whole = score_candidates(runner, runner.prefill(prompt), TOK, steps)
    assert torch.allclose(batched, whole, atol=1e-4)
    checks = []

    def abort_after_three_layers() -> bool:
        checks.append(1)
        return len(checks) > 3

    monkeypatch.setattr(scoring, "CANDIDATE_BATCH", 8)
    with pytest.raises(CallAborted):
        best_step(runner, runner.prefill(prompt), TOK, steps, should_abort=abort_after_three_layers)
    assert len(checks) == 4  # checked before every layer: nothing ran after the abort


def test_a_schema_of_more_skill_calls_than_the_cap_is_refused_before_any_is_listed():
    from erecap_planner.scoring import MAX_CANDIDATES, CandidateLimit, candidate_count

    three_by_forty = ActionSchema.from_dict({"actions": {"go": {p: {"choices": [f"{p}{i}" for i in range(40)]}
                                                                for p in "abc"}}})
    assert candidate_count(three_by_forty) == 64_000 > MAX_CANDIDATES
    with pytest.raises(CandidateLimit, match="64000 skill calls"):
        enumerate_steps(three_by_forty)
    assert candidate_count(warehouse_schema()) == len(enumerate_steps(warehouse_schema())) == 50
