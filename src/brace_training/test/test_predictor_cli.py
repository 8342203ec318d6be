"""warehouse-predictor on a tiny model: trains every pruning layer's predictor on oracle decision points."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig

from brace_training import predictor_cli
from erecap_planner.predictor import PredictorBank
from erecap_planner.pruning import table8_layers
from erecap_planner.testing import saved_tiny_llama


def test_trains_and_saves_a_bank_for_the_model(tmp_path):
    model = saved_tiny_llama(tmp_path / "tiny")
    out = tmp_path / "pred.safetensors"
    args = ["--model", model, "--adapter", "", "--episodes", "1", "--agents", "1", "--cases", "2", "--epochs", "1",
            "--max-tokens", "100000", "--seed", "3", "--output", str(out)]
    assert predictor_cli.main(args) == 0
    config = AutoConfig.from_pretrained(model)
    bank = PredictorBank.load(out, config)
    layers = table8_layers(config.num_hidden_layers)
    assert bank.trained and sorted(bank.layers) == sorted(layers)
    untrained = PredictorBank.for_model(config, layers, seed=3)
    changed = [not torch.equal(a, b) for a, b in zip(bank.state_dict().values(), untrained.state_dict().values(),
                                                     strict=True)]
    assert any(changed)


def test_no_decision_point_fits_is_a_clear_error(tmp_path, capsys):
    model = saved_tiny_llama(tmp_path / "tiny")
    with pytest.raises(SystemExit):
        predictor_cli.main(["--model", model, "--adapter", "", "--episodes", "1", "--agents", "1",
                            "--max-tokens", "10", "--output", str(tmp_path / "p.safetensors")])
    assert "--max-tokens 10" in capsys.readouterr().err
