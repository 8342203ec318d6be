"""TextWorld core (no ROS): games made offline and cached, the walkthrough wins, a command outside the admissible
ones fails and changes nothing, facts become the world state, the schema's choices are the admissible commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textworld.logic import Proposition, Variable

from brace_common.action_schema import ActionSchema, Fault, PlanError
from brace_common.config import ConfigError
from brace_common.episode import PATH_EFFICIENCY
from brace_common.validation import InvalidInput
from brace_common.vocabulary import Activity, Block, EntryKind, Predicate
from brace_common.world_state import TASK_LOST, Relation
from sim_bridges.textworld import textworld_feed as feed
from sim_bridges.textworld.textworld_config import TextWorldConfig
from sim_bridges.textworld.textworld_game import (
    COMMAND,
    COMMANDS,
    FAILED_COMMANDS,
    PLAYER,
    RECIPE_COMMAND,
    TEXT,
    WALKTHROUGH_STEPS,
    Event,
    TextWorldGame,
    clean,
    command_step,
    way_to,
)
from sim_bridges.textworld.textworld_games import GameError, GameSpec, GameSupply, cached, game_file, generate_game
from sim_bridges.textworld.textworld_state import TASK, lookahead, world_state

SPEC = GameSpec(seed=11, recipe=2, take=2, go=6)
"""Two ingredients to find in six rooms, to cook and cut, behind closed doors and lids (a 10-20 command game)."""


@pytest.fixture(scope="module")
def game_path(tmp_path_factory) -> Path:
    """One game for the module (made in ~2.5 s)."""
    return generate_game(SPEC, tmp_path_factory.mktemp("games"))


@pytest.fixture
def game(game_path):
    """The module's game from its start (each test its own interpreter)."""
    played = TextWorldGame(game_path, max_steps=200)
    yield played
    played.close()


def play(game: TextWorldGame, commands: list[str]) -> list:
    """Execute `commands` one step each; every event."""
    game.set_plan([command_step(c) for c in commands])
    events = []
    for _ in commands:
        events += game.step()
    return events


def test_a_game_is_made_once_into_its_folder_and_found_there(game_path):
    assert game_path == game_file(SPEC, game_path.parent) and cached(SPEC, game_path.parent) == game_path
    assert game_path.with_suffix(".json").is_file() and game_path.name == f"{SPEC.name}.z8"
    made = game_path.stat().st_mtime_ns
    assert generate_game(SPEC, game_path.parent) == game_path and game_path.stat().st_mtime_ns == made
    assert not [p for p in game_path.parent.iterdir() if p.name.startswith(".")]  # no private folder left behind
    assert "recipe2-take2-go6-cook-cut-open-seed11" in SPEC.name
    assert GameSpec(seed=11, recipe=2, take=2, go=6, cook=False).name != SPEC.name


def follow_oracle(game: TextWorldGame, until=lambda command: False) -> tuple[list[str], list]:
    """The oracle's next command, one step at a time, until the game ends or `until` the next command: the commands
    played and every event."""
    commands, events = [], []
    while not game.finished and not until(game.oracle_commands()[0]):
        commands.append(game.oracle_commands()[0])
        events += play(game, commands[-1:])
    return commands, events


def test_the_oracle_reads_the_recipe_once_and_wins_with_every_point(game):
    assert game.walkthrough and RECIPE_COMMAND not in game.walkthrough  # textworld's policy knows the recipe
    commands, events = follow_oracle(game)
    assert game.won and not game.lost and game.finished and game.score == game.max_score > 0
    assert commands.count(RECIPE_COMMAND) == 1 and len(commands) == game.oracle_length >= len(game.walkthrough) + 1
    recipe = [e for e in events if e.kind == EntryKind.CONSTRAINT]
    assert len(recipe) == 1 and recipe[0].text.startswith("recipe: ingredients: ") and not recipe[0].action
    assert "; directions: " in recipe[0].text and recipe[0].text.endswith("prepare meal")
    assert game.recipe and game.recipe in recipe[0].text
    outcomes = [e for e in events if e.action == COMMAND]
    assert len(outcomes) == len(commands) and all(e.success for e in outcomes)
    assert [e.kind for e in outcomes] == [EntryKind.ACTION_OUTCOME] * len(commands)
    points = [e for e in events if e.kind == EntryKind.TASK_DONE]
    assert len(points) == game.max_score and points[-1].text.endswith("the game is won")
    m = game.metrics()
    assert m.success and m.steps == len(commands) and (m.delivered, m.tasks) == (game.score, game.max_score)
    assert m.metric(PATH_EFFICIENCY) == 1.0 and m.metric(COMMANDS) == m.metric(WALKTHROUGH_STEPS) == len(commands)
    assert world_state(game, 0).entity(TASK).state == "won"
    again = TextWorldGame(game.path, max_steps=200)
    try:
        follow_oracle(again, until=lambda command: command == RECIPE_COMMAND)
        assert [e.kind for e in play(again, [RECIPE_COMMAND])] == [EntryKind.ACTION_OUTCOME, EntryKind.CONSTRAINT]
        assert RECIPE_COMMAND not in again.oracle_commands()  # read again: the cookbook's text, no second recipe
        assert [e.kind for e in play(again, [RECIPE_COMMAND])] == [EntryKind.ACTION_OUTCOME]
    finally:
        again.close()


