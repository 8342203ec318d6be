"""Predictor training: saliency shape, ranking loss, and a short toy run whose loss decreases."""

from __future__ import annotations

import math

import pytest
import torch

from brace_training.datagen import make_case
from brace_training.predictor_training import Example, PredictorTrainer, compute_saliency, mean_loss, ranking_loss, target_text
from erecap_planner.predictor import PredictorBank
from erecap_planner.pruning import PruneSchedule
from erecap_planner.testing import KINDS, byte_tokenizer, tiny

TOK = byte_tokenizer()


def examples(n_cases: int, tokens: int = 300) -> list[Example]:
    out = []
    for i in range(n_cases):
        case = make_case(f"toy-{i}", tokens, TOK)
        prompt = case.buffer.render(TOK, case.agent_id, "Plan the next step for agent_0.").token_ids
        target = TOK(target_text(case.target), add_special_tokens=False)["input_ids"]
        out.append(Example(torch.tensor(prompt), torch.tensor(target)))
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_saliency_per_pruning_layer(kind):
    model = tiny(kind)
    ex = examples(1)[0]
    sal = compute_saliency(model, ex, [1, 3])
    assert set(sal) == {1, 3}
    assert sal[1].shape == (ex.prompt_ids.numel(),) and (sal[1] >= 0).all() and sal[1].sum() > 0
    assert all(p.grad is None for p in model.parameters())  # the model itself is not trained


def test_ranking_loss_prefers_agreeing_order():
    sal = torch.arange(50, dtype=torch.float32)
    g = torch.Generator().manual_seed(0)
    good = ranking_loss(sal.clone(), sal, 500, g)
    bad = ranking_loss(-sal, sal, 500, torch.Generator().manual_seed(0))
    assert good < bad


def test_training_loss_decreases_on_a_toy_run():
    model = tiny("llama")
    schedule = PruneSchedule(layers=(1, 3), keep_ratio=0.7)
    bank = PredictorBank.for_model(model.config, [1, 3], seed=1)
    trainer = PredictorTrainer(model, bank, schedule, lr=3e-3, pairs=512)
    data = trainer.prepare(examples(4))
    history = trainer.fit(data, epochs=8)
    assert len(history) == 32 and bank.trained
    assert mean_loss(history, first=False) < mean_loss(history, first=True)
    assert all(p.grad is None or p.grad.abs().sum() == 0 for p in model.parameters())


@pytest.mark.parametrize("kind", [k for k in KINDS if k != "llama"])
def test_a_predictor_training_step_runs_for_every_family(kind):
    model = tiny(kind)
    bank = PredictorBank.for_model(model.config, [1, 3], seed=1)
    trainer = PredictorTrainer(model, bank, PruneSchedule(layers=(1, 3), keep_ratio=0.7), lr=3e-3, pairs=64)
    history = trainer.fit(trainer.prepare(examples(1, tokens=120)), epochs=1)
    assert len(history) == 1 and bank.trained and math.isfinite(history[0].total)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_training_runs_on_cuda():
    # The soft-pruned LM loss back-propagates into an additive attention mask, which CUDA's memory-efficient
    # kernel refuses for arbitrary lengths ("LSE is not correctly aligned", seen on an H100).
    model = tiny("llama").to("cuda")
    schedule = PruneSchedule(layers=(1, 3), keep_ratio=0.7)
    bank = PredictorBank.for_model(model.config, [1, 3], seed=1)
    trainer = PredictorTrainer(model, bank, schedule, lr=3e-3, pairs=512)
    history = trainer.fit(trainer.prepare(examples(2, tokens=301)), epochs=1)
    assert len(history) == 2 and all(math.isfinite(h.total) for h in history)


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
def test_the_layer_loop_s_target_loss_is_the_model_s(kind):
    # The LM head runs from the prompt's last position only; the loss is the full forward's with the prompt masked.
    from brace_training.predictor_training import _layer_loop, _target_loss
    from erecap_planner.pruned_forward import causal_mask

    model = tiny(kind)
    ex = examples(1, tokens=120)[0]
    ids = torch.cat([ex.prompt_ids, ex.target_ids])
    n_prompt = ex.prompt_ids.numel()
    labels = ids.clone()[None]
    labels[0, :n_prompt] = -100
    with torch.inference_mode():
        embeds = model.model.embed_tokens(ids)[None]
        loss = _target_loss(_layer_loop(model, embeds, causal_mask(ids.numel(), embeds.dtype, "cpu"), None,
                                        n_prompt - 1), ids, n_prompt)
        reference = model(input_ids=ids[None], labels=labels).loss
    assert float(loss) == pytest.approx(float(reference), rel=1e-4)
