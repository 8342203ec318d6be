"""One TextWorld game being played by one agent, the player: load it, give the player a plan, step it. ROS-free.

textworld plays the game (a .z8 file made by textworld_games) and tracks its logic: after every command it reports
the admissible commands (those whose preconditions hold now), the symbolic facts, the score, won / lost and the
policy commands (the shortest way to win from the current state, recomputed after every command: the oracle).

A plan is a list of `command(text)` steps. Each world step executes the next one: a command among the admissible
ones (compared without case and extra spaces) goes to the game; any other command is not sent, because the game may
understand a synonym that textworld's tracker does not follow ("get knife" takes the knife, the facts would not say
so). It is a failure that changes nothing, and its outcome quotes what the game would have answered, asked of a
copy of the game ("You can't see any such thing."). A step without a plan step is idle (the player waits). The
episode ends when the game is won or lost, or after `max_steps` world steps.

The recipe is only known once the cookbook is read: textworld's policy never reads it (it knows the recipe), so
the oracle here reads it first: while it is unread, the oracle walks to the cookbook's room (the fewest rooms by the
game's map facts, opening closed doors), reads it, then follows the policy from there. The first reading also
becomes a `constraint` event, the recipe on one line, which memory keeps with the task.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import textworld
from textworld import EnvInfos

from brace_common.action_schema import Step
from brace_common.episode import PATH_EFFICIENCY, EpisodeMetrics
from brace_common.vocabulary import EntryKind

WORLD = "textworld"
"""Episode.world and WorldState.world of a TextWorld game."""
PLAYER = "player"
"""The one agent's id."""
COMMAND = "command"
"""The one action: type a command."""
TEXT = "text"
"""Its one parameter: the command's text."""

COMMANDS = "commands"                   # commands the game executed
FAILED_COMMANDS = "failed_commands"     # commands outside the admissible ones (not sent)
WALKTHROUGH_STEPS = "walkthrough_steps"  # the oracle's length from the start (metrics())
LOST = "lost"                           # 1 when the game was lost (e.g. an ingredient burnt), else 0
RECIPE_COMMAND = "examine cookbook"
"""The command that reads the recipe (tw-cooking puts the cookbook in the kitchen)."""
RECIPE_OBJECT = "cookbook"
"""The object the recipe is read from."""
DIRECTIONS = {"north_of": "north", "south_of": "south", "east_of": "east", "west_of": "west"}
"""textworld's room facts: `north_of(a, b)` says a lies north of b, so from b the player goes north to reach a."""

INFOS = EnvInfos(admissible_commands=True, facts=True, policy_commands=True, won=True, lost=True, score=True,
                 max_score=True, objective=True, description=True, inventory=True)
"""What textworld reports after every command."""


@contextmanager
def quiet_interpreter() -> Iterator[None]:
    """Without jericho's warnings that a TextWorld game is 'not fully supported' by its own action finder: textworld's
    tracker gives the admissible commands, score and moves instead."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module="jericho")
        yield


def clean(text: Optional[str]) -> str:
    """Game output as one line: without the prompt and status line the interpreter appends, whitespace collapsed."""
    text = text or ""
    prompt = text.rfind("\n>")
    if prompt >= 0 and "\n" not in text[prompt + 2:]:
        text = text[:prompt]
    return " ".join(text.split())


def recipe_of(feedback: str) -> Optional[str]:
    """The recipe in the cookbook's raw text as one line ('ingredients: a, b; directions: x, y'), None when
    `feedback` is not the cookbook."""
    if "Ingredients:" not in feedback or "Directions:" not in feedback:
        return None
    ingredients, directions = feedback.split("Ingredients:", 1)[1].split("Directions:", 1)

    def items(text: str) -> str:
        return ", ".join(line.strip() for line in text.splitlines() if line.strip())

    return f"ingredients: {items(ingredients)}; directions: {items(directions)}"


def normalise(command: str) -> str:
    """A command as compared with the admissible ones: lower case, single spaces."""
    return " ".join(str(command).lower().split())


def command_step(text: str) -> Step:
    """The plan step that types `text`."""
    return Step(COMMAND, {TEXT: text})


def room_of(facts: list, name: str) -> Optional[str]:
    """The room the object `name` is in (through what holds it: a table, a fridge), None when the facts place it
    in no room (carried)."""
    where = {a.name: b.name for f in facts if f.name in ("at", "on", "in") and len(f.arguments) == 2
             for a, b in [f.arguments]}
    rooms = {a.name for f in facts for a in f.arguments if a.type == "r"}
    seen = set()
    while name in where and name not in seen:
        seen.add(name)
        name = where[name]
        if name in rooms:
            return name
    return None


def way_to(facts: list, name: str) -> list[str]:
    """The fewest commands that take the player to the room of the object `name` (going, and opening the closed
    doors on the way), from the game's facts; [] when the player is there, or no way is known."""
    goal, start = room_of(facts, name), room_of(facts, "P")
    if goal is None or start is None or goal == start:
        return []
    doors = {(a.name, c.name): b.name for f in facts if f.name == "link" and len(f.arguments) == 3
             for a, b, c in [f.arguments]}
    closed = {f.arguments[0].name for f in facts if f.name == "closed" and len(f.arguments) == 1}
    exits: dict[str, list[tuple[str, str]]] = {}
    for f in facts:
        if f.name in DIRECTIONS and len(f.arguments) == 2:
            there, here = (a.name for a in f.arguments)
            exits.setdefault(here, []).append((DIRECTIONS[f.name], there))
    ways: dict[str, list[str]] = {start: []}
    frontier = [start]
    while frontier and goal not in ways:
        nearer = []
        for room in frontier:
            for direction, there in sorted(exits.get(room, [])):
                if there in ways:
                    continue
                door = doors.get((room, there))
                opening = [f"open {door}"] if door in closed else []
                ways[there] = [*ways[room], *opening, f"go {direction}"]
                nearer.append(there)
        frontier = nearer
    return ways.get(goal, [])


