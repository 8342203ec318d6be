"""The cooking games' oracle decomposition: segments of the winning policy, and ReCAP's frames driven by the oracle's
answers winning a game of each level (π at every frame, ρ after every primitive)."""

from __future__ import annotations

from pathlib import Path

import pytest

from brace_common.action_schema import ActionSchema, Step
from brace_common.vocabulary import RecapNeed
from brace_memory.recap import RecapFrames
from sim_bridges.textworld.textworld_decomposition import (
    FINISH,
    GET,
    PREPARE,
    foods,
    oracle_answer,
    recipe_ingredients,
    segments,
)
from sim_bridges.textworld.textworld_feed import action_schema
from sim_bridges.textworld.textworld_game import PLAYER, TextWorldGame
from sim_bridges.textworld.textworld_games import GameSpec, generate_game


def test_the_policy_is_cut_where_a_command_names_an_ingredient_or_the_meal():
    policy = ["go east", "open fridge", "take pork chop from fridge", "cook pork chop with oven",
              "take knife from table", "dice pork chop with knife", "examine cookbook", "take red potato from counter",
              "slice red potato with knife", "prepare meal", "eat meal"]
    parts = segments(policy, ["pork chop", "red potato"])
    assert [(p.subtask.values_text() if p.subtask else None, len(p.commands)) for p in parts] == [
        ("get(pork chop)", 3), ("prepare(pork chop)", 3), (None, 1), ("get(red potato)", 1),
        ("prepare(red potato)", 1), ("finish()", 2)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("games")


@pytest.mark.parametrize("level, seed", [("L1", 1), ("L2", 3)])
def test_the_oracles_decomposition_wins_through_the_frames(folder, level, seed):
    game = TextWorldGame(generate_game(GameSpec(seed).at_level(level), folder), max_steps=120)
    try:
        schema = ActionSchema.from_dict(action_schema(game))
        assert set(schema.subtasks) == {GET, PREPARE, FINISH}
        assert set(recipe_ingredients(game)) <= set(schema.subtasks[GET].parameters["ingredient"].choices)
        frames = RecapFrames()
        frames.on_task(PLAYER, game.objective)
        calls, depths = 0, set()
        while not game.finished and calls < 400:
            state = frames.need(PLAYER)
            if state.need in (RecapNeed.DECOMPOSE, RecapNeed.REFINE):
                thought, subtasks = oracle_answer(game, frames.goal_step(PLAYER))
                for s in subtasks:   # every answer is one the game's schema accepts now
                    (schema.check_subtask if s.composite else schema.check)(
                        {"subtask" if s.composite else "action": s.step.action, "parameters": s.step.parameters})
                frames.on_plan(PLAYER, game.t, thought, subtasks)
                calls += 1
                depths.add(state.depth)
            elif state.need == RecapNeed.EXECUTE:
                step = frames.executable(PLAYER)[0]
                game.set_plan([step])
                events = game.step()
                frames.on_outcome(PLAYER, game.t, step.action, events[0].success, events[0].text)
                schema = ActionSchema.from_dict(action_schema(game))
            else:
                break
        assert game.won, (level, seed, game.t, calls)
        assert depths == {0, 1} and frames.counts["frames_opened"] > 2
        assert game.commands == len(game.walkthrough) or game.commands <= len(game.walkthrough) + 1
    finally:
        game.close()


def test_a_childs_answer_is_empty_once_the_policy_moved_past_its_goal(folder):
    game = TextWorldGame(generate_game(GameSpec(1).at_level("L1"), folder), max_steps=50)
    try:
        thought, subtasks = oracle_answer(game, Step(PREPARE, {"ingredient": "no such food"}))
        assert subtasks == [] and "done" in thought
        root = oracle_answer(game, None)[1]
        assert root[-1].step == Step(FINISH, {}) and root[-1].composite
    finally:
        game.close()


@pytest.mark.parametrize("level, seed, way", [("L1", 1, []), ("L2", 3, ["go east"] * 3)])
def test_the_root_names_no_ingredient_before_the_cookbook_is_read(folder, level, seed, way):
    game = TextWorldGame(generate_game(GameSpec(seed).at_level(level), folder), max_steps=50)
    try:
        ingredient = recipe_ingredients(game)[0]
        for command in [*way, "examine cookbook"]:   # from another room: the way to the cookbook first
            thought, subtasks = oracle_answer(game, None)
            assert ingredient not in thought and "cookbook" in thought
            assert [s.text() for s in subtasks] == [f"command({command})", "[finish()]"]
            game.set_plan([subtasks[0].step])
            game.step()
        thought, subtasks = oracle_answer(game, None)
        assert ingredient in thought and subtasks[0].step == Step(GET, {"ingredient": ingredient})
    finally:
        game.close()


def test_a_frame_opened_too_early_first_does_what_its_goal_needs(folder):
    game = TextWorldGame(generate_game(GameSpec(1).at_level("L1"), folder), max_steps=50)
    try:
        game.set_plan([oracle_answer(game, None)[1][0].step])
        game.step()  # the cookbook is read: the ingredient is still to get
        ingredient = recipe_ingredients(game)[0]
        thought, subtasks = oracle_answer(game, Step(FINISH, {}))
        assert "first" in thought and len(subtasks) == 1 and not subtasks[0].composite
        assert ingredient in subtasks[0].step.parameters["text"]
        other = next(f for f in foods(game) if f not in recipe_ingredients(game))
        assert oracle_answer(game, Step(GET, {"ingredient": other}))[1] == []
    finally:
        game.close()