def test_out_of_the_cookbooks_reach_the_oracle_walks_to_it_and_reads_first(tmp_path):
    game = TextWorldGame(generate_game(GameSpec(3).at_level("L2"), tmp_path), max_steps=80)
    try:
        way = way_to(game.facts, "cookbook")
        assert way == ["go east"] * 3 and RECIPE_COMMAND not in game.admissible  # three rooms from the kitchen
        assert game.oracle_commands()[:4] == [*way, RECIPE_COMMAND]
        commands, _ = follow_oracle(game)
        assert game.won and commands.index(RECIPE_COMMAND) == 3 and len(commands) == game.oracle_length
        assert way_to(game.facts, "cookbook") == []  # in the cookbook's room
    finally:
        game.close()


def test_the_way_opens_closed_doors_and_none_is_found_without_a_map():
    def fact(name: str, *arguments: str) -> Proposition:   # arguments "name:type"; names may hold spaces
        return Proposition(name, [Variable(*a.split(":")) for a in arguments])

    facts = [fact("at", "P:P", "hall:r"), fact("at", "table:s", "kitchen:r"), fact("on", "cookbook:o", "table:s"),
             fact("north_of", "kitchen:r", "hall:r"), fact("link", "hall:r", "oak door:d", "kitchen:r"),
             fact("closed", "oak door:d")]
    assert way_to(facts, "cookbook") == ["open oak door", "go north"]
    assert way_to(facts[:3], "cookbook") == [] and way_to(facts, "nothing") == []


def test_a_command_outside_the_admissible_ones_fails_and_changes_nothing(game):
    facts, admissible, oracle = list(map(str, game.facts)), game.admissible, game.oracle_commands()
    events = play(game, ["eat the moon"])
    assert [(e.kind, e.success, e.action) for e in events] == [(EntryKind.FAILURE_TRACE, False, COMMAND)]
    assert "eat the moon" in events[0].text and "nothing changed" in events[0].text
    assert "You can't" in events[0].text or "not a verb" in events[0].text   # the game's own answer, from a copy
    assert list(map(str, game.facts)) == facts and game.admissible == admissible and game.oracle_commands() == oracle
    assert game.t == 1 and game.commands == 0 and game.metrics().metric(FAILED_COMMANDS) == 1
    play(game, [c.upper() for c in oracle])   # any case: the admissible command it names
    assert game.won


def test_after_a_deviation_the_oracle_is_asked_again_and_still_wins(game):
    first = game.oracle_commands()[0]
    detour = next(c for c in game.admissible if (c.startswith("examine") or c in ("look", "inventory"))
                  and c != RECIPE_COMMAND)
    assert game.agrees([command_step(first)]) and not game.agrees([command_step(detour)])
    play(game, [detour])
    assert game.oracle_commands()[0] == first  # examining changes nothing the policy needs
    go = next((c for c in game.admissible if c.startswith("go ") and c != first), None)
    if go is not None:
        play(game, [go])
        assert game.oracle_commands()[0] != first  # from elsewhere, another way to win
    follow_oracle(game)
    assert game.won and game.metrics().metric(PATH_EFFICIENCY) < 1.0


def test_facts_become_entities_and_relations(game):
    state = world_state(game, 3)
    assert (state.world, state.episode, state.step) == ("textworld", 3, 0)
    room = state.related(Predicate.AT.value, PLAYER)[0].object
    assert state.entity(room).type == "room" and state.entity(PLAYER).type == "player"
    assert state.activity(PLAYER).activity == Activity.IDLE
    assert Relation(PLAYER, Predicate.ASSIGNED, TASK) in state.relations and state.entity(TASK).state == "open"
    kinds = {e.type for e in state.entities}
    assert {"room", "food", "supporter", "container", "door"} <= kinds
    facts = {str(f) for f in game.facts}
    placed = [r for r in state.relations if r.predicate in ("in", "on")]
    assert placed and all(any(f.startswith(f"{r.predicate}({r.subject}") for f in facts) for r in placed)
    doors = [e.id for e in state.entities if e.type == "door"]
    assert any(r.predicate == "link" and r.subject == doors[0] for r in state.relations)  # link(r, d, r') chained
    take = next(c for c in game.oracle_commands() if c.startswith("take "))
    item = take.removeprefix("take ").split(" from ")[0]
    play(game, game.oracle_commands()[: game.oracle_commands().index(take) + 1])
    after = world_state(game, 3)
    assert Relation(PLAYER, Predicate.HOLDING, item) in after.relations
    assert not [r for r in after.relations if r.subject == item and r.predicate in ("in", "on")]


