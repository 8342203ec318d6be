"""LoRA adapters on a tiny model: training lowers the plan loss, merging reproduces it, other models are refused."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from brace_training.adapter_training import PlanExample, save_adapter, target_loss, train_adapter
from erecap_planner.adapter import AdapterMismatchError, merge_adapter
from erecap_planner.testing import tiny


def plan_loss(model, example: PlanExample) -> float:
    ids = torch.tensor([example.prompt_ids + example.target_ids])
    labels = ids.clone()
    labels[0, : len(example.prompt_ids)] = -100
    with torch.inference_mode():
        return float(model(input_ids=ids, labels=labels).loss)


def examples() -> list[PlanExample]:
    g = torch.Generator().manual_seed(3)
    return [PlanExample(torch.randint(0, 256, (30,), generator=g).tolist(), [7, 8, 9, 10, 11 + i]) for i in range(2)]


def test_training_lowers_the_plan_loss_and_merging_reproduces_it(tmp_path):
    model = tiny("llama")
    data = examples()
    before = [plan_loss(model, ex) for ex in data]
    base_weight = model.model.layers[0].self_attn.q_proj.weight.clone()
    tensors = train_adapter(model, data, rank=4, alpha=8, epochs=30, lr=3e-3)
    # Training leaves the model as it was; the adapter is separate.
    torch.testing.assert_close(model.model.layers[0].self_attn.q_proj.weight, base_weight)
    assert [plan_loss(model, ex) for ex in data] == before
    path = save_adapter(tensors, model, tmp_path / "a.safetensors", dtype=torch.float32)
    assert merge_adapter(model, path) == 4 * model.config.num_hidden_layers
    after = [plan_loss(model, ex) for ex in data]
    assert all(a < b - 0.5 for a, b in zip(after, before, strict=True))  # ~5.5 -> ~4.4 nats


def test_training_continues_from_a_saved_adapter(tmp_path):
    model = tiny("llama")
    tensors = train_adapter(model, examples(), rank=2, epochs=2, lr=3e-3)
    saved = load_file(str(save_adapter(tensors, model, tmp_path / "a.safetensors", dtype=torch.float32)))
    resumed = train_adapter(model, examples(), rank=2, epochs=0, init=saved)  # no steps: the init comes back
    for name, value in tensors.items():
        torch.testing.assert_close(resumed[name], value)
    with pytest.raises(AdapterMismatchError):
        train_adapter(model, examples(), rank=4, epochs=0, init=saved)


def test_adapter_for_another_architecture_is_refused(tmp_path):
    model = tiny("llama")
    path = save_adapter(train_adapter(model, examples()[:1], rank=2), model, tmp_path / "a.safetensors")
    with pytest.raises(AdapterMismatchError):
        merge_adapter(tiny("llama", hidden_size=32, intermediate_size=64), path)


def test_pruning_aware_training_lowers_the_pruned_plan_loss(tmp_path):
    from erecap_planner.predictor import PredictorBank
    from erecap_planner.pruned_forward import pruned_target_loss
    from erecap_planner.pruning import PruneSchedule

    model = tiny("llama")
    schedule = PruneSchedule(layers=(1, 3), keep_ratio=0.7)
    bank = PredictorBank.for_model(model.config, [1, 3])
    data = [PlanExample(ex.prompt_ids, ex.target_ids, token_budget=12, protect=[i < 20 for i in range(30)])
            for ex in examples()]

    def pruned_loss(ex: PlanExample) -> float:
        with torch.no_grad():
            return float(pruned_target_loss(model, schedule, bank, torch.tensor(ex.prompt_ids),
                                            torch.tensor(ex.target_ids), ex.token_budget, torch.tensor(ex.protect)))

    before = [pruned_loss(ex) for ex in data]
    with pytest.raises(ValueError, match="pruning"):
        train_adapter(model, data, rank=4, epochs=1)
    tensors = train_adapter(model, data, rank=4, alpha=8, epochs=30, lr=3e-3, pruning=(schedule, bank))
    merge_adapter(model, save_adapter(tensors, model, tmp_path / "a.safetensors", dtype=torch.float32))
    after = [pruned_loss(ex) for ex in data]
    assert all(a < b - 0.5 for a, b in zip(after, before, strict=True))


@pytest.mark.parametrize("kind", ["llama", "gemma3"])
def test_the_target_loss_is_the_labelled_forward_s_loss(kind):
    # The LM head runs only where a target token is predicted; the loss is the full forward's with the prompt masked.
    model = tiny(kind)
    for example in examples():
        with torch.inference_mode():
            loss = float(target_loss(model, example.prompt_ids, example.target_ids, "cpu"))
        assert loss == pytest.approx(plan_loss(model, example), rel=1e-5)


def test_a_token_mean_weighs_every_choice_the_same_whatever_its_plans_length():
    from brace_training.adapter_training import TrainingOptions, token_scale

    long_plan = PlanExample([1, 2], list(range(12)), choice=[i % 3 == 0 for i in range(12)])  # 4 choices, 8 forced
    wait = PlanExample([1, 2], [5, 6, 7], choice=[True, False, False])  # 1 choice, 2 forced
    weights = {id(long_plan): 4 + 8 * 0.5, id(wait): 1 + 2 * 0.5}
    mean = sum(weights.values()) / 2
    # a batch's weighted mean times its scale is its summed weighted loss over the round's mean example weight:
    # the long plan's first choice weighs 1 / mean either way, not 1 / 8 against the wait's 1 / 2
    assert token_scale([long_plan], 0.5, mean) == pytest.approx(weights[id(long_plan)] / mean)
    assert token_scale([wait], 0.5, mean) == pytest.approx(weights[id(wait)] / mean)
    assert token_scale([long_plan, wait], 0.5, mean) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="loss_mean"):
        TrainingOptions(loss_mean="plan")
