"""Budget-matched compressors: budget never exceeded, forced tokens kept, each method's choice."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_context import buffer

from brace_common.vocabulary import Block
from erecap_planner.compressors import ErecapPromptCompressor, make_compressor
from erecap_planner.context import ContextBuffer, Entry
from erecap_planner.predictor import PredictorBank
from erecap_planner.pruned_forward import ErecapModel
from erecap_planner.pruning import PruneSchedule
from erecap_planner.testing import byte_tokenizer, tiny

TOK = byte_tokenizer()
CTX = buffer(40).render(TOK, "a", "next step for a?")
N = len(CTX)
N_PROTECTED = sum(CTX.protected)
TAIL = PruneSchedule(layers=()).tail_size(N)
N_FORCED = sum(1 for i in range(N) if CTX.protected[i] or i < 4 or i >= N - TAIL)  # protected + head + tail


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(["random", "recency", "summary"]), budget=st.integers(1, N + 10))
def test_budget_never_exceeded_and_order_kept(name, budget):
    out = make_compressor(name).compress(CTX, budget)
    assert out.tokens_after <= min(budget, N)
    assert out.kept_index == sorted(set(out.kept_index))
    assert out.token_ids == [CTX.token_ids[i] for i in out.kept_index]
    if budget >= N_FORCED:
        assert all(i in set(out.kept_index) for i in range(N) if CTX.protected[i])


def test_none_keeps_everything():
    assert make_compressor("none").compress(CTX, 10).tokens_after == N


def test_recency_keeps_latest_history():
    budget = N_FORCED + 40
    kept = set(make_compressor("recency").compress(CTX, budget).kept_index)
    history = [i for i in range(N) if not CTX.protected[i]]
    dropped = [i for i in history if i not in kept]
    assert dropped and max(dropped) < min(i for i in history if i in kept)


def test_random_is_reproducible_and_differs_from_recency():
    budget = N_FORCED + 40
    a = make_compressor("random").compress(CTX, budget).kept_index
    assert a == make_compressor("random").compress(CTX, budget).kept_index
    assert a != make_compressor("recency").compress(CTX, budget).kept_index


def test_summary_keeps_whole_entries_and_prefers_failures():
    c = ContextBuffer()
    c.add(Entry("a", 0, Block.TASK, "fetch cup", "task"))
    for t in range(30):
        c.add(Entry("a", t, Block.HISTORY, f"observed shelf {t}", "observation"))
    c.add(Entry("a", 5, Block.HISTORY, "grasp of cup slipped", "failure_trace"))
    ctx = c.render(TOK, "a", "next?")
    out = make_compressor("summary").compress(ctx, sum(ctx.protected) + 60)
    kept = set(out.kept_index)
    for tokens in ctx.entry_spans().values():
        assert all(i in kept for i in tokens) or not any(i in kept for i in tokens)  # whole entries only
    assert "grasp of cup slipped" in TOK.decode(out.token_ids)


def test_unknown_compressor():
    with pytest.raises(ValueError, match="unknown compressor"):
        make_compressor("magic")


def test_erecap_prompt_level_respects_budget_and_protected_blocks():
    model = tiny("llama")
    bank = PredictorBank.for_model(model.config, [1, 2])
    scorer = ErecapModel(model, PruneSchedule(layers=(1, 2), keep_ratio=0.8), bank)
    compressor = ErecapPromptCompressor(scorer)
    budget = N_FORCED + 30
    out = compressor.compress(CTX, budget)
    assert out.tokens_after <= budget
    kept = set(out.kept_index)
    assert all(i in kept for i in range(N) if CTX.protected[i])
    assert torch.equal(torch.tensor(out.kept_index), torch.tensor(sorted(kept)))


def _overflowing():
    """A prompt whose protected tokens alone exceed the budget: a long state, a short rule, a message."""
    c = ContextBuffer()
    c.add(Entry("a", 0, Block.TASK, "cook the meal", "task"))
    c.add(Entry("a", 0, Block.CONSTRAINTS, "RULE one command per step", "constraint"))
    c.add(Entry("b", 1, Block.COORDINATION, "b -> a: OLDMSG wait for me", "message"))
    c.add(Entry("a", 2, Block.STATE, "FRONTTEXT " + "kitchen filler " * 20 + "ADMISSIBLE take pepper", "observation"))
    return c.render(TOK, "a", "next step for a?")


@pytest.mark.parametrize("name", ["recency", "random", "summary"])
def test_overflow_keeps_rules_and_request_before_the_states_front(name):
    ctx = _overflowing()
    budget = sum(ctx.protected) - 60
    kept = TOK.decode(make_compressor(name).compress(ctx, budget).token_ids)
    for kept_text in ("RULE one command per step", "cook the meal", "ADMISSIBLE take pepper", "next step for a?"):
        assert kept_text in kept
    assert "OLDMSG" not in kept and "FRONTTEXT" not in kept


def test_protected_within_yields_messages_then_the_states_front():
    ctx = _overflowing()
    n = sum(ctx.protected)
    assert ctx.protected_within(n) == ctx.protected
    mask = ctx.protected_within(n - 30)
    assert sum(mask) == n - 30
    unmarked = TOK.decode([t for t, was, now in zip(ctx.token_ids, ctx.protected, mask, strict=True) if was and not now])
    assert "OLDMSG" in unmarked and "RULE" not in unmarked and "cook" not in unmarked