def test_opening_changes_the_entity_state(game):
    opening = next(c for c in game.oracle_commands() if c.startswith("open "))
    thing = opening.removeprefix("open ")
    play(game, game.oracle_commands()[: game.oracle_commands().index(opening)])
    assert "closed" in world_state(game, 0).entity(thing).state
    play(game, [opening])
    assert "open" in world_state(game, 0).entity(thing).state.split(", ")


def test_the_planners_schema_enumerates_the_admissible_commands(game):
    schema = ActionSchema.from_dict(json.loads(json.dumps(feed.action_schema(game))))
    assert list(schema.actions) == [COMMAND] and schema.max_steps == 1
    assert list(schema.actions[COMMAND].parameters[TEXT].choices) == game.admissible
    assert schema.check_step(COMMAND, {TEXT: game.admissible[0]}).parameters == {TEXT: game.admissible[0]}
    with pytest.raises(PlanError) as refused:
        schema.check_step(COMMAND, {TEXT: "eat the moon"})
    assert refused.value.reason == Fault.UNKNOWN_CHOICE
    play(game, game.oracle_commands()[:1])
    moved = ActionSchema.from_dict(feed.action_schema(game, max_steps=3))
    assert list(moved.actions[COMMAND].parameters[TEXT].choices) == game.admissible and moved.max_steps == 3


def test_the_world_takes_command_plans_and_refuses_malformed_ones():
    steps = feed.plan_from_steps([(COMMAND, '{"text": "Open Fridge"}'), (COMMAND, '{"text": "eat meal"}')])
    assert [s.parameters[TEXT] for s in steps] == ["Open Fridge", "eat meal"]
    assert feed.plan_from_steps([]) == []
    for raw, reason in (([("move_to", '{"target": "kitchen"}')], Fault.UNKNOWN_SKILL),
                        ([(COMMAND, "{}")], Fault.MISSING_PARAMETER),
                        ([(COMMAND, '{"text": 3}')], Fault.BAD_PARAMETER_TYPE),
                        ([(COMMAND, '{"text": "  "}')], Fault.BAD_PARAMETER_VALUE),
                        ([(COMMAND, json.dumps({TEXT: "go " * 100}))], Fault.BAD_PARAMETER_VALUE),
                        ([(COMMAND, '{"text": "look"}')] * (feed.MAX_PLAN_STEPS + 1), Fault.LONG_PLAN)):
        with pytest.raises(InvalidInput) as refused:
            feed.plan_from_steps(raw)
        assert refused.value.reason == reason


def test_context_entries_open_the_episode_and_follow_each_step(game):
    opening = feed.episode_entries(game, 2, 13)
    assert [(e.block, e.kind) for e in opening] == [(Block.TASK, "task"), (Block.CONSTRAINTS, "constraint")]
    assert game.objective in opening[0].text and "seed 13" in opening[0].text
    first = feed.step_entries(game, [])
    assert [(e.block, e.kind) for e in first] == [(Block.STATE, "observation")]
    assert all(c in first[0].text for c in game.admissible) and f"Score 0 of {game.max_score}" in first[0].text
    wrong = feed.step_entries(game, play(game, ["dance"]))
    assert [(e.block, e.kind) for e in wrong] == [(Block.HISTORY, "failure_trace"), (Block.STATE, "observation")]
    follow_oracle(game, until=lambda command: command.startswith("take "))
    entries = feed.step_entries(game, play(game, game.oracle_commands()[:1]))
    assert [(e.block, e.kind) for e in entries] == [(Block.HISTORY, "action_outcome"), (Block.TASK, "task_done"),
                                                   (Block.STATE, "observation")]
    assert all(e.agent_id == PLAYER and e.step == game.t for e in entries)
    report = feed.agent_reports(game)[0]
    assert (report.x, report.y, report.has_goal) == (game.commands, 1.0, False)
    read = feed.event_entries([Event(PLAYER, 3, EntryKind.ACTION_OUTCOME, "> examine cookbook: ..."),
                               Event(PLAYER, 3, EntryKind.CONSTRAINT, "recipe: ingredients: carrot")])
    assert [(e.block, e.kind) for e in read] == [(Block.HISTORY, "action_outcome"), (Block.CONSTRAINTS, "constraint")]


