"""Write a transformers Llama-family model (e.g. SmolLM2 with a LoRA adapter merged) as a GGUF file for llama.cpp.

The metadata (architecture hyper-parameters, tokenizer, chat template) is
copied from the GGUF file the model came from, so llama.cpp tokenises and
templates exactly as before; only the weights are replaced, in float16
(norms in float32). llama.cpp stores the query and key projections with
each head's rotary halves interleaved (the layout of Meta's checkpoints);
transformers' GGUF loader undoes that when it reads a file, so it is
applied here, and a round trip through transformers gives the same logits
(tested). Tensor names follow gguf-py's name map for the architecture.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from .models import SMOLLM2, gguf_source, load_merged, merged_cache_path

_SKIPPED_FIELDS = ("GGUF.", "general.architecture", "general.file_type", "general.quantization_version")
_FILE_TYPE_F16 = 1  # llama.cpp's LLAMA_FTYPE_MOSTLY_F16


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


def export_gguf(model, source: Path, target: Path) -> Path:
    """Write `model`'s weights with `source`'s metadata to `target` (float16); return `target`."""
    # optional: gguf (llama.cpp's writer) is needed only to export a GGUF file
    import gguf

    reader = gguf.GGUFReader(str(source))
    arch_name = reader.fields["general.architecture"].contents()
    arch = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch_name)
    config = model.config
    names = gguf.get_tensor_name_map(arch, config.num_hidden_layers)
    source_tensors = {t.name for t in reader.tensors}
    partial = target.with_name(target.name + ".partial")
    writer = gguf.GGUFWriter(str(partial), arch_name)
    _copy_fields(reader, writer)
    writer.add_file_type(_FILE_TYPE_F16)
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
        array = data.numpy().astype(np.float32 if data.dim() == 1 else np.float16)
        writer.add_tensor(name, array)
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


def merged_gguf(model_path: str, adapter_path: str = "") -> Path:
    """The packaged SmolLM2 GGUF with `adapter_path` merged (written once into the model cache, keyed by content)."""

    if model_path != SMOLLM2:
        raise ValueError(f"only '{SMOLLM2}' has a source GGUF to take the metadata from, not '{model_path}'")
    source = gguf_source()
    if not adapter_path:
        return source
    adapter, stem = merged_cache_path(SMOLLM2, adapter_path)
    target = stem.with_name(stem.name + ".f16.gguf")
    if target.is_file():
        return target
    model, _ = load_merged(SMOLLM2, adapter)
    target.parent.mkdir(parents=True, exist_ok=True)
    return export_gguf(model, source, target)


def main(argv: Optional[list[str]] = None) -> int:
    """`python -m erecap_planner.gguf_export --adapter ...`: print the merged GGUF's path (writing it if needed)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--adapter", default="", help="LoRA adapter to merge (adapter_path as the planner takes it)")
    args = parser.parse_args(argv)
    try:
        print(merged_gguf(args.model, args.adapter))
    except (FileNotFoundError, OSError, ValueError) as exc:
        print(f"gguf_export: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
