"""The quality floor (beyond the paper): the smallest B_t the adaptive budget may give a call.

The adaptive budget lowers B_t until a call's predicted tail latency fits SLO_t. Where decode alone is slow (a server
at 65 ms per token) that drives B_t down to where the kept context no longer holds the entities a plan must name, and
the planner answers with plans naming places or objects the schema does not know
(`action_schema.Fault.UNKNOWN_CHOICE`, which the planner reports as hallucinated_value): the deadline is met and the
task is lost. The floor starts at the configured budget and rises by `step` tokens, up to `ceiling`, each time more
than `max_error_rate` of the last `window` calls that read less than floor + `step` tokens came back with such a
plan. It never falls within a run: what a backend needs does not shrink as the episode goes on. Calls the floor makes
miss SLO_t are deferred where the trigger allows it and admitted at the floor otherwise (the controller's rule 6).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from brace_common.action_schema import PLANNER_REASONS, Fault

LOST_ENTITY_FAULTS = frozenset({PLANNER_REASONS[Fault.UNKNOWN_CHOICE]})
"""Planner-error reasons that say the plan named what the kept context no longer holds: the planner's name for
`Fault.UNKNOWN_CHOICE` (hallucinated_value)."""


def fault_of(error: str) -> str:
    """The reason key at the head of a planner error ('hallucinated_value: step 0: ...' -> 'hallucinated_value')."""
    return error.split(":", 1)[0].strip()


@dataclass
class QualityFloor:
    """The floor under B_t and the calls near it (see the module docstring). Not thread-safe."""

    floor: int
    step: int
    ceiling: int
    window: int = 8
    max_error_rate: float = 0.25
    raised: int = 0                                    # times the floor rose
    near: deque = field(default_factory=deque)         # lost-entity flags of the latest calls near the floor

    def __post_init__(self) -> None:
        if self.step < 1 or self.window < 1 or not 0.0 <= self.max_error_rate < 1.0:
            raise ValueError(f"quality floor step {self.step}, window {self.window} and max_error_rate "
                             f"{self.max_error_rate} must be >= 1, >= 1 and in [0, 1)")
        self.floor = min(self.floor, self.ceiling)
        self.near = deque(self.near, maxlen=self.window)

    def observe(self, tokens_after: int, fault: str) -> bool:
        """Count a finished call that read `tokens_after` tokens and failed with reason `fault` ('' when it gave a
        plan); True when this raised the floor."""
        if tokens_after >= self.floor + self.step:
            return False
        self.near.append(fault in LOST_ENTITY_FAULTS)
        if len(self.near) < self.window or sum(self.near) <= self.max_error_rate * len(self.near):
            return False
        if self.floor >= self.ceiling:
            return False
        self.floor = min(self.ceiling, self.floor + self.step)
        self.raised += 1
        self.near.clear()
        return True