def test_lookahead_predicts_on_a_copy(game):
    before, oracle = list(map(str, game.facts)), game.oracle_commands()
    good = lookahead(game, 0, PLAYER, command_step(oracle[0]))
    assert good.valid and good.state.step == 1 and oracle[0] in good.reason
    bad = lookahead(game, 0, PLAYER, command_step("eat the moon"))
    assert not bad.valid and "nothing changed" in bad.reason
    assert not lookahead(game, 0, "someone", command_step("look")).valid
    assert list(map(str, game.facts)) == before and game.t == 0
    play(game, oracle[:1])
    assert world_state(game, 0).relations == good.state.relations
    assert not feed.answer_lookahead(game, 0, 0, 0, PLAYER, COMMAND, '{"text": "look"}').valid  # step 0 is gone
    assert feed.answer_lookahead(game, 0, 0, 1, PLAYER, COMMAND, '{"text": "look"}').valid


def test_an_unfinished_game_fails_after_max_steps(game_path):
    game = TextWorldGame(game_path, max_steps=3)
    try:
        for _ in range(3):
            assert not game.finished and game.step() == []  # no plan: the player waits
        m = game.metrics()
        assert game.finished and not m.success and m.steps == 3 and m.metric(PATH_EFFICIENCY) == 0.0
    finally:
        game.close()


def test_game_output_is_one_line_without_prompt_or_status():
    assert clean("\nYou take the knife.\n\n\n>                      -= Kitchen =-0/1") == "You take the knife."
    assert clean("-= Kitchen =-\nYou're in\n  the kitchen.") == "-= Kitchen =- You're in the kitchen."
    assert clean(None) == ""


@pytest.mark.parametrize("values, parameter", [({"take": 4, "recipe": 3}, "take"), ({"go": 7}, "go"),
                                               ({"recipe": 6}, "recipe"), ({"game_dir": " "}, "game_dir"),
                                               ({"max_plan_steps": 0}, "max_plan_steps"),
                                               ({"level": "L4"}, "level")])
def test_invalid_settings_name_their_parameter(values, parameter):
    with pytest.raises(ConfigError) as refused:
        TextWorldConfig(**values).validate()
    assert refused.value.parameter == parameter


def test_a_level_of_the_ladder_replaces_the_game_settings():
    config = TextWorldConfig(seed=4, level="L1", recipe=5, take=5, go=12)
    config.validate()
    assert config.game(2) == GameSpec(seed=6, recipe=1, take=1, go=1, cook=False, cut=False, open=False)
    assert TextWorldConfig(level="L2").game(0).name == "tw-cooking-recipe2-take2-go6-cook-cut-open-seed0"
    assert TextWorldConfig(level="L3").game(0) == TextWorldConfig().game(0)   # L3: the settings every run had


def test_the_supply_makes_games_in_a_child_and_reports_its_failure(tmp_path):
    supply = GameSupply(tmp_path)
    small, broken = GameSpec(seed=2, recipe=1, take=1, go=1), GameSpec(seed=2, go=7)
    try:
        supply.request(small)
        supply.request(broken)
        with pytest.raises(GameError, match="invalid settings"):
            wait_ready(supply, broken)
        assert wait_ready(supply, small) == cached(small, tmp_path) is not None
        with pytest.raises(GameError, match="not requested"):
            supply.ready(GameSpec(seed=3))
    finally:
        supply.close()


def wait_ready(supply: GameSupply, spec: GameSpec) -> Path:
    """Poll until the child is done (its own exit, not a clock)."""
    supply.children[spec][0].wait()
    return supply.ready(spec)


def test_a_command_that_loses_the_game_projects_a_lost_task(game):
    """The veto's signal: eating an ingredient the recipe needs loses the game, and the lookahead's state says so
    (task_0 lost) while the live game goes on."""
    follow_oracle(game, until=lambda command: any(c.startswith("eat ") for c in game.admissible))
    eat = next(c for c in game.admissible if c.startswith("eat "))
    projected = lookahead(game, 0, PLAYER, command_step(eat))
    assert not projected.valid and "lost" in projected.reason and projected.state.task_lost(PLAYER)
    assert projected.state.entity(TASK).state == TASK_LOST and not game.finished
    harmless = lookahead(game, 0, PLAYER, command_step("look"))
    assert harmless.valid and not harmless.state.task_lost(PLAYER)
