"""The cooking games' composite subtasks and the oracle's decomposition (ReCAP Alg. 1's (T, S) per frame). ROS-free.

A game's schema offers three composite subtasks besides `command(text)`: `get(ingredient)` (find it and take it),
`prepare(ingredient)` (cut and cook it as the recipe says, the knife fetched on the way) and `finish()` (prepare the
meal, eat it); `ingredient` is one of the game's foods. The oracle segments textworld's winning policy from the
current state: a command naming a recipe ingredient closes a segment (taking it: `get`; cutting or cooking it:
`prepare`), `prepare meal` and `eat meal` are `finish`, and every other command (going, opening, taking the knife)
belongs to the segment it leads to; reading the cookbook is a primitive of the root.

The oracle answers from what the player knows. Before the cookbook is read, the root's answer is to read it, then
`finish()`: the ingredients are not known yet, and the ρ after the reading names them. Once read, the root's answer
is the policy's segments as composites. A child frame plays the policy's next command until its goal's segment is
done, also when the planner opened it too early (`finish()` before the ingredients are in hand): the frame then
does what its goal needs first. A goal the policy no longer holds (done, or not in the recipe) has an empty S, and
the frame closes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from brace_common.action_schema import Step, Subtask

from .textworld_game import RECIPE_COMMAND, TextWorldGame, command_step

GET, PREPARE, FINISH = "get", "prepare", "finish"
"""The composite subtasks of a cooking game."""
INGREDIENT = "ingredient"
"""The parameter naming the food a `get` or `prepare` is for."""
MEAL_COMMANDS = ("prepare meal", "eat meal")
"""The commands of `finish`."""
TAKE_VERBS = ("take", "pick")
"""A command starting with one of these that names an ingredient is its `get`."""


def foods(game: TextWorldGame) -> list[str]:
    """The names of the game's foods (entities of type f), sorted."""
    return sorted({a.name for f in game.facts for a in f.arguments if a.type == "f" and a.name})


def recipe_ingredients(game: TextWorldGame) -> list[str]:
    """The recipe's ingredients in the recipe's order (the facts `base(food, ingredient_k)`)."""
    found = {a.name: int(b.name.rsplit("_", 1)[-1]) for f in game.facts if f.name == "base" and len(f.arguments) == 2
             for a, b in [f.arguments] if b.name.rsplit("_", 1)[-1].isdigit()}
    return sorted(found, key=found.get)


def subtasks_schema(game: TextWorldGame) -> dict:
    """The schema's `subtasks` section for the current game: get / prepare of one of its foods, and finish."""
    choice = {INGREDIENT: {"type": "string", "choices": foods(game)}}
    return {GET: dict(choice), PREPARE: dict(choice), FINISH: {}}


def owner(command: str, ingredients: list[str]) -> Optional[Step]:
    """The composite subtask `command` closes (None: it leads to the next one, or reads the cookbook)."""
    text = " ".join(command.lower().split())
    if text in MEAL_COMMANDS:
        return Step(FINISH, {})
    for name in sorted(ingredients, key=len, reverse=True):
        if name in text:
            return Step(GET if text.split()[0] in TAKE_VERBS else PREPARE, {INGREDIENT: name})
    return None


@dataclass
class Segment:
    """Commands of the policy that one subtask covers (`subtask` None: the cookbook read, a primitive)."""

    subtask: Optional[Step]
    commands: list[str] = field(default_factory=list)


def segments(commands: list[str], ingredients: list[str]) -> list[Segment]:
    """The policy's commands cut into subtasks, in order; consecutive commands of one subtask are one segment."""
    out: list[Segment] = []
    pending: list[str] = []
    for command in commands:
        pending.append(command)
        if command == RECIPE_COMMAND:
            out.append(Segment(None, pending))
            pending = []
            continue
        closes = owner(command, ingredients)
        if closes is None:
            continue
        if out and out[-1].subtask == closes:
            out[-1].commands.extend(pending)
        else:
            out.append(Segment(closes, pending))
        pending = []
    if pending:  # commands after the last ingredient or meal command: the last subtask's
        if out:
            out[-1].commands.extend(pending)
        else:
            out.append(Segment(Step(FINISH, {}), pending))
    return out


def _thought(subtask: Step, ingredients: list[str]) -> str:
    if subtask.action == GET:
        return f"find the {subtask.parameters[INGREDIENT]} and take it"
    if subtask.action == PREPARE:
        return f"cut and cook the {subtask.parameters[INGREDIENT]} as the recipe says"
    return "prepare the meal in the kitchen, then eat it"


def oracle_answer(game: TextWorldGame, goal: Optional[Step], limit: int = 0) -> tuple[str, list[Subtask]]:
    """The oracle's (T, S) for a frame whose goal is `goal` (None: the root, the agent's task); at most `limit`
    subtasks (0: all), the rest left to a later ρ."""
    ingredients = recipe_ingredients(game)
    parts = segments(game.oracle_commands(), ingredients)
    if goal is None:
        if game.recipe is None and parts and parts[0].subtask is None:
            subtasks = [Subtask(command_step(parts[0].commands[0])), Subtask(Step(FINISH, {}), True)]
            return "read the cookbook for the recipe, then get and prepare each ingredient", subtasks[:limit or None]
        subtasks = [Subtask(command_step(p.commands[0])) if p.subtask is None else Subtask(p.subtask, True)
                    for p in parts][:limit or None]
        return f"the recipe needs {', '.join(ingredients)}: get and prepare each, then the meal", subtasks
    owners = [p.subtask for p in parts]
    if goal not in owners:
        return f"{goal.values_text()} is done", []
    thought = _thought(goal, ingredients)
    if owners[0] != goal:
        thought = f"{thought}; first what it needs"
    return thought, [Subtask(command_step(parts[0].commands[0]))]
