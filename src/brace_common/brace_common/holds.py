"""Lockstep holds of a world node (ROS-free): the world does not step while a call admitted for one of its
agents has neither returned nor timed out, so an episode's course depends on the plans, not on how fast the
machine is."""

from __future__ import annotations

import time
from collections.abc import Callable


class CallHolds:
    """Admitted calls of this episode's agents, each holding the world until it returns or `timeout_s` passes."""

    def __init__(self, timeout_s: float, clock: Callable[[], float] = time.monotonic):
        self.timeout_s = timeout_s
        self.clock = clock
        self.waiting: dict[str, float] = {}   # decision_id -> time the hold gives up
        self.episode_decisions: set[str] = set()
        self.timeouts = 0

    def admit(self, decision_id: str) -> None:
        """An admitted call of this episode: hold until it returns."""
        self.waiting[decision_id] = self.clock() + self.timeout_s
        self.episode_decisions.add(decision_id)

    def release(self, decision_id: str) -> None:
        """The call returned (a plan, or a record saying it failed)."""
        self.waiting.pop(decision_id, None)

    def of_this_episode(self, decision_id: str) -> bool:
        """The call was admitted in this episode (a plan of an earlier one is stale)."""
        return decision_id in self.episode_decisions

    def new_episode(self) -> None:
        """Forget the previous episode's calls."""
        self.episode_decisions.clear()

    def expired(self) -> list[str]:
        """Drop the holds that timed out; their decision ids (counted in `timeouts`)."""
        now = self.clock()
        gone = [d for d, until in self.waiting.items() if now >= until]
        for decision_id in gone:
            self.waiting.pop(decision_id)
        self.timeouts += len(gone)
        return gone

    def held(self) -> bool:
        """True while an admitted call has neither returned nor timed out."""
        return bool(self.waiting)
