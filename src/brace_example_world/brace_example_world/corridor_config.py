"""Typed, validated parameters of the corridor_world node (one field = one ROS parameter). ROS-free."""

from __future__ import annotations

from dataclasses import dataclass

from brace_common.config import ReadinessConfig, check_fields, param


@dataclass
class CorridorConfig(ReadinessConfig):
    """Parameters of corridor_world: the corridor, the episodes, and how the node steps them."""

    num_agents: int = param(2, "K: agents in the corridor", 1, 64)
    num_cells: int = param(8, "cells in the corridor", 2, 1000)
    seed: int = param(0, "seed of the first episode's start and goal cells; episode e uses seed + e", 0, 2**31 - 1)
    episodes: int = param(2, "episodes to run", 1, 10**6)
    max_steps: int = param(30, "steps after which an episode whose agents have not all arrived fails", 1, 10**6)
    max_plan_steps: int = param(2, "longest plan of the action schema published on world_info", 1, 64)
    step_period_s: float = param(0.1, "wall time between steps when no call is in flight (s, steady clock)",
                                 0.001, 60.0)
    hold_while_planning: bool = param(True, "do not step while an admitted call has not returned (lockstep)")
    hold_timeout_s: float = param(60.0, "longest hold for one call before stepping anyway (s)", 0.1, 3600.0)
    variant: str = param("", "label of the run's variant, copied into the episode messages")
    shutdown_when_done: bool = param(False, "exit the node's process after the last episode")

    def validate(self) -> None:
        """ConfigError naming the first invalid parameter."""
        check_fields(self)
        self.check_readiness()
