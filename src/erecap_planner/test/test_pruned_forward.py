"""Pruned prefill + decode on tiny random models of every supported family (erecap_planner.testing.KINDS)."""

from __future__ import annotations

import time

import pytest
import torch

from erecap_planner.predictor import PredictorBank
from erecap_planner.pruned_forward import ErecapModel
from erecap_planner.pruning import PruneSchedule
from erecap_planner.testing import KINDS, tiny


def ids(n: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 256, (1, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_keep_ratio_one_equals_unmodified_model(kind, attn):
    model = tiny(kind, attn)
    x = ids(97)
    with torch.no_grad():
        reference = model(x).logits[0]
    bank = PredictorBank.for_model(model.config, [1, 3])
    runner = ErecapModel(model, PruneSchedule(layers=(1, 3), keep_ratio=1.0), bank)
    out = runner.prefill(x, all_logits=True)
    assert out.lengths == [97, 97, 97] and out.tokens_after == 97
    torch.testing.assert_close(out.logits, reference, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_decode_with_r1_matches_generate(kind):
    model = tiny(kind)
    x = ids(40)
    reference = model.generate(x, max_new_tokens=8, do_sample=False)[0, 40:].tolist()
    runner = ErecapModel(model)
    out = runner.decode(runner.prefill(x), max_new_tokens=8)
    assert out.token_ids == reference and out.stop_reason == "max_tokens"


@pytest.mark.parametrize("kind", KINDS)
def test_progressive_pruning_lengths_and_kept_positions(kind):
    model = tiny(kind)
    layers = (1, 2, 4)
    runner = ErecapModel(model, PruneSchedule(layers=layers, keep_ratio=0.7), PredictorBank.for_model(model.config, list(layers)))
    out = runner.prefill(ids(300))
    assert out.lengths == [300, 210, 147, 102]
    kept = out.kept_index.tolist()
    assert kept == sorted(set(kept)) and kept[:4] == [0, 1, 2, 3]
    assert kept[-16:] == list(range(300 - 16, 300))  # tail window of the last pruning layer
    # Each layer's KV cache holds only the tokens that layer saw.
    cache_lengths = [out.cache.seq_length(i) for i in range(model.config.num_hidden_layers)]
    assert cache_lengths == [300, 210, 147, 147, 102, 102]
    dec = runner.decode(out, max_new_tokens=3)
    assert len(dec.token_ids) == 3


@pytest.mark.parametrize("budget", [10, 20, 64, 150])
def test_budget_is_never_exceeded(budget):
    model = tiny("llama")
    runner = ErecapModel(model, PruneSchedule(layers=(2, 4), keep_ratio=0.9), PredictorBank.for_model(model.config, [2, 4]))
    out = runner.prefill(ids(200), token_budget=budget)
    assert out.tokens_after <= budget
    assert out.kept_index[-1].item() == 199  # the last prompt token survives


def test_protected_tokens_outrank_the_rest_and_are_ordered_by_the_predictor():
    model = tiny("llama")
    bank = PredictorBank.for_model(model.config, [2])
    bank.score = lambda layer, hidden: -torch.arange(hidden.shape[0], dtype=torch.float32)  # earlier = better
    runner = ErecapModel(model, PruneSchedule(layers=(2,), keep_ratio=0.9, head_tokens=4, tail_min=4, tail_frac=0.0),
                         bank)
    protect = torch.zeros(100, dtype=torch.bool)
    protect[40:90] = True  # 50 protected tokens, 22 places left after head and tail
    out = runner.prefill(ids(100), token_budget=30, protect=protect)
    assert out.kept_index.tolist() == [0, 1, 2, 3, *range(40, 62), 96, 97, 98, 99]


def test_prompt_level_mode_stops_after_last_pruning_layer():
    model = tiny("qwen2")
    runner = ErecapModel(model, PruneSchedule(layers=(1, 2), keep_ratio=0.5), PredictorBank.for_model(model.config, [1, 2]))
    out = runner.prefill(ids(120), token_budget=25, stop_after_pruning=True)
    assert out.tokens_after == 25 and out.logits.numel() == 0
    # Layers 0 and 1 ran; nothing from the last pruning layer (2) on did.
    assert [out.cache.seq_length(i) for i in range(6)] == [120, 60, 0, 0, 0, 0]


def test_decode_stops_at_deadline_and_eos():
    model = tiny("llama")
    runner = ErecapModel(model)
    out = runner.prefill(ids(30))
    assert runner.decode(out, max_new_tokens=50, deadline=time.monotonic() - 1).stop_reason == "deadline"
    first = int(torch.argmax(runner.prefill(ids(30)).logits))
    assert runner.decode(runner.prefill(ids(30)), 50, eos_token_ids=(first,)).stop_reason == "eos"


def test_unsupported_and_misconfigured_models_are_rejected():
    model = tiny("llama")
    with pytest.raises(ValueError, match="depth"):
        ErecapModel(model, PruneSchedule(layers=(9,)), PredictorBank.for_model(model.config, [9]))
    with pytest.raises(ValueError, match="no predictor"):
        ErecapModel(model, PruneSchedule(layers=(1,)))
    with pytest.raises(ValueError, match="needs at least one pruning layer"):
        ErecapModel(model).prefill(ids(50), token_budget=10)


def test_budget_sets_the_per_layer_ratio_when_r_would_undershoot():
    model = tiny("llama")
    runner = ErecapModel(model, PruneSchedule(layers=(1, 2, 4), keep_ratio=0.5),
                         PredictorBank.for_model(model.config, [1, 2, 4]))
    assert runner.prefill(ids(400)).tokens_after == 50           # r = 0.5 alone: 400 -> 200 -> 100 -> 50
    assert runner.prefill(ids(400), token_budget=200).tokens_after == 200  # ratio raised to (200/400)^(1/3)
    assert runner.prefill(ids(400), token_budget=20).tokens_after == 20    # r already below: capped at B
    # A prompt within the budget is kept whole: no jump from B kept at N = B + 1 to r^3 N kept at N = B.
    for budget in (400, 1000):
        out = runner.prefill(ids(400), token_budget=budget)
        assert out.tokens_after == 400 and out.lengths == [400, 400, 400, 400]
    assert runner.prefill(ids(400), token_budget=399).tokens_after == 399


@pytest.mark.parametrize("kind", KINDS)
def test_pruned_target_loss_equals_the_loss_read_through_the_pruned_prefill(kind):
    # Pruning-aware training sees what inference sees: the same kept tokens per layer, the target attending to them.
    from erecap_planner.pruned_forward import pruned_target_loss
    from erecap_planner.scoring import _extend

    model = tiny(kind)
    layers = (1, 2, 4)
    schedule = PruneSchedule(layers=layers, keep_ratio=0.7)
    bank = PredictorBank.for_model(model.config, list(layers))
    prompt, target = ids(200)[0], ids(6, seed=5)[0]
    protect = torch.zeros(200, dtype=torch.bool)
    protect[50:70] = True
    runner = ErecapModel(model, schedule, bank)
    pre = runner.prefill(prompt, token_budget=60, protect=protect)
    assert pre.tokens_after == 60 and set(range(50, 70)) <= set(pre.kept_index.tolist())
    later = _extend(runner, pre.cache, target[None, :-1], pre.next_position)[0]
    logits = torch.cat([pre.logits[None], later])
    reference = torch.nn.functional.cross_entropy(logits.float(), target)
    loss = pruned_target_loss(model, schedule, bank, prompt, target, token_budget=60, protect=protect)
    torch.testing.assert_close(loss, reference, atol=1e-4, rtol=0)
    # Without pruning it is the model's own loss on the target.
    plain = model(torch.cat([prompt, target])[None]).logits[0, 199:-1]
    unpruned = pruned_target_loss(model, PruneSchedule(layers=()), None, prompt, target)
    torch.testing.assert_close(unpruned, torch.nn.functional.cross_entropy(plain.float(), target), atol=1e-4, rtol=0)


def test_two_stage_first_cut_then_progressive_to_the_budget():
    model = tiny("llama")
    layers = (1, 2, 4)
    bank = PredictorBank.for_model(model.config, list(layers))
    runner = ErecapModel(model, PruneSchedule(layers=layers, keep_ratio=0.7, first_cut=1.5), bank)
    out = runner.prefill(ids(400), token_budget=40)
    # Layer 1 keeps ceil(1.5 x 40) = 60; layers 2 and 4 go on from 60 to 40 at (40/60)^(1/2) each.
    assert out.lengths == [400, 60, 49, 40] and out.tokens_after == 40
    assert [out.cache.seq_length(i) for i in range(6)] == [400, 60, 49, 49, 40, 40]
    # A prompt within first_cut x B is not cut early: the Table 8 schedule aims at B as before.
    assert runner.prefill(ids(55), token_budget=40).lengths == ErecapModel(
        model, PruneSchedule(layers=layers, keep_ratio=0.7), bank).prefill(ids(55), token_budget=40).lengths
    with pytest.raises(ValueError, match="first_cut"):
        PruneSchedule(layers=layers, first_cut=0.5).validate(6)


@pytest.mark.parametrize("layers", [(), (2, 4)])
def test_prefix_reuse_is_exact_and_counted(layers):
    from erecap_planner.prefix_cache import PrefixCache

    model = tiny("llama")
    bank = PredictorBank.for_model(model.config, list(layers)) if layers else None
    runner = ErecapModel(model, PruneSchedule(layers=layers, keep_ratio=0.7), bank)
    first, grown = ids(150)[0], torch.cat([ids(150)[0], ids(30, seed=9)[0]])  # the context grew at its end
    budget = 60 if layers else None
    cache = PrefixCache()
    runner.prefill(first, token_budget=budget, prefix=cache)
    reused = runner.prefill(grown, token_budget=budget, prefix=cache)
    fresh = runner.prefill(grown, token_budget=budget)
    assert reused.tokens_reused == 150 and fresh.tokens_reused == 0
    assert reused.lengths == fresh.lengths and reused.kept_index.tolist() == fresh.kept_index.tolist()
    torch.testing.assert_close(reused.logits, fresh.logits, atol=1e-5, rtol=0)
    dec = [runner.decode(p, 5).token_ids for p in (reused, fresh)]
    assert dec[0] == dec[1]
    # A prompt that differs early reuses nothing; one identical to the cached prompt still computes its last token.
    other = runner.prefill(ids(150, seed=3)[0], token_budget=budget, prefix=cache)
    assert other.tokens_reused == 0
    again = runner.prefill(ids(150, seed=3)[0], token_budget=budget, prefix=cache)
    assert again.tokens_reused == 149
    assert cache.stats.lookups == 4 and cache.stats.hits == 2
