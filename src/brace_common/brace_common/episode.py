"""What an episode achieved, as plain dataclasses, and the one conversion to and from an Episode message.

Every world fills the same verdict (success, steps, tasks delivered, plans) and
its own measurements as named metrics: a world publishes only what it
measures. Metric names carry their unit as a suffix (`duration_s`,
`min_distance_m`); counts have none (`near_misses`, `slips`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Optional

from brace_msgs.msg import Episode, Metric
from builtin_interfaces.msg import Time

from .vocabulary import Failure

# The metrics the worlds publish (docs/nodes.md says which world measures which).
PATH_EFFICIENCY = "path_efficiency"        # SPL-like: shortest / travelled path when successful, else 0
COORDINATION_WAIT = "coordination_wait"    # agent-steps spent waiting or blocked
LOOP_STEPS = "loop_steps"                  # agent-steps in a state the agent held before its previous one (a loop)
NEAR_MISSES = "near_misses"                # agent pairs closer than d_min, summed over steps
COLLISIONS = "collisions"                  # agent pairs that collided, summed over steps
MIN_DISTANCE_M = "min_distance_m"          # smallest distance between two agents over the episode
PLANS_AGREEING = "plans_agreeing"          # plans whose first step equalled the oracle's on arrival
DURATION_S = "duration_s"                  # wall time from the episode's start to its verdict
GRASPS = "grasps"                          # grasps the gripper closed on an object
SLIPS = "slips"                            # grasps that slipped on the carry
PUSHES = "pushes"                          # PushT: contacts the pusher made with the block
CONTACT_LOSSES = "contact_losses"          # PushT: pushes that lost the block (the pusher rode over its edge)
GOAL_ERROR_M = "goal_error_m"              # PushT: the block's centroid from the goal at the verdict
GOAL_ERROR_DEG = "goal_error_deg"          # PushT: the block's yaw from the goal's at the verdict
FAILURE_PREFIX = "failure_"                # failure_<Failure label>: failed steps of that category



def failure_metrics(failures: Mapping[str, int]) -> dict[str, float]:
    """failure_<category> for every Failure category (`failures`: Failure label -> failed steps, absent = 0): a world
    that reads the executor's outcomes measures each category, zero included."""
    return {FAILURE_PREFIX + f.label: float(failures.get(f.label, 0)) for f in Failure if f != Failure.NONE}

@dataclass(frozen=True)
class EpisodeMetrics:
    """A world's verdict on one episode: the fields every world fills and what this world measured."""

    success: bool            # every task done
    steps: int               # steps the episode took
    delivered: int           # tasks done
    tasks: int               # tasks in the episode
    metrics: Mapping[str, float] = field(default_factory=dict)  # the world's own measurements, by name

    def metric(self, name: str, default: float = math.nan) -> float:
        """The value of metric `name`, `default` when this world does not measure it."""
        return self.metrics.get(name, default)


@dataclass(frozen=True)
class EpisodeResult(EpisodeMetrics):
    """An episode of a run: its verdict, which episode and seed it was, and the plans its agents received."""

    episode: int = 0
    seed: int = 0
    plans: int = 0           # plans the agents received

    @classmethod
    def of(cls, verdict: EpisodeMetrics, episode: int, seed: int, plans: int,
           **more: float) -> EpisodeResult:
        """A world's verdict on episode `episode`, with `more` metrics the node measured (e.g. plans_agreeing)."""
        return cls(success=verdict.success, steps=verdict.steps, delivered=verdict.delivered, tasks=verdict.tasks,
                   metrics={**verdict.metrics, **more}, episode=episode, seed=seed, plans=plans)

    def as_row(self) -> dict:
        """The result as a flat CSV / JSON row: the common fields, then one column per metric."""
        row = {"episode": self.episode, "seed": self.seed, "success": self.success, "steps": self.steps,
               "delivered": self.delivered, "tasks": self.tasks, "plans": self.plans}
        row.update({name: _plain(value) for name, value in self.metrics.items()})
        return row


def _plain(value: float) -> float | int:
    """A count read back as float64 prints as an int."""
    return int(value) if float(value).is_integer() else value


def metrics_msgs(metrics: Mapping[str, float]) -> list[Metric]:
    """Metric messages of the finite `metrics` (NaN / inf = not measured: left out), in name order."""
    return [Metric(name=name, value=float(value)) for name, value in sorted(metrics.items())
            if math.isfinite(float(value))]


def episode_msg(event: int, episode: int, seed: int, num_agents: int, world: str, variant: str, stamp: Time,
                result: Optional[EpisodeResult] = None) -> Episode:
    """An Episode message: the boundary, and on EVENT_END the episode's verdict and metrics."""
    msg = Episode(event=int(event), episode=episode, seed=seed, num_agents=num_agents, world=world, variant=variant)
    msg.header.stamp = stamp
    if result is not None:
        msg.success, msg.steps, msg.delivered, msg.tasks = result.success, result.steps, result.delivered, result.tasks
        msg.plans = result.plans
        msg.metrics = metrics_msgs(result.metrics)
    return msg


def episode_from_msg(msg: Episode) -> EpisodeResult:
    """An Episode EVENT_END message -> EpisodeResult (a metric named twice: the last one)."""
    return EpisodeResult(
        success=bool(msg.success), steps=int(msg.steps), delivered=int(msg.delivered), tasks=int(msg.tasks),
        metrics={m.name: float(m.value) for m in msg.metrics}, episode=int(msg.episode), seed=int(msg.seed),
        plans=int(msg.plans))
