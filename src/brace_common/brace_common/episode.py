"""What an episode achieved: the fields of an Episode EVENT_END message, as plain dataclasses."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class EpisodeMetrics:
    """A world's verdict on one episode."""

    success: bool            # every task delivered
    steps: int               # controller steps the episode took
    delivered: int           # tasks delivered
    tasks: int               # tasks in the episode
    path_efficiency: float   # SPL-like: shortest / travelled moves when successful, else 0
    coordination_wait: int   # agent-steps spent waiting or blocked
    near_misses: int         # agent pairs closer than d_min, summed over steps
    collisions: int          # agent pairs on the same cell, summed over steps


@dataclass(frozen=True)
class EpisodeResult(EpisodeMetrics):
    """An episode of a run: its metrics, which episode and seed it was, and the plans its agents received."""

    episode: int = 0
    seed: int = 0
    plans: int = 0           # plans the agents received
    plans_agreeing: int = 0  # of which the first step equalled the oracle's on arrival

    def as_row(self) -> dict:
        """The result as a flat CSV / JSON row."""
        return dataclasses.asdict(self)
