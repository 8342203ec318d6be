"""Typed, validated parameters of the textworld_world node (one field = one ROS parameter). ROS-free.

The game settings are tw-cooking's (`tw-make tw-cooking --recipe R --take T --go G --cook --cut --open --seed S`);
episode e plays the game of seed `seed + e`, made once into `game_dir` and reused by every later run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from brace_common.config import ConfigError, SteppedWorldConfig, check_fields, param

from .textworld_games import LEVELS, MAX_RECIPE, GameSpec


@dataclass
class TextWorldConfig(SteppedWorldConfig):
    """Parameters of textworld_world: the games, how long an episode may run, how the node runs episodes."""

    seed: int = param(0, "seed of the first episode's game; episode e plays the game of seed + e", 0, 2**31 - 1)
    episodes: int = param(3, "episodes to run (games of seeds seed, seed+1, ...)", 1, 10**6)
    level: str = param("", "difficulty ladder level (L1, L2 or L3: docs/textworld.md) whose settings replace recipe, "
                       "take, go, cook, cut and open; empty: those parameters as set")
    recipe: int = param(3, "ingredients in the recipe (tw-cooking --recipe)", 1, MAX_RECIPE)
    take: int = param(3, "of the recipe's ingredients, those the player must find (tw-cooking --take; the others "
                      "start in the inventory; at most recipe)", 0, MAX_RECIPE)
    go: int = param(9, "rooms (tw-cooking --go: 1, 6, 9 or 12)", 1, 12)
    cook: bool = param(True, "some ingredients must be cooked (tw-cooking --cook)")
    cut: bool = param(True, "some ingredients must be cut (tw-cooking --cut)")
    open: bool = param(True, "containers and doors start closed (tw-cooking --open)")
    max_steps: int = param(300, "world steps (one command each, or idle while the player has no plan) after which an "
                           "unfinished game fails", 1, 10**6)
    max_plan_steps: int = param(1, "longest plan of the planner's action schema (world_info), whose choices are the "
                                "admissible commands of the latest state", 1, 64)
    game_dir: str = param("~/.cache/brace/textworld", "folder of the generated games (each made once, offline, "
                          "and reused; '~' is the home folder)")

    def validate(self) -> None:
        """ConfigError naming the first invalid parameter."""
        check_fields(self)
        if self.level and self.level not in LEVELS:
            raise ConfigError("level", f"'{self.level}' is not a level ({', '.join(LEVELS)}) or empty")
        self.game(0).validate()
        if not self.game_dir.strip():
            raise ConfigError("game_dir", "must name a folder")
        self.check_readiness()

    def game(self, episode: int) -> GameSpec:
        """The game of episode `episode`."""
        spec = GameSpec(self.seed + episode, self.recipe, self.take, self.go, self.cook, self.cut, self.open)
        return spec.at_level(self.level) if self.level else spec

    def game_folder(self) -> Path:
        """`game_dir` with '~' expanded."""
        return Path(self.game_dir).expanduser()
