"""Predictor (Eq. 8) checkpoints: round trip and architecture mismatch."""

from __future__ import annotations

import pytest
import torch

from erecap_planner.predictor import PredictorBank, PredictorMismatchError, TokenPredictor
from erecap_planner.testing import tiny


def test_predictor_shape():
    p = TokenPredictor(64)
    assert p.net[0].out_features == 16 and p(torch.randn(7, 64)).shape == (7,)


def test_checkpoint_round_trip(tmp_path):
    model = tiny("llama")
    bank = PredictorBank.for_model(model.config, [1, 3], seed=3)
    bank.trained = True
    path = tmp_path / "pred.safetensors"
    bank.save(path)
    loaded = PredictorBank.load(path, model.config)
    h = torch.randn(11, 64)
    torch.testing.assert_close(loaded.score(3, h), bank.score(3, h))
    assert loaded.layers == [1, 3] and loaded.trained


def test_checkpoint_for_another_architecture_is_refused(tmp_path):
    path = tmp_path / "pred.safetensors"
    PredictorBank.for_model(tiny("llama").config, [1]).save(path)
    with pytest.raises(PredictorMismatchError, match="model_type"):
        PredictorBank.load(path, tiny("qwen2").config)
    with pytest.raises(PredictorMismatchError, match="num_hidden_layers"):
        PredictorBank.load(path, tiny("llama", num_hidden_layers=8).config)
    with pytest.raises(PredictorMismatchError, match="layers"):
        PredictorBank.load(path).check_compatible(tiny("llama").config, [1, 2])


def test_not_a_checkpoint(tmp_path):
    from safetensors.torch import save_file

    path = tmp_path / "x.safetensors"
    save_file({"a": torch.zeros(1)}, str(path))
    with pytest.raises(PredictorMismatchError, match="not an E-RECAP"):
        PredictorBank.load(path)
    with pytest.raises(FileNotFoundError):
        PredictorBank.load(tmp_path / "missing.safetensors")
