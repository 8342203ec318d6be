"""Tiny randomly initialised Llama / Qwen2 / Mistral models so tests stay fast (no weights on disk)."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM

_COMMON = dict(vocab_size=272, hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=4096)


def tiny(kind: str = "llama", attn: str = "sdpa", seed: int = 0, **overrides):
    torch.manual_seed(seed)
    params = {**_COMMON, **overrides}
    if kind == "llama":
        model = LlamaForCausalLM(LlamaConfig(**params))
    elif kind == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**params))
    elif kind == "mistral":
        model = MistralForCausalLM(MistralConfig(sliding_window=None, **params))
    else:
        raise ValueError(kind)
    model.config._attn_implementation = attn
    return model.eval()


def saved_tiny_llama(folder) -> str:
    """A tiny Llama with the byte tokenizer saved as a local model folder (what `model_path` names)."""
    from tiny_tokenizer import byte_tokenizer

    tiny("llama").save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return str(folder)
