"""Typed, validated parameters of the corridor_world node (one field = one ROS parameter). ROS-free."""

from __future__ import annotations

from dataclasses import dataclass

from brace_common.config import SteppedWorldConfig, check_fields, param


@dataclass
class CorridorConfig(SteppedWorldConfig):
    """Parameters of corridor_world: the corridor and its episodes (pacing and readiness: SteppedWorldConfig)."""

    num_agents: int = param(2, "K: agents in the corridor", 1, 64)
    num_cells: int = param(8, "cells in the corridor", 2, 1000)
    seed: int = param(0, "seed of the first episode's start and goal cells; episode e uses seed + e", 0, 2**31 - 1)
    episodes: int = param(2, "episodes to run", 1, 10**6)
    max_steps: int = param(30, "steps after which an episode whose agents have not all arrived fails", 1, 10**6)
    max_plan_steps: int = param(2, "longest plan of the action schema published on world_info", 1, 64)

    def validate(self) -> None:
        """ConfigError naming the first invalid parameter."""
        check_fields(self)
        self.check_readiness()
