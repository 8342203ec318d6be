"""Batched plan losses: padding changes nothing, a detached prompt gives the same loss, choices weigh more."""

from __future__ import annotations

import random

import pytest
import torch

from brace_training.adapter_training import PlanExample, TrainingOptions, target_loss, train_adapter
from brace_training.plan_batches import bucketed, detached_loss, full_loss, token_weights
from erecap_planner.adapter import projections
from erecap_planner.testing import tiny


def examples(n: int = 3) -> list[PlanExample]:
    g = torch.Generator().manual_seed(5)
    return [PlanExample(torch.randint(0, 256, (20 + 7 * i,), generator=g).tolist(),
                        torch.randint(0, 256, (4 + i,), generator=g).tolist()) for i in range(n)]


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
def test_padded_batches_give_each_example_s_own_loss(kind):
    """Left padding and the positions computed from the mask: a batch's loss is the token-weighted mean of its
    examples' losses, and a detached prompt's forward gives the same value as the full one."""
    model = tiny(kind)
    batch = examples()
    with torch.no_grad():
        alone = [float(target_loss(model, ex.prompt_ids, ex.target_ids, "cpu")) for ex in batch]
        tokens = [len(ex.target_ids) for ex in batch]
        expected = sum(a * n for a, n in zip(alone, tokens, strict=True)) / sum(tokens)
        assert float(full_loss(model, batch, 1.0, "cpu")) == pytest.approx(expected, rel=1e-4)
        assert float(detached_loss(model, batch, 1.0, "cpu")) == pytest.approx(expected, rel=1e-4)
        assert float(detached_loss(model, batch[:1], 1.0, "cpu")) == pytest.approx(alone[0], rel=1e-4)


def test_detached_prompt_has_no_gradient_through_the_prompt():
    model = tiny("llama")
    ex = examples(1)[0]
    embeds = model.get_input_embeddings().weight
    embeds.requires_grad_(True)
    detached_loss(model, [ex], 1.0, "cpu").backward()
    prompt_rows = set(ex.prompt_ids[:-1]) - set(ex.prompt_ids[-1:] + ex.target_ids[:-1])
    grad = embeds.grad.abs().sum(1)
    assert all(grad[t] == 0 for t in prompt_rows)  # prompt tokens reach the loss only through the cache
    assert grad[ex.prompt_ids[-1]] > 0


def test_choice_tokens_weigh_the_loss():
    ex = examples(1)[0]
    choice = [i % 2 == 0 for i in range(len(ex.target_ids))]
    assert token_weights(choice, len(choice), 0.1) == [1.0 if c else 0.1 for c in choice]
    assert token_weights(None, 3, 0.1) == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="choice mask"):
        token_weights(choice, len(choice) + 1, 0.1)
    model = tiny("llama")
    with torch.no_grad():
        only_choices = float(full_loss(model, [PlanExample(ex.prompt_ids, ex.target_ids, choice=choice)], 0.0, "cpu"))
        per_token = torch.nn.functional.cross_entropy(
            model(input_ids=torch.tensor([ex.prompt_ids + ex.target_ids])).logits[0, len(ex.prompt_ids) - 1:-1],
            torch.tensor(ex.target_ids), reduction="none")
    assert only_choices == pytest.approx(float(per_token[torch.tensor(choice)].mean()), rel=1e-4)


def test_buckets_hold_neighbours_in_length_and_every_index_once():
    lengths = [50, 10, 30, 20, 40, 60, 15]
    batches = bucketed(lengths, 2, random.Random(0))
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert all(len(b) <= 2 for b in batches)
    ranks = {i: r for r, i in enumerate(sorted(range(len(lengths)), key=lambda i: lengths[i]))}
    assert all(abs(ranks[b[0]] - ranks[b[-1]]) <= 1 for b in batches)
    with pytest.raises(ValueError, match="batch size"):
        bucketed(lengths, 0, random.Random(0))


@pytest.mark.parametrize("options", [TrainingOptions(batch_size=2), TrainingOptions(prompt_gradient="full"),
                                     TrainingOptions(dtype="bfloat16", batch_size=3)],
                         ids=["detached-batch2", "full-batch1", "bf16-batch3"])
def test_every_training_path_lowers_the_plan_loss(options):
    model = tiny("llama")
    data = examples()

    def mean_loss() -> float:
        with torch.no_grad():
            return sum(float(target_loss(model, ex.prompt_ids, ex.target_ids, "cpu")) for ex in data) / len(data)

    before = mean_loss()
    tensors = train_adapter(model, data, rank=4, alpha=8, epochs=20, lr=3e-3, options=options)
    with torch.no_grad():
        for name, linear in projections(model).items():
            linear.weight += tensors[f"{name}.lora_b"] @ tensors[f"{name}.lora_a"]
    assert mean_loss() < before - 0.5


def test_training_options_are_validated():
    for bad in ({"dtype": "float16"}, {"batch_size": 0}, {"prompt_gradient": "some"}, {"forced_weight": 1.5}):
        with pytest.raises(ValueError):
            TrainingOptions(**bad)
    assert TrainingOptions(dtype="bfloat16").autocast_dtype(torch.device("cpu")) == torch.bfloat16
    assert TrainingOptions(dtype="float32").autocast_dtype(torch.device("cpu")) is None
