"""Test support of erecap_planner (and of the packages that test with its planner): tiny models, built in memory.

Tiny randomly initialised Llama / Qwen2 / Mistral models and a byte-level
tokenizer with a chat template, so tests stay fast and read no weights. The
byte tokenizer has one token per byte plus chat special tokens (vocabulary
260, within the tiny models' 272).
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_COMMON = dict(vocab_size=272, hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=4096)


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
    """A tiny random model of `kind` ('llama', 'qwen2', 'mistral') in eval mode."""
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
    tiny("llama").save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return str(folder)
