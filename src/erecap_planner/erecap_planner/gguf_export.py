"""Write a transformers Llama-family model (e.g. SmolLM2 with a LoRA adapter merged) as a GGUF file for llama.cpp.

Metadata is copied from the source GGUF; the weights are written in float16 or Q8_0, rotary halves interleaved as
llama.cpp stores them (docs/planner.md, "GGUF export").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from .gguf_types import WEIGHT_TYPES
from .models import SMOLLM2, cache_root, gguf_source, load_merged, load_model, merged_cache_path

_SKIPPED_FIELDS = ("GGUF.", "general.architecture", "general.file_type", "general.quantization_version")


def interleave_rotary(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """q / k projection rows from transformers' half-split rotary layout to GGUF's interleaved one, per head."""
    rows, cols = weight.shape
    return weight.reshape(heads, 2, rows // heads // 2, cols).transpose(1, 2).reshape(rows, cols)


def _copy_fields(reader, writer) -> None:
    # optional: gguf (llama.cpp's writer) is needed only to export a GGUF file
    import gguf

    for name, field in reader.fields.items():
        if name.startswith(_SKIPPED_FIELDS):
            continue
        vtype = field.types[0]
        value = field.contents()
        if vtype == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(name, value, vtype, sub_type=field.types[-1])
        else:
            writer.add_key_value(name, value, vtype)


def check_weights(weights: str) -> None:
    """ValueError naming the known weight types unless `weights` is one."""
    if weights not in WEIGHT_TYPES:
        raise ValueError(f"weights '{weights}' is not one of {', '.join(WEIGHT_TYPES)}")


def export_gguf(model, source: Path, target: Path, weights: str = "f16") -> Path:
    """Write `model`'s weights with `source`'s metadata to `target` (matrices in `weights`: f16 or q8_0, vectors in
    float32); return `target`."""
    # optional: gguf (llama.cpp's writer) is needed only to export a GGUF file
    import gguf

    check_weights(weights)
    reader = gguf.GGUFReader(str(source))
    arch_name = reader.fields["general.architecture"].contents()
    arch = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch_name)
    config = model.config
    names = gguf.get_tensor_name_map(arch, config.num_hidden_layers)
    source_tensors = {t.name for t in reader.tensors}
    partial = target.with_name(target.name + ".partial")
    writer = gguf.GGUFWriter(str(partial), arch_name)
    _copy_fields(reader, writer)
    writer.add_file_type(WEIGHT_TYPES[weights])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    written = set()
    for hf_name, tensor in model.state_dict().items():
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None or name not in source_tensors:
            continue  # e.g. lm_head tied to the embedding: the source file has no such tensor either
        data = tensor.detach().to(torch.float32)
        if name.endswith("attn_q.weight"):
            data = interleave_rotary(data, config.num_attention_heads)
        elif name.endswith("attn_k.weight"):
            data = interleave_rotary(data, config.num_key_value_heads)
        if data.dim() == 1:
            writer.add_tensor(name, data.numpy())
        elif weights == "q8_0" and data.shape[-1] % 32 == 0:
            kind = gguf.GGMLQuantizationType.Q8_0
            writer.add_tensor(name, gguf.quants.quantize(data.numpy(), kind), raw_dtype=kind)
        else:
            writer.add_tensor(name, data.numpy().astype(np.float16))
        written.add(name)
    missing = source_tensors - written
    if missing:
        raise ValueError(f"the model has no weights for {sorted(missing)[:5]} of {source.name}")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.rename(target)  # no half-written file is ever served
    return target


def merged_gguf(model_path: str, adapter_path: str = "", weights: str = "f16") -> Path:
    """The packaged SmolLM2 GGUF with `adapter_path` merged, matrices in `weights` (written once into the model cache,
    keyed by content)."""

    if model_path != SMOLLM2:
        raise ValueError(f"only '{SMOLLM2}' has a source GGUF to take the metadata from, not '{model_path}'")
    check_weights(weights)
    source = gguf_source()
    if not adapter_path and weights == "f16":
        return source
    adapter, stem = merged_cache_path(SMOLLM2, adapter_path) if adapter_path else (None, cache_root() / SMOLLM2)
    target = stem.with_name(stem.name + f".{weights}.gguf")
    if target.is_file():
        return target
    model, _ = load_merged(SMOLLM2, adapter) if adapter is not None else load_model(SMOLLM2, "cpu", "float32")
    target.parent.mkdir(parents=True, exist_ok=True)
    return export_gguf(model, source, target, weights)


def main(argv: Optional[list[str]] = None) -> int:
    """`python -m erecap_planner.gguf_export --adapter ...`: print the merged GGUF's path (writing it if needed)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--adapter", default="", help="LoRA adapter to merge (adapter_path as the planner takes it)")
    parser.add_argument("--weights", default="f16", choices=tuple(WEIGHT_TYPES), help="the matrices' type")
    args = parser.parse_args(argv)
    try:
        print(merged_gguf(args.model, args.adapter, args.weights))
    except (FileNotFoundError, OSError, ValueError) as exc:
        print(f"gguf_export: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
