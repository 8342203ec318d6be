"""The warehouse haystack (OmniAct App. E, Alg. 1): cases, their balance and splits, and Table 1's rows streaming them."""

from __future__ import annotations

import pytest

from brace_common.vocabulary import Block, EntryKind
from brace_training.haystack_cases import (
    CONSTRAINT_KINDS,
    GAP_STEPS,
    case_id,
    case_ids,
    make_case,
    make_cases,
    parse_case_id,
    turn_summary,
)
from brace_training.haystack_memory import BLIND_ROW, ROWS, call_request, constraint_form, raw_tokens, row_named, stream
from erecap_planner.call_path import CallOptions, LocalModel, PlannerCallPath
from erecap_planner.context import DEFAULT_SYSTEM_PROMPT
from erecap_planner.scoring import enumerate_steps
from erecap_planner.testing import byte_tokenizer, tiny

TOKENIZER = byte_tokenizer()


def count(text: str) -> int:
    return len(TOKENIZER(text, add_special_tokens=False)["input_ids"])


def test_a_case_is_seeded_by_its_id_and_fills_the_budget_after_its_seed_episodes():
    case = make_case("test-dock_closing-0003", 6000, count)
    assert case == make_case("test-dock_closing-0003", 6000, count)  # SHA-256 of the id: the same case
    assert case.history != make_case("train-dock_closing-0003", 6000, count).history
    assert case.history_tokens >= 6000
    assert case.history_tokens == sum(count(e.line() + "\n") for e in case.history)
    assert all(e.block == Block.HISTORY for e in case.history)
    steps = [e.step for e in case.history]
    assert steps == sorted(steps) and case.step > steps[-1]
    constraints = [e for e in case.history if e.kind == EntryKind.CONSTRAINT.value]
    assert len(constraints) == len(CONSTRAINT_KINDS) and case.constraint in constraints
    # Alg. 1: the seed episodes come first, each closed by a boundary; every irrelevant event is closed by one too
    seeds = case.history[:4 * len(CONSTRAINT_KINDS)]
    assert [e.kind for e in seeds].count(EntryKind.TASK_DONE.value) == len(CONSTRAINT_KINDS)
    assert case.history[-1].kind == EntryKind.TASK_DONE.value
    assert 0.6 <= case.alpha <= 1.6


