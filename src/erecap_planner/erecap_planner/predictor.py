"""Token-utility predictor of paper Eq. 8, one per pruning layer, with checkpoints.

pi_i = W2 GELU(W1 h_i + b1) + b2, W1: d -> d/4, W2: d/4 -> 1. A checkpoint
records the architecture it was trained for (model type, hidden size, depth,
pruning layers); loading it onto a different architecture is an error that
says which field differs.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn


class PredictorMismatchError(ValueError):
    """A predictor checkpoint does not belong to the model it is loaded for."""


class TokenPredictor(nn.Module):
    """Linear(d, d/4) -> GELU -> Linear(1): one importance score per token."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(hidden_size, max(1, hidden_size // 4)), nn.GELU(),
                                 nn.Linear(max(1, hidden_size // 4), 1))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., N, d] hidden states -> [..., N] scores."""
        return self.net(hidden).squeeze(-1)


def architecture_of(config) -> dict:
    """The fields of a transformers config a predictor checkpoint must match."""
    return {"model_type": config.model_type, "hidden_size": int(config.hidden_size),
            "num_hidden_layers": int(config.num_hidden_layers)}


class PredictorBank(nn.Module):
    """The predictors of every pruning layer of one model architecture."""

    def __init__(self, architecture: dict, layers: list[int], seed: int | None = 0):
        super().__init__()
        self.architecture = dict(architecture)
        self.layers = list(layers)
        if seed is not None:
            torch.manual_seed(seed)
        self.predictors = nn.ModuleDict({str(layer): TokenPredictor(architecture["hidden_size"]) for layer in layers})
        self.trained = False

    @classmethod
    def for_model(cls, config, layers: list[int], seed: int | None = 0) -> PredictorBank:
        """An untrained bank for the model of `config`."""
        return cls(architecture_of(config), layers, seed)

    def subset(self, layers: list[int]) -> PredictorBank:
        """The same trained predictors for some of this bank's layers (a scorer that stops early)."""
        missing = sorted(set(layers) - set(self.layers))
        if missing:
            raise PredictorMismatchError(f"predictor covers layers {self.layers}, not {missing}")
        bank = PredictorBank(self.architecture, list(layers), seed=None)
        bank.predictors = nn.ModuleDict({str(layer): self.predictors[str(layer)] for layer in layers})
        bank.trained = self.trained
        return bank

    def score(self, layer: int, hidden: torch.Tensor) -> torch.Tensor:
        """Scores of the tokens entering pruning layer `layer`."""
        predictor = self.predictors[str(layer)]
        weight = predictor.net[0].weight
        return predictor(hidden.to(weight.dtype))

    def check_compatible(self, config, layers: list[int] | None = None) -> None:
        """PredictorMismatchError unless this bank fits the model of `config` (and the layers)."""
        wanted = architecture_of(config)
        for key, value in wanted.items():
            if self.architecture.get(key) != value:
                raise PredictorMismatchError(
                    f"predictor was trained for {key}={self.architecture.get(key)!r}, model has {key}={value!r}")
        if layers is not None and sorted(layers) != sorted(self.layers):
            raise PredictorMismatchError(f"predictor covers layers {self.layers}, schedule asks for {sorted(layers)}")

    def save(self, path: str | Path) -> None:
        """Write weights and metadata to one .safetensors file."""
        meta = {"architecture": json.dumps(self.architecture), "layers": json.dumps(self.layers),
                "trained": json.dumps(self.trained), "format": "erecap-predictor-v1"}
        tensors = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        save_file(tensors, str(path), metadata=meta)

    @classmethod
    def load(cls, path: str | Path, config=None) -> PredictorBank:
        """Read a checkpoint; with `config`, refuse one made for another architecture."""

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no predictor checkpoint at {path}")
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        if meta.get("format") != "erecap-predictor-v1":
            raise PredictorMismatchError(f"{path} is not an E-RECAP predictor checkpoint")
        bank = cls(json.loads(meta["architecture"]), json.loads(meta["layers"]), seed=None)
        bank.load_state_dict(load_file(str(path)))
        bank.trained = json.loads(meta.get("trained", "false"))
        if config is not None:
            bank.check_compatible(config)
        return bank
