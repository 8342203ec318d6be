"""GiG's Bounded Lookahead (Sec. 3.2, Eq. 3): the projected next state of a few candidate actions, for the prompt.

GiG projects every valid action (branching factor epsilon = |A(s_t)|); inside a call's budget B_t that does not
fit, so a call projects at most `limit` candidates: the step the agent is executing, the actions a matched
experience took next, then the other valid skill calls by relevance to the agent's goal and state (BM25). The
projection comes from the world's transition model (`Predict`: the Lookahead service, or a world's own function in
a benchmark); a candidate it cannot project is left out. A line says whether the step can run and what it changes
in the agent's scene graph: `lookahead: pick(cup_3) -> ok: + agent_0 holding cup_3; - cup_3 on shelf_3`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Optional

from brace_common.action_schema import Step
from brace_common.scene_graph import SceneGraph, agent_view
from brace_common.world_state import WorldState

from .rag import ranked_by_relevance

MAX_CHANGES = 4
"""Changed facts a lookahead line names (the rest are counted)."""
MAX_REASON_CHARS = 120
"""How much of an invalid step's reason a line quotes."""


@dataclass(frozen=True)
class Projection:
    """s' = T(s, a): whether the step can run there, the world's reason or outcome text, the state after."""

    valid: bool
    reason: str
    state: Optional[WorldState]


Predict = Callable[[str, Step], Optional[Projection]]
"""(agent, candidate step) -> its projection, or None when the world could not project it (no answer in time)."""


def candidates(calls: Sequence[Step], query: str, first: Sequence[Step] = (), limit: int = 3) -> list[Step]:
    """At most `limit` candidate steps: `first` (the current step, an experience's next actions) in order, then the
    valid `calls` by relevance to `query`; a step named twice counts once, and one outside `calls` is kept only when
    `calls` is empty (nothing to check it against)."""
    valid = {c.call(): c for c in calls}
    out: dict[str, Step] = {}
    for step in first:
        if step.call() in valid or not valid:
            out.setdefault(step.call(), step)
    by_text = {c.text(): c for c in calls}
    for text in ranked_by_relevance(query, list(by_text)):
        out.setdefault(by_text[text].call(), by_text[text])
    return list(out.values())[:max(0, limit)]


def changes(before: SceneGraph, after: SceneGraph) -> list[str]:
    """The facts `after` adds ("+ ...") and drops ("- ..."), added first, each sorted."""
    b, a = set(before.facts()), set(after.facts())
    return [f"+ {f}" for f in sorted(a - b)] + [f"- {f}" for f in sorted(b - a)]


def projection_line(step: Step, projection: Projection, before: SceneGraph, hops: int, cell_m: float) -> str:
    """One candidate's projection as the planner reads it."""
    if not projection.valid:
        return f"lookahead: {step.text()} -> fails: {projection.reason[:MAX_REASON_CHARS]}"
    if projection.state is None:
        return f"lookahead: {step.text()} -> ok"
    try:
        after = agent_view(projection.state, before.agent_id, hops, cell_m)
    except KeyError:
        return f"lookahead: {step.text()} -> ok ({before.agent_id} leaves the state)"
    diff = changes(before, after)
    shown = "; ".join(diff[:MAX_CHANGES]) + (f"; {len(diff) - MAX_CHANGES} more" if len(diff) > MAX_CHANGES else "")
    return f"lookahead: {step.text()} -> ok: {shown or 'nothing changes yet'}"


def lookahead_lines(predict: Predict, agent_id: str, steps: Sequence[Step], before: SceneGraph, hops: int,
                    cell_m: float) -> list[str]:
    """P(s_t) for `steps` (Eq. 3) as lines, in the steps' order; steps the world could not project are left out."""
    lines = []
    for step in steps:
        projection = predict(agent_id, step)
        if projection is not None:
            lines.append(projection_line(step, projection, before, hops, cell_m))
    return lines
