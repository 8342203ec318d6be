"""A TextWorld game as a world state (scene graph from its symbolic facts) and its one-step lookahead. ROS-free.

textworld's facts are propositions over typed variables: `at(P, kitchen: r)`, `in(carrot: f, fridge: c)`,
`on(knife: o, counter: s)`, `closed(fridge: c)`, `link(kitchen: r, door: d, pantry: r)`. They become:

- entities: every variable the facts name, with its id (the game's name: what commands say; the player `P` is
  `player`, the recipe `recipe`), a readable type (room, door, container, supporter, object, food, key, player,
  and textworld's own: oven, stove, toaster, meal, recipe, ingredient) and as `state` its one-argument facts, sorted
  and comma-separated ("closed", "cookable, cuttable, edible, raw, uncut");
- relations: a two-argument fact is subject - predicate - object (`in(carrot, fridge)` -> carrot in fridge);
  what the inventory `I` holds is `player holding <item>`; a fact of three or more arguments is a chain through them
  (`link(kitchen, door, pantry)` -> kitchen link door, door link pantry);
- the task: entity `task_0` (state open, won or lost; its objective and score as attributes), `player assigned
  task_0`;
- the player's activity: the command it executes next, from its plan.

The facts are the game's whole truth (what a closed fridge holds included): Observability FULL. Nothing has a pose.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Optional

from brace_common.action_schema import Step
from brace_common.vocabulary import Activity, Predicate
from brace_common.world_state import TASK_LOST, TASK_TYPE, AgentActivity, Entity, Relation, WorldState, parameters_text

from .textworld_game import PLAYER, WORLD, TextWorldGame

TYPES = {"r": "room", "d": "door", "c": "container", "s": "supporter", "o": "object", "f": "food", "k": "key",
         "P": "player", "t": "thing", "RECIPE": "recipe"}
"""textworld's type codes as entity types (other types keep their own name: oven, stove, toaster, meal, ...)."""
INVENTORY = "I"
"""The variable of the player's inventory: what is in it, the player holds."""
IDS = {"P": PLAYER, "RECIPE": "recipe"}
"""Variables whose id is not their name."""
TASK = "task_0"
"""The entity of the game's one task (the objective)."""


def _id(variable) -> str:
    return IDS.get(variable.name, variable.name)


def scene_graph(facts: Iterable) -> tuple[list[Entity], list[Relation]]:
    """Entities (in order of first mention, the player first) and relations of textworld facts."""
    types: dict[str, str] = {PLAYER: "player"}
    states: dict[str, list[str]] = {PLAYER: []}
    relations: dict[Relation, None] = {}   # ordered and without repeats
    for fact in facts:
        args = list(fact.arguments)
        for variable in args:
            if variable.name != INVENTORY:
                types.setdefault(_id(variable), TYPES.get(variable.type, variable.type))
                states.setdefault(_id(variable), [])
        if len(args) == 1:
            if args[0].name != INVENTORY:
                states[_id(args[0])].append(fact.name)
        elif len(args) == 2 and args[1].name == INVENTORY:
            relations[Relation(PLAYER, Predicate.HOLDING, _id(args[0]))] = None
        else:
            ids = [PLAYER if v.name == INVENTORY else _id(v) for v in args]
            for subject, obj in zip(ids[:-1], ids[1:], strict=True):
                relations[Relation(subject, fact.name, obj)] = None
    entities = [Entity(i, types[i], ", ".join(sorted(set(states[i])))) for i in types]
    return entities, list(relations)


def activity(game: TextWorldGame) -> AgentActivity:
    """The player's activity: executing its plan's next command, or idle."""
    step: Optional[Step] = game.current
    if step is None:
        return AgentActivity(PLAYER, Activity.IDLE, index=game.cursor, plan_steps=len(game.plan))
    return AgentActivity(PLAYER, Activity.EXECUTING, step.action, parameters_text(step.parameters), game.cursor,
                         len(game.plan))


def task_state(game: TextWorldGame) -> str:
    """The task's state: won, lost or open."""
    return "won" if game.won else TASK_LOST if game.lost else "open"


def world_state(game: TextWorldGame, episode: int) -> WorldState:
    """The game at its current step as a scene graph (see the module docstring)."""
    entities, relations = scene_graph(game.facts)
    entities.append(Entity(TASK, TASK_TYPE, task_state(game), attributes={
        "text": game.objective, "score": str(game.score), "max_score": str(game.max_score)}))
    relations.append(Relation(PLAYER, Predicate.ASSIGNED, TASK))
    return WorldState(WORLD, episode, game.t, tuple(entities), tuple(relations), (activity(game),))


@dataclass(frozen=True)
class Prediction:
    """A one-step lookahead: whether the command can run (is admissible), the game's answer, the state after."""

    valid: bool
    reason: str
    state: Optional[WorldState]   # None when nothing could be predicted (another agent than the player)


def lookahead(game: TextWorldGame, episode: int, agent: str, step: Step) -> Prediction:
    """What one world step would give if the player executed `step`: the game's own step on a copy. The live game
    is not changed."""
    if agent != PLAYER:
        return Prediction(False, f"unknown agent {agent}: the player is the only agent", None)
    twin = game.copy()
    try:
        twin.set_plan([step])
        events = twin.step()
        failed = [e for e in events if not e.success]
        reason = "; ".join(e.text for e in failed or events)
        return Prediction(not failed, reason, world_state(twin, episode))
    finally:
        twin.close()
