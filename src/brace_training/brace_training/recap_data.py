"""ReCAP decision points of TextWorld cooking games for fine-tuning: the prompt of each π / ρ call the planner makes
with `recap_recursion`, and the oracle's (T, S) for its frame (sim_bridges.textworld.textworld_decomposition) as the
target the constrained ReCAP decoder writes.

A game is played through the planner's own frame stack: every call answers the top frame by the oracle, its
primitive runs (or, at `detour_rate`, another harmless admissible command: the oracle's next answers repair it), and
ρ follows every step, as the bench's ReCAP rows call it. At `wrong_rate` the frames take a wrong decomposition
instead of the oracle's (`finish()` first, another food, the first subtask dropped): the target stays the oracle's,
and the next calls' targets are the repair a planner that erred must learn. At `read_rate` a point's prompt is what a
compressed row reads (the path's compressor at B_t, `CallPath.read`) rather than the whole context.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from brace_common.action_schema import ActionSchema, Step, Subtask
from brace_common.vocabulary import Mode, RecapKind, RecapNeed
from brace_memory.recap import subtask_limit
from brace_memory.system import MemorySystem, MemorySystemConfig
from erecap_planner.call_path import CallPath, CallRequest
from erecap_planner.candidates import enumerate_steps
from erecap_planner.memory_phase import MemoryUse
from sim_bridges.textworld.textworld_decomposition import FINISH, INGREDIENT, foods, oracle_answer
from sim_bridges.textworld.textworld_game import PLAYER, TEXT, TextWorldGame
from sim_bridges.textworld.textworld_games import GameSpec, generate_game

from .textworld_data import PLANNER, TOKEN_BUDGET, detour
from .textworld_play import TextWorldSession

MAX_CALLS = 400
"""The most calls one game's decision points are drawn from (an oracle game of L3 makes about 100)."""


@dataclass
class RecapPoint:
    """One call's prompt and the oracle's answer for its frame, with the schema's entries at that state."""

    prompt_ids: list[int]
    protect: list[bool]
    thought: str
    subtasks: list[Subtask]
    schema: ActionSchema
    seed: int
    step: int
    depth: int
    kind: RecapKind

    def entries(self) -> tuple[list[Step], list[Step], int]:
        """The decoder's primitives, composites and S bound at this point's state."""
        return (enumerate_steps(self.schema), enumerate_steps(self.schema.subtask_schema()),
                subtask_limit(self.schema.max_steps))


def recap_memory() -> MemoryUse:
    """A fresh memory with ReCAP's recursion, the planner's defaults for its share and window."""
    return MemoryUse(MemorySystem(MemorySystemConfig(recursion=True)), PLANNER.memory_share, PLANNER.recap_window)


def wrong_answer(subtasks: list[Subtask], foods: Sequence[str], rng: random.Random) -> Optional[list[Subtask]]:
    """A plausible wrong S for the oracle's `subtasks`: `finish()` moved first, another food for the first
    ingredient subtask, or the first subtask dropped (None: none of them differs)."""
    options = []
    composites = [i for i, s in enumerate(subtasks) if s.composite]
    finish = next((i for i in composites if subtasks[i].step.action == FINISH), None)
    if finish is not None and finish > 0:   # finish() already first: moving it changes nothing
        options.append([subtasks[finish], *subtasks[:finish], *subtasks[finish + 1:]])
    named = next((i for i in composites if INGREDIENT in subtasks[i].step.parameters), None)
    others = [f for f in foods if named is not None and f != subtasks[named].step.parameters[INGREDIENT]]
    if others:
        step = subtasks[named].step
        swapped = Subtask(Step(step.action, {INGREDIENT: rng.choice(others)}), True)
        options.append([*subtasks[:named], swapped, *subtasks[named + 1:]])
    if len(subtasks) > 1:
        options.append(subtasks[1:])
    return rng.choice(options) if options else None


def drawn(points: list[RecapPoint], per_game: int, rng: random.Random) -> list[RecapPoint]:
    """`per_game` of a game's points: those that close their frame first (up to a third: a frame is closed once, refined
    at every step, and a planner that never closes one repeats its last subtask), the rest drawn at random."""
    closing = [p for p in points if not p.subtasks][:per_game // 3]
    rest = [p for p in points if p.subtasks]
    return closing + rng.sample(rest, min(per_game - len(closing), len(rest)))


def recap_points(path: CallPath, seeds: Sequence[int], folder: Path, spec: GameSpec, detour_rate: float = 0.2,
                 per_game: int = 12, budget: int = TOKEN_BUDGET, wrong_rate: float = 0.0,
                 read_rate: float = 0.0) -> Iterator[RecapPoint]:
    """Up to `per_game` decision points of each seed's game, rendered by `path` (layout recap, recap_recursion), or
    at `read_rate` cut to `budget` by `path`'s compressor."""
    for seed in seeds:
        rng = random.Random(seed)
        memory = recap_memory()
        path.memory = memory
        system = memory.system
        game = TextWorldGame(generate_game(GameSpec(seed, spec.recipe, spec.take, spec.go, spec.cook, spec.cut,
                                                    spec.open), folder), max_steps=3 * 64)
        try:
            session = TextWorldSession(game, 0, seed, system)
            points: list[RecapPoint] = []
            while not game.finished and game.oracle_commands() and len(points) < MAX_CALLS:
                schema = session.schema()
                path.set_schema(schema)
                state = system.recap_open(PLAYER, game.t)
                request = CallRequest(PLAYER, budget, 0.0, 0.0, int(Mode.PARTIAL_REPLAN), game.t)
                read = rng.random() < read_rate
                ids, protect = (path.read if read else path.prompt)(session.buffer, request)
                thought, subtasks = oracle_answer(game, system.recap_goal(PLAYER), subtask_limit(schema.max_steps))
                kind = RecapKind.DECOMPOSE if state.need == RecapNeed.DECOMPOSE else RecapKind.REFINE
                points.append(RecapPoint(ids, protect, thought, subtasks, schema, seed, game.t, state.depth, kind))
                wrong = wrong_answer(subtasks, foods(game), rng) if rng.random() < wrong_rate else None
                steps, _ = system.recap_plan(PLAYER, game.t, thought, wrong if wrong is not None else subtasks)
                if steps:
                    oracle = str(steps[0].parameters[TEXT])
                    session.play(detour(game, oracle, rng) if rng.random() < detour_rate else oracle,
                                 Mode.PARTIAL_REPLAN)
            yield from sorted(drawn(points, per_game, rng), key=lambda p: p.step)
        finally:
            game.close()
            system.close()
