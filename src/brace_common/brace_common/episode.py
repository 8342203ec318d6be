"""What an episode achieved: the fields of an Episode EVENT_END message, as plain dataclasses."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

from brace_msgs.msg import Episode
from builtin_interfaces.msg import Time


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
    collisions: int          # agent pairs that collided (same cell / contact), summed over steps
    min_distance: float = float("nan")  # smallest distance between two agents over the episode (m); NaN: not measured


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


def episode_msg(event: int, episode: int, seed: int, agents: int, world: str, variant: str, stamp: Time,
                result: Optional[EpisodeResult] = None) -> Episode:
    """An Episode message: the boundary, and on EVENT_END the episode's metrics."""
    msg = Episode(event=int(event), episode=episode, seed=seed, agents=agents, world=world, variant=variant)
    msg.header.stamp = stamp
    if result is not None:
        msg.success, msg.steps, msg.delivered, msg.tasks = result.success, result.steps, result.delivered, result.tasks
        msg.path_efficiency = float(result.path_efficiency)
        msg.coordination_wait, msg.near_misses, msg.collisions = (
            result.coordination_wait, result.near_misses, result.collisions)
        msg.min_distance = float(result.min_distance)
        msg.plans, msg.plans_agreeing = result.plans, result.plans_agreeing
    return msg


def episode_from_msg(msg: Episode) -> EpisodeResult:
    """An Episode EVENT_END message -> EpisodeResult."""
    return EpisodeResult(
        success=bool(msg.success), steps=int(msg.steps), delivered=int(msg.delivered), tasks=int(msg.tasks),
        path_efficiency=round(float(msg.path_efficiency), 4), coordination_wait=int(msg.coordination_wait),
        near_misses=int(msg.near_misses), collisions=int(msg.collisions),
        min_distance=float(getattr(msg, "min_distance", math.nan)), episode=int(msg.episode),
        seed=int(msg.seed), plans=int(msg.plans), plans_agreeing=int(msg.plans_agreeing))
