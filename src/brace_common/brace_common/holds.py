"""Lockstep holds of a world node (ROS-free): the world does not step while a call admitted for one of its
agents has neither returned nor timed out, so an episode's course depends on the plans, not on how fast the
machine is.

An answer may come before its decision: the controller publishes the decision and then sends the call, and a planner
that answers at once (the hostile planner) has its plan published while the decision is still on its way on
another topic; the world's executor may then take the plan first. Such an answer is kept until its decision comes
(`early`): the plan is applied then and the call holds nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

MAX_EARLY = 256
"""Answers kept while their decisions are on their way (the oldest dropped beyond it)."""


class CallHolds:
    """Admitted calls of this episode's agents, each holding the world until it returns or `timeout_s` passes."""

    def __init__(self, timeout_s: float, clock: Callable[[], float] = time.monotonic):
        self.timeout_s = timeout_s
        self.clock = clock
        self.waiting: dict[str, float] = {}   # decision_id -> time the hold gives up
        self.episode_decisions: set[str] = set()
        self.earlier_decisions: set[str] = set()   # the earlier episodes' (their answers are stale)
        self.answered: dict[str, Any] = {}   # decision_id -> what came before the decision (a plan, or None)
        self.timeouts = 0

    def admit(self, decision_id: str) -> Any:
        """An admitted call of this episode: hold until it returns, unless it already did; the plan that came
        before the decision (to apply now), else None."""
        self.episode_decisions.add(decision_id)
        if decision_id in self.answered:
            return self.answered.pop(decision_id)
        self.waiting[decision_id] = self.clock() + self.timeout_s
        return None

    def release(self, decision_id: str, plan: Any = None) -> None:
        """The call returned (a plan, or a record saying it failed); before its decision, the answer is kept
        (`plan`, when it is one) for `admit`."""
        if self.early(decision_id):
            if plan is not None or decision_id not in self.answered:
                self.answered[decision_id] = plan
            while len(self.answered) > MAX_EARLY:
                self.answered.pop(next(iter(self.answered)))
            return
        self.waiting.pop(decision_id, None)

    def early(self, decision_id: str) -> bool:
        """An answer to a decision this world has not seen yet (in this episode or an earlier one)."""
        return bool(decision_id) and decision_id not in self.episode_decisions and \
            decision_id not in self.earlier_decisions

    def of_this_episode(self, decision_id: str) -> bool:
        """The call was admitted in this episode (a plan of an earlier one is stale)."""
        return decision_id in self.episode_decisions

    def new_episode(self) -> None:
        """Forget the previous episode's calls (their late answers are stale) and the answers whose decisions never
        came."""
        self.earlier_decisions |= self.episode_decisions
        self.episode_decisions = set()
        self.answered.clear()

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
