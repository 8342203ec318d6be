"""Schema-constrained plan decoding on a tiny model."""

from __future__ import annotations

import pytest
import torch
from test_context import buffer
from test_plan_parser import SCHEMA

from brace_common.vocabulary import CallStatus
from erecap_planner.call_path import CallOptions, CallRequest, LocalModel, PlannerCallPath
from erecap_planner.constrained import PLAN_OPEN, ConstrainedPlanDecoder, TokenTrie, step_json
from erecap_planner.plan_parser import parse_plan
from erecap_planner.predictor import PredictorBank
from erecap_planner.pruned_forward import CallAborted, ErecapModel
from erecap_planner.pruning import PruneSchedule
from erecap_planner.scoring import enumerate_steps
from erecap_planner.testing import byte_tokenizer, tiny


def test_trie_rejects_prefix_options():
    with pytest.raises(ValueError, match="prefix"):
        TokenTrie([[1, 2, 3], [1, 2]])
    trie = TokenTrie([[1, 2], [1, 3]])
    assert set(trie.root.children[1].children) == {2, 3}


@pytest.mark.parametrize("compressor", ["erecap", "recency"])
def test_constrained_plans_are_valid_and_bounded(compressor):
    model = tiny("llama")
    schedule = PruneSchedule(layers=(1, 3), keep_ratio=0.7)
    p = PlannerCallPath(LocalModel(model, byte_tokenizer(), schedule, PredictorBank.for_model(model.config, [1, 3])),
                        CallOptions(compressor=compressor, decoding="constrained"), SCHEMA)
    out = p.run(buffer(30), CallRequest("a", 600, 60_000, 120_000))
    assert out.status == CallStatus.OK, out.error
    assert 1 <= len(out.steps) <= SCHEMA.max_steps
    assert parse_plan(out.output_text, SCHEMA) == out.steps


def test_greedy_choice_matches_a_full_forward():
    """Each chosen token is the argmax over the allowed tokens of the unmodified model on the whole text."""
    model, tok = tiny("llama"), byte_tokenizer()
    runner = ErecapModel(model)
    steps = enumerate_steps(SCHEMA)
    prompt = tok("plan for agent a:", add_special_tokens=False)["input_ids"]
    dec = ConstrainedPlanDecoder(tok, steps, max_steps=2)
    out = dec.decode(runner, runner.prefill(torch.tensor(prompt)))
    # Replay: at every branch of the trie, the full-sequence logits must pick the same token.
    text_ids = tok(out.text, add_special_tokens=False)["input_ids"]
    open_len = len(tok(PLAN_OPEN, add_special_tokens=False)["input_ids"])
    with torch.inference_mode():
        logits = model(torch.tensor([prompt + text_ids])).logits[0]
    node, consumed, tries = dec.more.root, 0, 0
    for i, token in enumerate(text_ids[open_len:], start=len(prompt) + open_len):
        if len(node.children) > 1:
            allowed = list(node.children)
            best = allowed[int(torch.argmax(logits[i - 1, allowed]))]
            assert best == token
            tries += 1
        node = node.children[token]
        consumed += 1
        if node.option >= 0:
            node = dec.last.root if node.option >= len(steps) else node
    assert tries >= 1 and out.forwards == tries
    assert out.steps and all(step_json(s) in out.text for s in out.steps)


def test_token_ids_are_what_the_decoder_writes():
    """A fine-tune trains on token_ids(plan); walking the decoder's tries with them must reach that plan."""
    tok = byte_tokenizer()
    steps = enumerate_steps(SCHEMA)
    dec = ConstrainedPlanDecoder(tok, steps, max_steps=3)
    plan = [steps[0], steps[-1], steps[1]]
    ids = dec.token_ids(plan)
    assert tok.decode(ids) == PLAN_OPEN + ", ".join(step_json(s) for s in plan) + "]}"
    rest, chosen = ids[len(dec.open_ids):], []
    while rest:
        node = (dec.last if len(chosen) == 2 else dec.more).root
        while node.option < 0:
            node = node.children[rest.pop(0)]
        chosen.append(steps[node.option % len(steps)])
    assert chosen == plan
    with pytest.raises(ValueError):
        dec.token_ids(plan + [steps[0]])


