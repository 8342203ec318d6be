"""Low-rank adapters (LoRA) of the planner LM: merge a saved adapter into the weights at load.

A planner fine-tune on a world's oracle plans is a few MB of adapter weights
instead of a copy of the model (brace_training.adapter_training trains them).
Loading merges W += s B A into the base weights, so inference (pruned
prefill, decoding) runs the unmodified code path at no extra cost.
Checkpoints record the base architecture and are refused for another one.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file
from torch import nn

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
"""The projections an adapter updates."""


class AdapterMismatchError(ValueError):
    """The adapter was trained for another base model."""


def projections(model) -> dict[str, nn.Linear]:
    """The model's projections an adapter updates, by module name."""
    return {name: module for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in TARGETS}


def signature(model) -> dict[str, str]:
    """What identifies the base architecture in an adapter checkpoint."""
    c = model.config
    return {"model_type": str(c.model_type), "hidden_size": str(c.hidden_size),
            "num_hidden_layers": str(c.num_hidden_layers)}


def merge_adapter(model, path: str | Path) -> int:
    """Merge a saved adapter into `model` in place (W += B A); return how many projections changed."""

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
    for key, value in signature(model).items():
        if meta.get(key) != value:
            raise AdapterMismatchError(f"adapter {path} was trained for {key}={meta.get(key)}, the model has {value}")
    tensors = load_file(str(path))
    targets = projections(model)
    merged = 0
    with torch.no_grad():
        for name, linear in targets.items():
            a, b = tensors.get(f"{name}.lora_a"), tensors.get(f"{name}.lora_b")
            if a is None or b is None:
                continue
            linear.weight += (b.float() @ a.float()).to(linear.weight.dtype).to(linear.weight.device)
            merged += 1
    if merged == 0:
        raise AdapterMismatchError(f"adapter {path} matches no projection of the model")
    return merged