@dataclass
class Event:
    """What happened in one step (becomes context entries and, with an `action`, an execution outcome)."""

    agent: str
    step: int
    kind: EntryKind    # action_outcome | failure_trace | task_done | constraint (the recipe read)
    text: str
    success: bool = True
    action: str = ""   # COMMAND for the outcome of a command; "" for what the game reports besides (score, end)


class TextWorldGame:
    """A game and the player's plan: `set_plan`, `step`, the oracle, the verdict (`metrics`)."""

    def __init__(self, path: Path, max_steps: int) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1 (got {max_steps})")
        self.path = Path(path)
        self.max_steps = max_steps
        with quiet_interpreter():
            self.env = textworld.start(str(self.path), request_infos=INFOS)
            self.state = self.env.reset()
        self.objective = clean(self.state["objective"])
        self.walkthrough: tuple[str, ...] = tuple(self.state["policy_commands"] or ())
        self.t = 0
        self.plan: list[Step] = []
        self.cursor = 0
        self.commands = 0
        self.failed = 0
        self.recipe: Optional[str] = None  # the recipe once the cookbook was read
        self._oracle: tuple[tuple[int, int], list[str]] = ((-1, -1), [])  # (t, commands) -> the oracle's commands
        self.oracle_length = len(self.oracle_commands())

    # ------------------------------------------------------------------ what the game reports

    @property
    def admissible(self) -> list[str]:
        """The commands the game accepts now (sorted, as textworld gives them)."""
        return list(self.state["admissible_commands"] or ())

    @property
    def facts(self) -> list:
        """The game's symbolic state: textworld Propositions (name, arguments with name and type)."""
        return list(self.state["facts"] or ())

    @property
    def score(self) -> int:
        """Points so far (one per step of the recipe done)."""
        return int(self.state["score"] or 0)

    @property
    def max_score(self) -> int:
        """Points of a won game."""
        return int(self.state["max_score"] or 0)

    @property
    def won(self) -> bool:
        """The meal was eaten: the game is won."""
        return bool(self.state["won"])

    @property
    def lost(self) -> bool:
        """The game is lost (an ingredient burnt, something inedible eaten)."""
        return bool(self.state["lost"])

    @property
    def finished(self) -> bool:
        """Won, lost, or out of steps."""
        return self.won or self.lost or self.t >= self.max_steps

    @property
    def description(self) -> str:
        """What the player sees where it stands (the game's answer to 'look')."""
        return clean(self.state["description"])

    @property
    def inventory(self) -> str:
        """What the player carries (the game's answer to 'inventory')."""
        return clean(self.state["inventory"])

    def admissible_command(self, command: str) -> Optional[str]:
        """The admissible command `command` names (ignoring case and spaces), None when it names none."""
        return {normalise(c): c for c in self.admissible}.get(normalise(command))

    # ------------------------------------------------------------------ oracle

    def oracle_commands(self) -> list[str]:
        """The shortest command list that wins from the current state (empty once won or lost) for a player that
        reads the recipe first: while the cookbook is unread, the way to it, the reading, then textworld's policy
        from there; once read, textworld's policy."""
        key = (self.t, self.commands)
        if self._oracle[0] != key:
            self._oracle = (key, self._oracle_from_here())
        return list(self._oracle[1])

    def _oracle_from_here(self) -> list[str]:
        policy = list(self.state["policy_commands"] or ())
        if not policy or self.recipe is not None:
            return policy
        if RECIPE_COMMAND in self.admissible:
            return [RECIPE_COMMAND, *policy]
        route = way_to(self.facts, RECIPE_OBJECT)
        if not route:
            return policy
        with quiet_interpreter():
            twin = self.env.copy()
        try:
            state = None
            for command in route:
                with quiet_interpreter():
                    state, _, _ = twin.step(command)
            if RECIPE_COMMAND not in (state["admissible_commands"] or ()):
                return policy
            return [*route, RECIPE_COMMAND, *(state["policy_commands"] or ())]
        finally:
            twin.close()

    def oracle_plan(self) -> list[Step]:
        """The oracle's commands as plan steps."""
        return [command_step(c) for c in self.oracle_commands()]

    def agrees(self, plan: list[Step]) -> bool:
        """The plan's first command is the oracle's next one (both empty: agreeing)."""
        oracle = self.oracle_commands()
        if not plan or not oracle:
            return not plan and not oracle
        return plan[0].action == COMMAND and normalise(plan[0].parameters.get(TEXT, "")) == normalise(oracle[0])

    # ------------------------------------------------------------------ plan and step

    @property
    def current(self) -> Optional[Step]:
        """The plan step the next world step executes; None when the plan is done."""
        return self.plan[self.cursor] if self.cursor < len(self.plan) else None

    def set_plan(self, plan: list[Step]) -> bool:
        """Replace the player's plan; True when it differs from what was left of the old one."""
        changed = [(s.action, s.parameters) for s in plan] != [(s.action, s.parameters)
                                                                for s in self.plan[self.cursor:]]
        self.plan, self.cursor = list(plan), 0
        return changed

    def step(self) -> list[Event]:
        """One world step: the plan's next command (none: the player waits); what happened."""
        self.t += 1
        step = self.current
        if step is None:
            return []
        self.cursor += 1
        typed = str(step.parameters.get(TEXT, ""))
        command = self.admissible_command(typed)
        if command is None:
            self.failed += 1
            answer = self.answer(typed)
            return [Event(PLAYER, self.t, EntryKind.FAILURE_TRACE,
                          f"> {typed}: {answer} (not an admissible command here: nothing changed)", False, COMMAND)]
        before = self.score
        with quiet_interpreter():
            self.state, _, _ = self.env.step(command)
        self.commands += 1
        events = [Event(PLAYER, self.t, EntryKind.ACTION_OUTCOME, f"> {command}: {clean(self.state['feedback'])}",
                        True, COMMAND)]
        recipe = recipe_of(self.state["feedback"] or "") if self.recipe is None else None
        if recipe is not None:
            self.recipe = recipe
            events.append(Event(PLAYER, self.t, EntryKind.CONSTRAINT, f"recipe: {recipe}"))
        if self.score > before:
            end = ": the game is won" if self.won else ""
            events.append(Event(PLAYER, self.t, EntryKind.TASK_DONE, f"score {self.score} of {self.max_score}{end}"))
        if self.lost:
            events.append(Event(PLAYER, self.t, EntryKind.FAILURE_TRACE,
                                f"the game is lost after '{command}' (score {self.score} of {self.max_score})", False))
        return events

    def answer(self, command: str) -> str:
        """What the game would answer to `command` now, asked of a copy (the game itself does not change)."""
        with quiet_interpreter():
            twin = self.env.copy()
        try:
            with quiet_interpreter():
                state, _, _ = twin.step(command)
            return clean(state["feedback"]) or "no answer"
        except Exception as exc:  # noqa: BLE001 - the copy's interpreter failing must not end the episode
            return f"no answer ({type(exc).__name__})"
        finally:
            twin.close()

    def copy(self) -> TextWorldGame:
        """An independent game at the same state with the same plan (a lookahead's twin); `close` it after use."""
        twin = copy.copy(self)
        with quiet_interpreter():
            twin.env = self.env.copy()
        twin.plan = list(self.plan)
        return twin

    def close(self) -> None:
        """Stop the game's interpreter."""
        self.env.close()

    # ------------------------------------------------------------------ verdict

    def metrics(self) -> EpisodeMetrics:
        """The episode's verdict: won, steps, score of max_score as delivered of tasks; commands executed and failed,
        the oracle's length from the start (the way to the cookbook, the reading and the policy: the fewest commands
        that win for a player that does not know the recipe), lost, and the SPL-like efficiency (that length /
        commands when won, else 0)."""
        shortest = self.oracle_length
        efficiency = shortest / max(self.commands, shortest) if self.won and shortest else float(self.won)
        return EpisodeMetrics(success=self.won, steps=self.t, delivered=self.score, tasks=self.max_score,
                              metrics={PATH_EFFICIENCY: round(efficiency, 4), COMMANDS: self.commands,
                                       FAILED_COMMANDS: self.failed, WALKTHROUGH_STEPS: shortest,
                                       LOST: float(self.lost)})
