"""Oracle-labelled decision points of TextWorld cooking games (planner fine-tuning data). ROS-free.

Each training seed is a game of `sim_bridges.textworld` played by textworld's policy (the oracle: the shortest
command list that wins from the current state). At every step the planner's prompt is rendered as a call would
read it, in one of the memory configurations the benchmark compares (`CONFIGS`, drawn per game), and labelled with
the oracle's next command. With `detour` > 0 the player sometimes runs a harmless other admissible command instead
(walking, looking, opening, taking), so the data shows states a planner's own mistakes lead to; labels stay the
oracle's. Seeds used here are never the benchmark's (bench/textworld_memory.py holds seeds out).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from brace_common.session_graph import Embedder
from brace_memory.store import MemoryStore
from brace_memory.system import MemorySystem, MemorySystemConfig
from erecap_planner.call_path import CallPath, CallRequest
from erecap_planner.config import PlannerConfig
from erecap_planner.memory_phase import MemoryUse
from sim_bridges.textworld.textworld_game import PLAYER, TextWorldGame
from sim_bridges.textworld.textworld_games import GameSpec, generate_game

from .textworld_play import TextWorldSession


@dataclass(frozen=True)
class MemoryConfig:
    """One row of the memory comparison: the context layout, the memory modules, and whether the planner recurses
    (ReCAP Alg. 1: recap_recursion)."""

    name: str
    layout: str
    modules: tuple[str, ...]
    recursion: bool = False


CONFIGS = (MemoryConfig("flat", "focus", ()),
           MemoryConfig("goal_stack", "recap", ()),
           MemoryConfig("omniact", "focus", ("episodic", "reflective")),
           MemoryConfig("goal_stack_omniact", "recap", ("episodic", "reflective")))
"""Flat history (ReAct-like), the context tree's goal stack (layout recap, plans flat), OmniAct's episodic and
reflective memory, both. (Before the recursion was built, the goal-stack rows were named recap and recap_omniact.)"""
RECAP_CONFIGS = (MemoryConfig("recap", "recap", (), recursion=True),
                 MemoryConfig("recap_omniact", "recap", ("episodic", "reflective"), recursion=True))
"""ReCAP Alg. 1: the planner decomposes (π) and refines (ρ) the game's subtasks through its frame stack; alone and
with OmniAct's memory."""
GIG_CONFIGS = (MemoryConfig("gig", "recap", ("state_graph",)),
               MemoryConfig("gig_experience", "recap", ("state_graph", "experience")),
               MemoryConfig("gig_lookahead", "recap", ("state_graph", "lookahead")))
"""GiG's rows (Sec. 3): the session graph's loop warnings, with the experience bank, with Bounded Lookahead. GiG
prompts the current scene, not the whole history: the recap layout's window keeps the newest entries (and the goal
stack), so the prompt stays flat in the horizon."""
TEXTWORLD_HOPS, TEXTWORLD_CELL_M = 0, 0.0
"""A TextWorld state is the player's whole scene (one agent; nothing has a pose)."""
DETOURS = ("go ", "open ", "take ", "examine ", "look", "inventory")
"""Commands a detour may run: they cannot lose the game (cooking, cutting, eating and dropping can)."""
TOKEN_BUDGET = 512
"""B_t of the rendered calls (sizes the MEMORY block's reserve) and of the benchmark's calls."""
PLANNER = PlannerConfig()
"""The planner's defaults: memory_share and recap_window of every rendered call."""


@dataclass
class TextWorldPoint:
    """A rendered call and the oracle's next command."""

    prompt_ids: list[int]
    protect: list[bool]
    oracle: str
    admissible: list[str]
    seed: int
    step: int
    config: str


def memory_use(config: MemoryConfig, store: Optional[MemoryStore] = None,
               embed: Optional[Embedder] = None) -> MemoryUse:
    """A fresh in-process memory system of `config` (the planner's default share and window), on `store` (None:
    held in the process), with GiG's encoder `embed` for the experience bank (None: keys only)."""
    settings = MemorySystemConfig(config.modules, max_lines=PLANNER.memory_max_lines, scene_hops=TEXTWORLD_HOPS,
                                  scene_cell_m=TEXTWORLD_CELL_M, tau=PLANNER.experience_tau,
                                  lookahead_candidates=PLANNER.lookahead_candidates, recursion=config.recursion)
    system = MemorySystem(settings, store, embed=embed)
    return MemoryUse(system, PLANNER.memory_share, PLANNER.recap_window)


def configured(path: CallPath, config: MemoryConfig, memory: MemoryUse) -> CallPath:
    """`path` with `config`'s layout and `memory` (the model, tokenizer and compressor stay)."""
    path.layout, path.memory = config.layout, memory
    return path


def detour(game: TextWorldGame, oracle: str, rng: random.Random) -> str:
    """A harmless admissible command other than the oracle's, or the oracle's when there is none."""
    options = [c for c in game.admissible if c != oracle and c.startswith(DETOURS)]
    return rng.choice(options) if options else oracle


def decision_points(path: CallPath, seeds: Sequence[int], folder: Path, spec: GameSpec,
                    detour_rate: float = 0.2, per_game: int = 12, budget: int = TOKEN_BUDGET,
                    configs: Sequence[MemoryConfig] = CONFIGS) -> Iterator[TextWorldPoint]:
    """Up to `per_game` decision points of each seed's game (drawn over the game), rendered by `path` in a
    configuration drawn per game."""
    for seed in seeds:
        rng = random.Random(seed)
        config = rng.choice(list(configs))
        memory = memory_use(config)
        configured(path, config, memory)
        game = TextWorldGame(generate_game(GameSpec(seed, spec.recipe, spec.take, spec.go, spec.cook, spec.cut,
                                                    spec.open), folder), max_steps=3 * 64)
        try:
            session = TextWorldSession(game, 0, seed, memory.system)
            points = []
            while not game.finished and game.oracle_commands():
                oracle = game.oracle_commands()[0]
                path.set_schema(session.schema())
                ids, protect = path.prompt(session.buffer, CallRequest(PLAYER, budget, 0.0, 0.0,
                                                                       int(session.mode()), game.t))
                points.append(TextWorldPoint(ids, protect, oracle, game.admissible, seed, game.t, config.name))
                session.play(detour(game, oracle, rng) if rng.random() < detour_rate else oracle)
            yield from sorted(rng.sample(points, min(per_game, len(points))), key=lambda p: p.step)
        finally:
            game.close()
