"""Episodes on a real robot, started and judged by its operator (no ROS).

On the twin the world knows when a task is done; on a real arm only the
operator does. `OperatorEpisodes` holds that bookkeeping: an episode starts
with its task lines (from the parameter file or a task the operator sends),
ends with the operator's verdict, or fails when it runs past
`max_episode_s`. Times are seconds of a monotonic clock given by the caller.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Optional

from brace_common.episode import DURATION_S, EpisodeMetrics, failure_metrics
from brace_common.vocabulary import Failure, Observability, Predicate
from brace_common.world_state import AgentActivity, Entity, Relation, WorldState

MAX_TASK_CHARS = 2000
"""Longest task line taken (a longer one is refused, not cut: the planner would read half a task)."""


class EpisodeError(ValueError):
    """A request the episode state does not allow (start while running, a verdict with none running, bad task)."""


@dataclass(frozen=True)
class EpisodeRecord:
    """An ended episode: which, its task, the verdict, how long it ran, why it ended and its failed steps."""

    episode: int
    tasks: tuple[str, ...]
    success: bool
    duration_s: float
    reason: str          # 'operator' or 'timeout'
    failures: Mapping[str, int] = field(default_factory=dict)  # failed steps by Failure label (the executor's)

    def verdict(self, steps: int) -> EpisodeMetrics:
        """The operator's verdict as an Episode's: every task or none done, the episode's duration and its failed
        steps by category (failure_<category>, Table 32's columns)."""
        metrics = {DURATION_S: round(self.duration_s, 2), **failure_metrics(self.failures)}
        return EpisodeMetrics(success=self.success, steps=steps, delivered=len(self.tasks) if self.success else 0,
                              tasks=len(self.tasks), metrics=metrics)


@dataclass
class OperatorEpisodes:
    """The current episode of an operator-driven robot and the ones before it."""

    max_episode_s: float = 0.0            # 0: no limit
    episode: int = -1
    tasks: tuple[str, ...] = ()
    started_at: Optional[float] = None
    history: list[EpisodeRecord] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)  # the running episode's failed steps by Failure label

    @property
    def running(self) -> bool:
        """An episode is under way."""
        return self.started_at is not None

    def start(self, tasks: list[str] | tuple[str, ...], now: float) -> int:
        """Begin the next episode with these task lines; its number. EpisodeError when one runs or a task is bad."""
        if self.running:
            raise EpisodeError(f"episode {self.episode} is running: end it first (succeed / fail)")
        lines = tuple(t.strip() for t in tasks)
        if not lines or not all(lines):
            raise EpisodeError("a task needs at least one non-empty line")
        if any(len(t) > MAX_TASK_CHARS for t in lines):
            raise EpisodeError(f"a task line is longer than {MAX_TASK_CHARS} characters")
        self.episode += 1
        self.tasks, self.started_at = lines, now
        self.failures = {}
        return self.episode

    def failed_step(self, failure: Failure) -> None:
        """A step of the running episode failed in this category (none running: ignored; NONE counts as EXECUTOR,
        a failure without its reason)."""
        if self.running:
            label = (Failure.EXECUTOR if failure == Failure.NONE else failure).label
            self.failures[label] = self.failures.get(label, 0) + 1

    def finish(self, success: bool, now: float, reason: str = "operator") -> EpisodeRecord:
        """End the running episode with a verdict; EpisodeError when none runs."""
        if self.started_at is None:
            raise EpisodeError("no episode is running")
        record = EpisodeRecord(self.episode, self.tasks, success, round(now - self.started_at, 3), reason,
                               dict(self.failures))
        self.history.append(record)
        self.started_at = None
        return record

    def expire(self, now: float) -> Optional[EpisodeRecord]:
        """End the running episode as a failure when it ran past max_episode_s; the record, else None."""
        if self.started_at is None or self.max_episode_s <= 0 or now - self.started_at < self.max_episode_s:
            return None
        return self.finish(False, now, "timeout")

    def elapsed(self, now: float) -> float:
        """Seconds the running episode has run (NaN when none runs)."""
        return now - self.started_at if self.started_at is not None else math.nan


def world_state(episodes: OperatorEpisodes, world: str, step: int, activity: AgentActivity,
                objects: list[str]) -> WorldState:
    """What an operator-driven robot knows of its world, and no more (PARTIAL): the arm, the objects the
    operator named (no pose, state "unknown": nothing here observes them) and the task lines of the current (or
    last) episode (open while it runs, then done or failed by the operator's verdict or the timeout)."""
    arm = activity.agent_id
    entities = [Entity(arm, "arm", "unknown")]
    entities += [Entity(name, "object", "unknown") for name in dict.fromkeys(objects) if name != arm]
    relations: list[Relation] = []
    last = episodes.history[-1] if episodes.history and not episodes.running else None
    state = "open" if episodes.running else "" if last is None else "done" if last.success else "failed"
    if state:
        for i, line in enumerate(episodes.tasks):
            entities.append(Entity(f"task_{i}", "task", state, attributes={"text": line}))
            relations.append(Relation(arm, Predicate.ASSIGNED, f"task_{i}"))
    return WorldState(world, max(episodes.episode, 0), step, tuple(entities), tuple(relations), (activity,),
                      Observability.PARTIAL)