def test_choice_mask_marks_where_the_decoder_branches():
    """Training weighs the tokens the model chooses: a token is a choice exactly where the trie has several
    continuations, so a decoder with one candidate step forces every token."""
    tok = byte_tokenizer()
    steps = enumerate_steps(SCHEMA)
    dec = ConstrainedPlanDecoder(tok, steps, max_steps=3)
    plan = [steps[0], steps[-1]]
    mask = dec.choice_mask(plan)
    assert len(mask) == len(dec.token_ids(plan)) and any(mask) and not all(mask)
    assert not any(mask[:len(dec.open_ids)])
    # the first token after the open is shared by every option ('{'); the action's name is chosen later
    assert mask[len(dec.open_ids)] is False
    single = ConstrainedPlanDecoder(tok, [steps[0]], max_steps=1)
    assert not any(single.choice_mask([steps[0]]))
    with pytest.raises(ValueError, match="not one of"):
        single.choice_mask([steps[1]])


def test_abort_is_checked_at_every_model_forward():
    model, tok = tiny("llama"), byte_tokenizer()
    runner = ErecapModel(model)
    dec = ConstrainedPlanDecoder(tok, enumerate_steps(SCHEMA), max_steps=3)
    pre = runner.prefill(torch.tensor(tok("x", add_special_tokens=False)["input_ids"]))
    with pytest.raises(CallAborted):
        dec.decode(runner, pre, should_abort=lambda: True)


def test_plan_length_follows_the_cap_of_the_call():
    from brace_common.action_schema import Step

    model = tiny("llama")
    tok = byte_tokenizer()
    steps = [Step("wait", {}), Step("move_to", {"target": "dock_1"})]
    decoder = ConstrainedPlanDecoder(tok, steps, max_steps=4)
    runner = ErecapModel(model)
    long_plan = _long_plan_prompt(decoder, runner, tok)
    assert len(decoder.decode(runner, runner.prefill(long_plan), max_steps=1).steps) == 1


def _long_plan_prompt(decoder: ConstrainedPlanDecoder, runner: ErecapModel, tok) -> torch.Tensor:
    """A prompt on which the tiny random model plans at least two steps."""
    for word in ("plan:", "next:", "go", "steps", "a", "bb", "ccc", "dddd"):
        ids = torch.tensor(tok(word, add_special_tokens=False)["input_ids"])
        if len(decoder.decode(runner, runner.prefill(ids)).steps) >= 2:
            return ids
    raise AssertionError("no prompt gave the random model a plan of two steps or more")


def test_a_plan_past_its_end_by_instant_ends_at_a_step_boundary():
    """With `end_by` already past, the plan is its first step (min_steps), each step still the model's choice;
    with `end_by` far ahead it is the plan decoded without one."""
    import time

    from brace_common.action_schema import Step

    model, tok = tiny("llama"), byte_tokenizer()
    steps = [Step("wait", {}), Step("move_to", {"target": "dock_1"})]
    decoder = ConstrainedPlanDecoder(tok, steps, max_steps=4)
    runner = ErecapModel(model)
    ids = _long_plan_prompt(decoder, runner, tok)
    free = decoder.decode(runner, runner.prefill(ids))
    late = decoder.decode(runner, runner.prefill(ids), end_by=time.monotonic() - 1.0)
    ahead = decoder.decode(runner, runner.prefill(ids), end_by=time.monotonic() + 3600.0)
    assert late.cut and late.steps == free.steps[:1]
    assert late.text == PLAN_OPEN + step_json(free.steps[0]) + "]}"
    assert not ahead.cut and ahead.steps == free.steps and not free.cut
    two = ConstrainedPlanDecoder(tok, steps, max_steps=4, min_steps=2)
    assert len(two.decode(runner, runner.prefill(ids), end_by=time.monotonic() - 1.0).steps) == 2


def test_a_call_path_ends_plans_at_the_slo_only_when_asked():
    """end_plan_at_slo: a call whose SLO has passed before decoding gets a one-step plan and says it was cut."""
    model = tiny("llama")
    path = {flag: PlannerCallPath(LocalModel(model, byte_tokenizer()),
                                  CallOptions(compressor="none", decoding="constrained", end_plan_at_slo=flag), SCHEMA)
            for flag in (False, True)}
    # An SLO of a microsecond has passed before the decode starts; the hard deadline is far.
    request = CallRequest("a", 600, 0.001, 120_000)
    kept, cut = path[False].run(buffer(30), request), path[True].run(buffer(30), request)
    assert kept.status == CallStatus.OK and cut.status == CallStatus.OK, (kept.error, cut.error)
    assert len(kept.steps) > 1 and not kept.cut_at_slo
    assert cut.cut_at_slo and cut.steps == kept.steps[:1]
