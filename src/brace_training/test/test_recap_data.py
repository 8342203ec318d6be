"""ReCAP decision points of a TextWorld game: the oracle's answers through the planner's frame stack, rendered as
ReCAP calls read them, and their targets in the constrained decoder's tokens."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from brace_common.vocabulary import RecapKind
from brace_training.recap_data import recap_memory, recap_points
from brace_training.recap_finetune_cli import decoder, examples_of
from erecap_planner.call_path import CallOptions, LocalModel, PlannerCallPath
from erecap_planner.plan_parser import parse_recap
from erecap_planner.pruning import PruneSchedule
from erecap_planner.recap_decoding import thought_tokens
from erecap_planner.testing import byte_tokenizer, tiny
from sim_bridges.textworld.textworld_games import GameSpec


@pytest.fixture(scope="module")
def points(tmp_path_factory) -> list:
    path = PlannerCallPath(LocalModel(tiny(), byte_tokenizer(), PruneSchedule((), 1.0)),
                           CallOptions(compressor="none", layout="recap", recursion=True), memory=recap_memory())
    folder = tmp_path_factory.mktemp("games")
    return list(recap_points(path, [2], Path(folder), GameSpec(0).at_level("L1"), detour_rate=0.0, per_game=100,
                             budget=4096))


def test_every_call_of_an_oracle_game_is_a_point_pi_first_then_rho_at_two_depths(points):
    assert points[0].kind == RecapKind.DECOMPOSE and points[0].depth == 0
    assert {p.depth for p in points} == {0, 1} and {p.kind for p in points} == {RecapKind.DECOMPOSE, RecapKind.REFINE}
    first_child = next(p for p in points if p.depth == 1)
    text = byte_tokenizer().decode(first_child.prompt_ids)
    assert "GOALS player:" in text and "subtask 1: [" in text and "Decompose '[" in text


def test_a_points_target_is_the_decoders_tokens_of_the_oracles_answer(points):
    tok = byte_tokenizer()
    examples = examples_of(tok, points[:4])
    vocabulary = thought_tokens(tok)
    for point, example in zip(points[:4], examples, strict=True):
        assert example.prompt_ids == point.prompt_ids and len(example.choice) == len(example.target_ids)
        answer = tok.decode(example.target_ids)
        cut = tok.decode(tok(point.thought, add_special_tokens=False)["input_ids"][:32])   # byte tokens: cut at 32
        assert parse_recap(answer, point.schema) == (cut.strip(), point.subtasks)
        assert decoder(tok, point, vocabulary).token_ids(point.thought, point.subtasks) == example.target_ids


def test_a_wrong_decomposition_differs_from_the_oracles_in_one_plausible_way():
    from brace_common.action_schema import Step, Subtask
    from brace_training.recap_data import wrong_answer

    oracle = [Subtask(Step("get", {"ingredient": "carrot"}), True), Subtask(Step("prepare", {"ingredient": "carrot"}),
                                                                             True), Subtask(Step("finish", {}), True)]
    seen = set()
    for seed in range(40):
        wrong = wrong_answer(oracle, ["carrot", "apple"], random.Random(seed))
        assert wrong is not None and wrong != oracle
        seen.add(tuple(s.text() for s in wrong))
    assert ("[finish()]", "[get(carrot)]", "[prepare(carrot)]") in seen
    assert ("[get(apple)]", "[prepare(carrot)]", "[finish()]") in seen
    assert ("[prepare(carrot)]", "[finish()]") in seen
    assert wrong_answer([Subtask(Step("finish", {}), True)], ["carrot"], random.Random(0)) is None


def test_wrong_decompositions_are_repaired_and_compressed_points_fit_the_budget(tmp_path):
    path = PlannerCallPath(LocalModel(tiny(), byte_tokenizer(), PruneSchedule((), 1.0)),
                           CallOptions(compressor="recency", layout="recap", recursion=True), memory=recap_memory())
    points = list(recap_points(path, range(2, 6), tmp_path, GameSpec(0).at_level("L1"), detour_rate=0.0, per_game=400,
                               budget=600, wrong_rate=0.5, read_rate=0.5))
    lengths = [len(p.prompt_ids) for p in points]
    assert min(lengths) <= 600 < max(lengths)   # both kinds of prompt
    # a frame opened too early is taught to do what its goal needs first
    assert any(p.depth == 1 and p.thought.endswith("first what it needs") for p in points)
