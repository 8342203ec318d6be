"""Constrained decoding of ReCAP answers on a tiny model: always parseable, the model's choices replayable from the
token ids a fine-tune trains on, no composite at the deepest frame."""

from __future__ import annotations

import pytest
import torch
from test_plan_parser import RECAP_SCHEMA

from brace_common.action_schema import Step, Subtask
from erecap_planner.candidates import enumerate_steps
from erecap_planner.plan_parser import parse_recap
from erecap_planner.pruned_forward import ErecapModel
from erecap_planner.recap_decoding import RecapDecoder, subtask_json
from erecap_planner.testing import byte_tokenizer, tiny

COMPOSITES = [Step("deliver", {"object": o, "dock": d}) for o in ("cup", "box") for d in ("dock_1", "dock_2")]


def decoder(think_tokens: int = 6, max_steps: int = 3) -> RecapDecoder:
    return RecapDecoder(byte_tokenizer(), enumerate_steps(RECAP_SCHEMA), COMPOSITES, max_steps, think_tokens)


def run(dec: RecapDecoder, seed: int, deepest: bool = False):
    model, tok = tiny("llama", seed=seed), byte_tokenizer()
    runner = ErecapModel(model)
    prompt = tok("decompose the task of agent a:", add_special_tokens=False)["input_ids"]
    return model, prompt, dec.decode(runner, runner.prefill(torch.tensor(prompt)), deepest=deepest)


@pytest.mark.parametrize("seed", range(6))
def test_every_answer_parses_and_replays_from_its_training_ids(seed):
    dec = decoder()
    model, prompt, out = run(dec, seed)
    thought, subtasks = parse_recap(out.text, RECAP_SCHEMA)
    assert (thought, subtasks) == (out.thought, out.subtasks)
    assert len(subtasks) <= dec.max_steps and len(dec.encode(thought)) <= dec.think_tokens
    assert out.steps == [s.step for s in subtasks if not s.composite]
    ids, mask = dec.token_ids(out.thought, out.subtasks), dec.choice_mask(out.thought, out.subtasks)
    assert len(ids) == len(mask) == out.tokens
    with torch.inference_mode():
        logits = model(torch.tensor([prompt + ids])).logits[0]
    thought_end = len(dec.open_ids) + len(dec.encode(out.thought))
    # Each branch of the subtask tries is the argmax over its children, as decoding chose it.
    position = thought_end + len(dec.close_ids)
    pieces = [subtask_json(st) + ("]}" if k == len(out.subtasks) - 1 else ", ")
              for k, st in enumerate(out.subtasks)] or ["]}"]
    branches = 0
    for k, piece in enumerate(pieces):
        node = dec._trie_at(dec.tries[False], k)[0].root
        for token in dec.encode(piece):
            if len(node.children) > 1:
                allowed = list(node.children)
                assert allowed[int(torch.argmax(logits[len(prompt) + position - 1, allowed]))] == token
                branches += 1
            node = node.children[token]
            position += 1
    assert position == len(ids) and branches == sum(mask[thought_end + 1:])
    # Each thought token is the argmax over the thought vocabulary and the closing token, as decoding chose it.
    allowed = dec.vocabulary + [dec.close_ids[0]]
    for i in range(len(dec.open_ids), min(thought_end + 1, len(ids))):
        if mask[i]:
            best = allowed[int(torch.argmax(logits[len(prompt) + i - 1, allowed]))]
            assert best == ids[i]


def test_the_deepest_frame_writes_no_composite_and_no_thought_when_off():
    dec = decoder(think_tokens=0)
    for seed in range(8):
        _, _, out = run(dec, seed, deepest=True)
        assert out.thought == "" and not any(s.composite for s in out.subtasks)


def test_training_ids_of_a_composite_an_empty_s_and_a_refused_entry():
    dec = decoder()
    answer = [Subtask(Step("wait", {})), Subtask(COMPOSITES[1], composite=True)]
    ids = dec.token_ids("go", answer)
    text = byte_tokenizer().decode(ids)
    assert parse_recap(text, RECAP_SCHEMA) == ("go", answer)
    assert subtask_json(answer[1]) in text
    assert parse_recap(byte_tokenizer().decode(dec.token_ids("", [])), RECAP_SCHEMA) == ("", [])
    with pytest.raises(ValueError, match="not one of"):
        dec.token_ids("", [Subtask(Step("fly", {}))])
    with pytest.raises(ValueError, match="at most 3"):
        dec.token_ids("", [answer[0]] * 4)
