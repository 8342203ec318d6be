"""What distinguishes one decoder-only family from another inside the planner's layer loop (`transformer.DecoderStack`).

`architecture(config)` reads it from the Hugging Face config once: norm style, QK-norm, sandwich norms, embedding and
query scaling, sliding windows; unsupported features are refused by name (docs/planner.md, "The decoder-layer loop").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma3_text")
"""Hugging Face `model_type`s the layer loop runs."""
FULL, SLIDING = "full_attention", "sliding_attention"
"""Layer types (the configs' `layer_types` entries)."""


@dataclass(frozen=True)
class Architecture:
    """A decoder family's differences, for one model's config."""

    model_type: str
    norm_offset: float                 # RMSNorm scales by (norm_offset + weight)
    qk_norm: bool                      # per-head RMSNorm of queries and keys before RoPE
    sandwich: bool                     # RMSNorm of the attention and MLP outputs before the residual add
    layer_types: tuple[str, ...]       # FULL or SLIDING per layer
    sliding_window: Optional[int]      # keys a sliding layer's query reaches back (itself included)
    scaling: float                     # attention logits' scale
    final_softcap: Optional[float]     # logits = cap * tanh(logits / cap)
    rotary_by_type: bool               # the rotary module takes the layer type (one RoPE base per type)
    activation: str                    # the MLP's gate activation (transformers' ACT2FN name)

    def sliding(self, layer: int) -> bool:
        """Whether `layer` attends through a sliding window."""
        return self.layer_types[layer] == SLIDING and self.sliding_window is not None


def architecture(config) -> Architecture:
    """The architecture of a Hugging Face decoder config; ValueError for an unsupported type or feature."""
    kind = config.model_type
    if kind not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"model type '{kind}' is not supported (supported: {SUPPORTED_MODEL_TYPES})")
    if getattr(config, "attn_logit_softcapping", None):
        raise ValueError(f"{kind}: attention-logit soft-capping is not supported")
    if getattr(config, "use_bidirectional_attention", False):
        raise ValueError(f"{kind}: bidirectional attention is not supported")
    layers = config.num_hidden_layers
    window = getattr(config, "sliding_window", None) if getattr(config, "use_sliding_window", True) else None
    types = tuple(getattr(config, "layer_types", None) or [SLIDING if window else FULL] * layers)[:layers]
    unknown = sorted(set(types) - {FULL, SLIDING})
    if unknown:
        raise ValueError(f"{kind}: layer types {unknown} are not supported")
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    gemma = kind == "gemma3_text"
    scale_base = config.query_pre_attn_scalar if gemma else head_dim
    return Architecture(
        model_type=kind,
        norm_offset=1.0 if gemma else 0.0,
        qk_norm=kind in ("qwen3", "gemma3_text"),
        sandwich=gemma,
        layer_types=types,
        sliding_window=int(window) if window and SLIDING in types else None,
        scaling=float(scale_base) ** -0.5,
        final_softcap=getattr(config, "final_logit_softcapping", None) or None,
        rotary_by_type=gemma,
        activation=getattr(config, "hidden_activation", None) or config.hidden_act,
    )
