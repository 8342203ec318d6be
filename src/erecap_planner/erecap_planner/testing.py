"""Test support of erecap_planner (and of the packages that test with its planner): tiny models, built in memory.

Tiny randomly initialised models of every supported family (Llama, Qwen2,
Mistral, Qwen3, Gemma 3; `KINDS`) and a byte-level
tokenizer with a chat template, so tests stay fast and read no weights. The
byte tokenizer has one token per byte plus chat special tokens (vocabulary
260, within the tiny models' 272).
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_COMMON = dict(vocab_size=272, hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=4096)
KINDS = ("llama", "qwen2", "mistral", "qwen3", "gemma3")
"""The tiny models' families (`tiny`)."""
TINY_WINDOW = 16
"""The sliding window of the tiny Gemma 3 (and of a windowed Mistral): shorter than the tests' prompts."""


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer with a chat template."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", bos_token="<|im_start|>",
                                  pad_token="<|pad|>", additional_special_tokens=["<|endoftext|>"])
    tok.chat_template = _TEMPLATE
    return tok


def tiny(kind: str = "llama", attn: str = "sdpa", seed: int = 0, **overrides):
    """A tiny random model of `kind` (`KINDS`) in eval mode. Qwen3 and Gemma 3 get random norm weights (their
    QK-norm and Gemma's (1 + weight) convention then matter); Gemma 3 has sliding-window layers of TINY_WINDOW
    tokens (its 270M model's pattern: five local layers, then a global one)."""
    torch.manual_seed(seed)
    params = {**_COMMON, **overrides}
    if kind == "llama":
        model = LlamaForCausalLM(LlamaConfig(**params))
    elif kind == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**params))
    elif kind == "mistral":
        model = MistralForCausalLM(MistralConfig(**{"sliding_window": None, **params}))
    elif kind == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(**{"head_dim": 16, **params}))
    elif kind == "gemma3":
        model = Gemma3ForCausalLM(Gemma3TextConfig(**{"head_dim": 16, "query_pre_attn_scalar": 16,
                                                      "sliding_window": TINY_WINDOW, **params}))
    else:
        raise ValueError(f"unknown kind {kind!r} (one of {KINDS})")
    if kind in ("qwen3", "gemma3"):
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("norm.weight"):
                    p.add_(torch.randn_like(p) * 0.2)
    model.config._attn_implementation = attn
    return model.eval()


def saved_tiny(folder, kind: str = "llama") -> str:
    """A tiny model of `kind` with the byte tokenizer saved as a local model folder (what `model_path` names)."""
    tiny(kind).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return str(folder)


def saved_tiny_llama(folder) -> str:
    """A tiny Llama saved as a local model folder (`saved_tiny`)."""
    return saved_tiny(folder, "llama")
