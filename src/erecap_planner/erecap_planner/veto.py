"""The lookahead veto (ours, not a seed paper's): a plan whose first step the world's transition model says loses the
agent's task is not returned.

Before a plan leaves the planner, its first step is projected through the world's one-step lookahead (GiG's T(s, a):
the Lookahead service, or a world's own function in a benchmark). Where the projected state holds a task of the
agent in state TASK_LOST (a TextWorld game lost: an ingredient eaten or burnt), the step is vetoed and the next
valid skill call the decoder ranked below it is projected in its place, at most `tries` in all; a plan with no
ranking behind it (free or constrained decoding) or whose tries all lose is refused (PLANNER_ERROR), so nothing
moves. A step the world cannot project (no answer, no state) passes: the veto never blocks on its own ignorance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

from brace_common.action_schema import Step
from brace_memory.lookahead import Predict

VETO_TRIES = 3
"""Ranked steps a call projects at most before it gives up (parameter `veto_tries`)."""
VETOED_PREFIX = "vetoed by the lookahead: "
"""How a refused plan's error begins."""


@dataclass
class Vetting:
    """What the veto did to one call's plan: the step that goes (None: refused) and the steps vetoed, with why."""

    step: Optional[Step]
    vetoed: list[tuple[Step, str]] = field(default_factory=list)


def loses(predict: Predict, agent_id: str, step: Step) -> Optional[str]:
    """Why `step` loses the agent's task by the world's projection, or None when it does not (or cannot be
    projected)."""
    projection = predict(agent_id, step)
    if projection is None or projection.state is None or not projection.state.task_lost(agent_id):
        return None
    return projection.reason or "the task is lost"


def vet(predict: Predict, agent_id: str, first: Step, ranked: Sequence[Step] = (), tries: int = VETO_TRIES) -> Vetting:
    """`first` (the plan's first step), else the next of `ranked` (the decoder's order, `first` among them or not)
    that does not lose, projecting at most `tries` steps."""
    order = [first] + [s for s in ranked if s.call() != first.call()]
    out = Vetting(None)
    for step in order[:max(1, tries)]:
        why = loses(predict, agent_id, step)
        if why is None:
            out.step = step
            return out
        out.vetoed.append((step, why))
    return out


def refusal(vetting: Vetting) -> str:
    """The error of a plan whose every tried step loses."""
    return VETOED_PREFIX + "; ".join(f"{s.text()} ({why})" for s, why in vetting.vetoed)
