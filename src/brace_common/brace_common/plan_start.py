"""How a new plan starts on an executor that is running a step, ROS-free.

The executor and the worlds that mirror it (the PiPER twin's /act stand-in) apply the same rule:

- CONTINUES: the plan repeats what is left of the running plan (a periodic check confirmed it). The running step goes
  on, its timeout and action budget still counting, so periodic replans cannot restart a stuck step forever.
- RESTARTS: the same repetition, but the plan repairs a drift or a loop (REPAIR_TRIGGERS): the running step is going
  wrong while it runs, so the VLA is given its instruction anew. The step's timeout and action budget still count.
- REPLACES: anything else (another plan, or nothing was running): its first step begins.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Sequence

from .vocabulary import TriggerKind

REPAIR_TRIGGERS = frozenset({TriggerKind.DRIFT, TriggerKind.LOOP})
"""Trigger kinds raised while the running step goes wrong (a failure ends the step before its trigger)."""


class PlanStart(str, enum.Enum):
    """What a new plan does to the running step."""

    CONTINUES = "continues"
    RESTARTS = "restarts"
    REPLACES = "replaces"


def plan_start(remaining: Sequence[Hashable], plan: Sequence[Hashable], trigger_kind: int) -> PlanStart:
    """How `plan` (its steps) starts where `remaining` are the running step and those after it (empty: nothing
    runs); `trigger_kind` is the TriggerEvent.KIND_* the plan carries."""
    if not remaining or list(remaining) != list(plan):
        return PlanStart.REPLACES
    return PlanStart.RESTARTS if trigger_kind in REPAIR_TRIGGERS else PlanStart.CONTINUES
