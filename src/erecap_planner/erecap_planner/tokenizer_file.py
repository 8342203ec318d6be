"""A model folder's tokenizer read with `tokenizers` and jinja2 alone: what a server-backed planner counts with.

It encodes, decodes and applies the chat template as transformers' fast tokenizer does (the same tokenizer.json, the
same sandboxed jinja2 settings), so a planner that sends its prompt to a server loads neither transformers nor torch.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Optional, Union

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "pad_token")
"""The special tokens a chat template sees by name (transformers' `special_tokens_map`)."""


def _token_text(value: Any) -> Optional[str]:
    return value.get("content") if isinstance(value, dict) else value


class TokenizerFile:
    """The tokenizer of one model folder (tokenizer.json, tokenizer_config.json, its chat template)."""

    def __init__(self, backend, config: dict, chat_template: str) -> None:
        self.backend = backend
        self.backend.no_truncation()
        self.backend.no_padding()
        self.special_tokens_map = {k: t for k in SPECIAL_TOKENS if (t := _token_text(config.get(k)))}
        self.chat_template = chat_template
        self._template = _compile(chat_template)

    @classmethod
    def load(cls, folder: Union[str, Path]) -> Optional[TokenizerFile]:
        """The folder's tokenizer, or None when it needs transformers (no tokenizer.json or chat template, or a
        decode clean-up only transformers implements)."""
        folder = Path(folder)
        config_path, template_path = folder / "tokenizer_config.json", folder / "chat_template.jinja"
        config = json.loads(config_path.read_text()) if config_path.is_file() else {}
        template = template_path.read_text() if template_path.is_file() else config.get("chat_template")
        if not (folder / "tokenizer.json").is_file() or not isinstance(template, str) \
                or config.get("clean_up_tokenization_spaces"):
            return None
        try:
            return cls(Tokenizer.from_file(str(folder / "tokenizer.json")), config, template)
        except jinja2.TemplateSyntaxError:  # e.g. {% generation %}, an extension of transformers' own
            return None

    def _token_id(self, name: str) -> Optional[int]:
        token = self.special_tokens_map.get(name)
        return self.backend.token_to_id(token) if token is not None else None

    @property
    def eos_token_id(self) -> Optional[int]:
        """The end-of-sequence token's id."""
        return self._token_id("eos_token")

    @property
    def pad_token_id(self) -> Optional[int]:
        """The padding token's id."""
        return self._token_id("pad_token")

    def __call__(self, text: Union[str, list[str]], add_special_tokens: bool = True,
                 return_offsets_mapping: bool = False) -> dict[str, list]:
        """{"input_ids": ..., ["offset_mapping": ...]} of one text or of each of a list."""
        batch = [text] if isinstance(text, str) else list(text)
        encodings = self.backend.encode_batch(batch, add_special_tokens=add_special_tokens)
        out: dict[str, list] = {"input_ids": [e.ids for e in encodings]}
        if return_offsets_mapping:
            out["offset_mapping"] = [list(e.offsets) for e in encodings]
        return out if not isinstance(text, str) else {k: v[0] for k, v in out.items()}

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        """The text of `ids`."""
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: list[dict], tokenize: bool = False,
                            add_generation_prompt: bool = False) -> str:
        """The chat template rendered over `messages` (text only: `tokenize` must be false)."""
        if tokenize:
            raise ValueError("TokenizerFile renders text only (tokenize=False)")
        chat = [{k: v for k, v in m.items() if v is not None} for m in messages]
        return self._template.render(messages=chat, tools=None, documents=None,
                                     add_generation_prompt=add_generation_prompt, **self.special_tokens_map)


def _compile(template: str):
    """The template in a sandbox set up as transformers sets up its own (same filters and globals)."""
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    env.globals["dict"] = dict
    return env.from_string(template)
