"""Packaged models: the names `model_path` accepts, where a missing package is named, and Gemma's chat format."""

from __future__ import annotations

import importlib.util

import pytest

from brace_common.packaged_data import GEMMA3_PACKAGE, gemma3_gguf
from erecap_planner.context import Block, ContextBuffer, Entry
from erecap_planner.models import GEMMA3, GEMMA_CHAT_TEMPLATE, PACKAGED, SMOLLM2, resolve_model_path
from erecap_planner.testing import byte_tokenizer


def test_model_path_names_the_packaged_models_or_a_folder(tmp_path):
    assert {SMOLLM2, GEMMA3} <= set(PACKAGED)
    with pytest.raises(FileNotFoundError, match="gemma3-270m.*config.json"):
        resolve_model_path(str(tmp_path / "no-such-model"))


def test_a_missing_gemma_package_is_named_with_its_pin(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("gemma3_270m") else real(name, *a))
    with pytest.raises(FileNotFoundError, match=GEMMA3_PACKAGE.replace(".", r"\.")):
        gemma3_gguf(tmp_path)


def test_the_gemma_template_opens_the_user_turn_with_the_system_text():
    tok = byte_tokenizer()
    tok.chat_template = GEMMA_CHAT_TEMPLATE
    messages = [{"role": "system", "content": "SYS"}, {"role": "user", "content": "ASK"}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == f"{tok.bos_token}<start_of_turn>user\nSYS\n\nASK<end_of_turn>\n<start_of_turn>model\n"
    answered = tok.apply_chat_template([*messages, {"role": "assistant", "content": "OK"}], tokenize=False)
    assert answered.endswith("ASK<end_of_turn>\n<start_of_turn>model\nOK<end_of_turn>\n")
    alone = tok.apply_chat_template(messages[1:], tokenize=False, add_generation_prompt=False)
    assert alone == f"{tok.bos_token}<start_of_turn>user\nASK<end_of_turn>\n"


def test_a_context_renders_through_the_gemma_template():
    tok = byte_tokenizer()
    tok.chat_template = GEMMA_CHAT_TEMPLATE
    buffer = ContextBuffer()
    buffer.add(Entry("agent_0", 0, Block.STATE, "at shelf_1"))
    rendered = buffer.render(tok, "agent_0", "Plan the next step for agent_0.")
    assert tok.decode(rendered.token_ids).startswith(f"{tok.bos_token}<start_of_turn>user\n")
    assert any(rendered.protected)