def test_irrelevant_events_are_gap_steps_apart_and_about_their_drawn_length():
    case = make_case("test-handling-0000", 20_000, count)
    events: dict[int, list] = {}
    first = 4 * len(CONSTRAINT_KINDS)
    for entry in case.history[first:]:
        events.setdefault(entry.step // GAP_STEPS, []).append(entry)
    lengths = [sum(count(e.line() + "\n") for e in group) for group in events.values()]
    # l ~ U(0.5, 1.5) a_c L0, and an event stops growing at its first detail past l
    assert min(lengths) >= 0.5 * 0.6 * 96 * 0.5 and max(lengths) <= 1.5 * 1.6 * 96 * 1.5
    assert all(group[-1].kind == EntryKind.TASK_DONE.value for group in events.values())
    ids = {e.agent_id for e in case.history}
    assert "supervisor" in ids and any(i.startswith("agent_") for i in ids)


def test_the_query_offers_exactly_two_calls_and_names_both_options():
    for kind in CONSTRAINT_KINDS:
        case = make_case(case_id("test", kind, 1), 2000, count)
        assert {c.action + str(c.parameters) for c in enumerate_steps(case.schema)} == {
            case.compliant.action + str(case.compliant.parameters),
            case.violating.action + str(case.violating.parameters)}
        task = case.query[0]
        assert task.block == Block.TASK and task.agent_id == case.agent_id and case.query[1].block == Block.STATE
        names = [v for step in (case.compliant, case.violating) for v in step.parameters.values()]
        assert all(name in task.text for name in names)
        assert case.satisfied(case.compliant) and not case.satisfied(case.violating) and not case.satisfied(None)


@pytest.mark.parametrize("kind", CONSTRAINT_KINDS)
def test_which_call_is_compliant_is_balanced_so_a_constraint_blind_planner_scores_half(kind):
    cases = make_cases("test", 8, [1500], count, kinds=[kind])

    def blind(case):  # a fixed preference that ignores the constraint: the lower id, or handing off
        steps = enumerate_steps(case.schema)
        if kind == "handling":
            return next(s for s in steps if s.action == "handoff")
        return min(steps, key=lambda s: int(s.parameters["target"].rsplit("_", 1)[1]))

    assert sum(c.satisfied(blind(c)) for c in cases) == 4
    assert sum(c.satisfied(enumerate_steps(c.schema)[0]) for c in cases) in range(1, 8)  # the order is drawn too


def test_case_ids_name_their_split_and_a_malformed_one_is_refused():
    assert case_ids("train", 2, ["relocation"]) == ["train-relocation-0000", "train-relocation-0001"]
    assert parse_case_id("test-handling-0012") == ("test", "handling", 12)
    assert make_case("train-handling-0002", 1000, count).split == "train"
    for bad in ("dev-handling-0001", "test-fragile-0001", "test-handling-1", "test-handling-0001\n"):
        with pytest.raises(ValueError, match="is not a case id"):
            parse_case_id(bad)
    with pytest.raises(ValueError, match="budget_tokens"):
        make_case("test-handling-0000", 0, count)


def test_the_blind_case_lacks_only_its_queried_constraint():
    case = make_case("test-relocation-0004", 3000, count)
    blind = case.without_constraint()
    assert blind.blind and len(blind.history) == len(case.history) - 1
    assert case.constraint not in blind.history and blind.query == case.query


def test_turn_summary_keeps_a_turn_s_first_sentence_within_its_word_cap():
    assert turn_summary("audit of shelf_3: 12 totes counted. row 4 is tidy; no spill.") == \
        "audit of shelf_3: 12 totes counted."
    assert turn_summary("one two three four five", max_words=3) == "one two three ..."


def test_rows_stream_the_case_and_only_full_memory_keeps_the_constraint_past_the_window():
    case = make_case("test-dock_closing-0002", 12_000, count)
    model = tiny("llama")
    path = PlannerCallPath(LocalModel(model, TOKENIZER),
                           CallOptions(compressor="none", decoding="candidates", max_context_tokens=4000), case.schema)
    request = call_request(case, 2048, 60_000.0, 120_000.0)
    kept = {}
    for row in (*ROWS, BLIND_ROW):
        streamed = stream(case, row)
        path.memory = streamed.memory
        ids, _ = path.prompt(streamed.buffer, request)
        assert len(ids) <= 4000 + 2048 // 4
        kept[row.name] = constraint_form(case, row) in TOKENIZER.decode(ids)
    assert kept == {"raw_history": False, "window_10": False, "turn_summary": False, "episodic_only": False,
                    "full_memory": True, "blind_full_memory": False}
    assert raw_tokens(case, TOKENIZER, DEFAULT_SYSTEM_PROMPT) > 12_000
    full = stream(case, row_named("full_memory"))
    path.memory = full.memory
    out = path.run(full.buffer, request)
    assert len(out.steps) == 1 and out.steps[0].action == "move_to"  # the candidates decoding picks one call


def test_training_examples_come_from_train_cases_whose_prompt_holds_the_constraint(tmp_path):
    import random

    from brace_training.haystack_training import haystack_points
    from erecap_planner.models import load_model
    from erecap_planner.scoring import candidate_text
    from erecap_planner.testing import saved_tiny_llama

    model, tok = load_model(saved_tiny_llama(tmp_path / "tiny"), device="cpu", dtype="float32")
    points = list(haystack_points(model, tok, 6, 100_000, random.Random(0)))
    assert len(points) == 6 and len({case.case_id for case, _, _ in points}) == 6
    for case, row, example in points:
        assert case.split == "train" and not case.blind
        assert constraint_form(case, row_named(row)) in tok.decode(example.prompt_ids)
        assert tok.decode(example.target_ids).endswith(candidate_text(case.compliant))
        assert len(example.protect) == len(example.prompt_ids)
    short = list(haystack_points(model, tok, 2, 300, random.Random(0)))  # a window that loses most constraints
    assert all(constraint_form(c, row_named(r)) in tok.decode(e.prompt_ids) for c, r, e in short)
