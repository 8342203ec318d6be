"""The warehouse's oracle decomposition (ReCAP Alg. 1's (T, S) per frame). ROS-free.

The oracle's plan for an agent (Warehouse.oracle_plan: go, pick, go, place / hand over; or park and wait) is cut
after each step that closes a subtask: `pick` closes fetch(object), `place` deliver(object, dock), `handoff`
hand_over(object, to_agent), `wait` stand_by(); the steps before it (going there) are its own. The root's S is the
plan's subtasks; a child's S is its subtask's steps while the plan's first subtask is the child's goal, else empty
(the frame is done). The warehouse's schema is the same in every state, so a child plans all its steps ahead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from brace_common.action_schema import Step, Subtask

from .warehouse_world import Warehouse

CLOSERS: dict[str, tuple[str, dict[str, str]]] = {
    "pick": ("fetch", {"object": "object"}),
    "place": ("deliver", {"object": "object", "dock": "target"}),
    "handoff": ("hand_over", {"object": "object", "to_agent": "to_agent"}),
    "wait": ("stand_by", {}),
}
"""A step that closes a subtask: the subtask's name and its parameters (subtask parameter: the step's)."""


@dataclass
class Segment:
    """The steps of one subtask of a plan."""

    subtask: Step
    steps: list[Step] = field(default_factory=list)


def segments(plan: list[Step]) -> list[Segment]:
    """`plan` cut after each closing step; trailing steps that close nothing stand by."""
    out: list[Segment] = []
    pending: list[Step] = []
    for step in plan:
        pending.append(step)
        closer = CLOSERS.get(step.action)
        if closer is None:
            continue
        name, params = closer
        out.append(Segment(Step(name, {k: step.parameters[v] for k, v in params.items()}), pending))
        pending = []
    if pending:
        out.append(Segment(Step("stand_by", {}), pending))
    return out


def oracle_answer(world: Warehouse, agent: str, goal: Optional[Step]) -> tuple[str, list[Subtask]]:
    """The oracle's (T, S) for `agent`'s frame whose goal is `goal` (None: the root, the agent's task)."""
    parts = segments(world.oracle_plan(agent))
    if goal is None:
        thought = "; then ".join(p.subtask.values_text() for p in parts) if parts else "nothing to do"
        return thought, [Subtask(p.subtask, True) for p in parts]
    if parts and parts[0].subtask == goal:
        return "", [Subtask(s) for s in parts[0].steps]
    return f"{goal.values_text()} is done", []
