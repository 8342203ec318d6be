"""textworld-finetune on a tiny model: an adapter on two levels' games, then a predictor bank for it, evaluated
unpruned and pruned."""

from __future__ import annotations

import yaml
from safetensors.torch import load_file
from transformers import AutoConfig

from brace_training import textworld_finetune_cli
from erecap_planner.predictor import PredictorBank
from erecap_planner.pruning import table8_layers
from erecap_planner.testing import saved_tiny_llama


def test_adapter_then_predictor_then_agreement_unpruned_and_pruned(tmp_path, capsys):
    model = saved_tiny_llama(tmp_path / "tiny")
    config = AutoConfig.from_pretrained(model)
    start = tmp_path / "start.safetensors"
    PredictorBank.for_model(config, table8_layers(config.num_hidden_layers), seed=1).save(start)
    adapter, predictor = tmp_path / "lora.safetensors", tmp_path / "pred.safetensors"
    args = ["--model", model, "--init", "", "--levels", "L1", "L2", "--seeds", "1", "--eval-seeds", "1",
            "--per-game", "2", "--examples", "2",
            "--game-dir", str(tmp_path / "games"), "--output", str(adapter), "--predictor", str(start),
            "--predictor-cases", "2", "--predictor-output", str(predictor), "--budgets", "0", "64"]
    assert textworld_finetune_cli.main(args) == 0
    assert any(name.endswith(".lora_b") and t.abs().sum() > 0 for name, t in load_file(str(adapter)).items())
    trained = PredictorBank.load(predictor, config)
    assert trained.layers == table8_layers(config.num_hidden_layers)
    rows = yaml.safe_load(capsys.readouterr().out)
    assert [(r["adapter"], r["budget"]) for r in rows] == [("none", "unpruned"), ("none", 64),
                                                           (adapter.name, "unpruned"), (adapter.name, 64)]
    assert all(r["points"] == 4 and 0.0 <= r["oracle_agreement"] <= 1.0 for r in rows)
    for pruned in rows[1::2]:  # the new predictor, every kept prompt within B_t
        assert pruned["predictor"] == predictor.name and pruned["tokens_after"] <= 64 < pruned["tokens_before"]
