"""TextWorld decision points: a game played by its policy through TextWorldSession, rendered as calls read it."""

from __future__ import annotations

from pathlib import Path

import pytest

from brace_memory.system import MemorySystem, MemorySystemConfig
from brace_training.textworld_data import CONFIGS, decision_points, detour
from brace_training.textworld_play import TextWorldSession
from erecap_planner.call_path import CallOptions, LocalModel, PlannerCallPath
from erecap_planner.pruning import PruneSchedule
from erecap_planner.testing import byte_tokenizer, tiny
from sim_bridges.textworld.textworld_game import TextWorldGame
from sim_bridges.textworld.textworld_games import GameSpec, generate_game

SPEC = GameSpec(seed=3, recipe=1, take=1, go=1)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("games")
    generate_game(SPEC, folder)
    return folder


def test_the_policy_wins_through_a_session_and_memory_folds_at_each_point(folder):
    game = TextWorldGame(generate_game(SPEC, folder), max_steps=100)
    memory = MemorySystem(MemorySystemConfig(("episodic", "reflective")))
    session = TextWorldSession(game, 0, SPEC.seed, memory)
    while not game.finished:
        session.play(game.oracle_commands()[0])
    assert game.won and session.calls == len(game.walkthrough) + 1  # the policy, and reading the recipe
    records = memory.episodic.records("player")
    # The first plan closes the opening's segment, then one per point: refining the one-command plan is no boundary.
    assert len(records) == game.score + 1 and records[-1].fields["topic"] == "task done"
    assert memory.goal_stack("player")[0].startswith("task: ")  # a point closes the plan, the task stays
    game.close()


def test_decision_points_render_each_configuration_and_label_with_the_policy(folder):
    path = PlannerCallPath(LocalModel(tiny(), byte_tokenizer(), PruneSchedule((), 1.0)),
                           CallOptions(compressor="none", decoding="candidates"))
    points = list(decision_points(path, [SPEC.seed], folder, SPEC, detour_rate=0.0, per_game=50,
                                  budget=4096, configs=[CONFIGS[-1]]))  # byte tokens: a record line is ~300
    assert points and all(p.oracle in p.admissible for p in points)
    assert [p.step for p in points] == sorted(p.step for p in points)
    late = points[-1]
    text = byte_tokenizer().decode(late.prompt_ids)
    assert "GOALS player" in text and "MEMORY:" in text and len(late.protect) == len(late.prompt_ids)


def test_a_detour_is_harmless_and_never_the_oracle(folder):
    import random

    game = TextWorldGame(generate_game(SPEC, folder), max_steps=100)
    oracle = game.oracle_commands()[0]
    for seed in range(5):
        choice = detour(game, oracle, random.Random(seed))
        assert choice == oracle or (choice != oracle and choice.startswith(("go ", "open ", "take ", "examine ",
                                                                            "look", "inventory")))
    game.close()
