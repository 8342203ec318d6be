"""One episode of a bag as a timeline: what the graph raised, decided, planned, did and saw, in log-time order.

ROS-free apart from message classes. `episode_trace` reads a bag's triggers, decisions, call records, plans,
outcomes, verifier verdicts and episode events between the start of episode `episode` and its end, and the world
state every `state_every_s` seconds (the entities' states and what each agent is doing). Messages recorded before a
field was added decode with the bag's own schema (RecordedTypes). `brace-audit trace` prints it: the first thing to
read when an episode of a table failed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Optional

from brace_common import names
from brace_common.vocabulary import Activity, CallStatus, EpisodeEvent, Failure, Mode, TriggerKind

from .bag import BagContents
from .recorded_types import RecordedTypes

TRACED = {names.EPISODE: "brace_msgs/msg/Episode", names.TRIGGERS: "brace_msgs/msg/TriggerEvent",
          names.DECISIONS: "brace_msgs/msg/ReplanDecision", names.REPLAN_CALLS: "brace_msgs/msg/ReplanCall",
          names.PLAN: "brace_msgs/msg/Plan", names.OUTCOMES: "brace_msgs/msg/ExecutionOutcome",
          names.VERDICTS: "brace_msgs/msg/VerifierVerdict", names.WORLD_STATE: "brace_msgs/msg/WorldState"}
"""The topics a trace reads (relative names) and their types."""


@dataclass(frozen=True)
class TraceLine:
    """One event of the episode: seconds since its start, what it is (the topic's name), the agent, a summary."""

    t_s: float
    what: str
    agent: str
    text: str

    def __str__(self) -> str:
        return f"{self.t_s:7.2f} s  {self.what:<12} {self.agent:<10} {self.text}"


class TraceError(ValueError):
    """The bag has no such episode."""


def _label(enum: Any, value: int) -> str:
    try:
        return enum(value).label
    except ValueError:
        return f"{enum.__name__.lower()}_{value}"


def _steps(plan: Any) -> str:
    calls = []
    for step in plan.steps:
        try:
            parameters = json.loads(step.parameters_json or "{}")
            args = ", ".join(f"{k}={v}" for k, v in parameters.items()) if isinstance(parameters, dict) else "?"
        except ValueError:
            args = "?"
        calls.append(f"{step.action}({args})")
    return "; ".join(calls) or "(no steps)"


def _trigger(m: Any) -> str:
    detail = f": {m.detail}" if m.detail else ""
    return f"{_label(TriggerKind, m.kind)} severity {m.severity:.2f}{detail}"


def _decision(m: Any) -> str:
    kind = _label(TriggerKind, m.trigger.kind)
    if not m.admitted:
        return f"{kind} suppressed ({m.reason})"
    override = " override" if m.override else ""
    return (f"{kind} admitted{override} ({m.reason}): {_label(Mode, m.mode)}, B_t {m.token_budget}, "
            f"SLO_t {m.slo_ms:.0f} ms")


def _call(m: Any) -> str:
    error = f": {m.error}" if m.error else ""
    return (f"{_label(CallStatus, m.status)} {m.latency_ms:.0f} ms (SLO {'met' if m.slo_met else 'missed'}), "
            f"tokens {m.tokens_before} -> {m.tokens_after}{error}")


def _plan(m: Any) -> str:
    kind = _label(TriggerKind, getattr(m, "trigger_kind", TriggerKind.PERIODIC))
    return f"{m.plan_id} for {kind}: {_steps(m)}"


def _outcome(m: Any) -> str:
    verdict = "ok" if m.success else f"failed ({_label(Failure, m.failure)})"
    return f"{m.action} {verdict}{': ' + m.detail if m.detail else ''}"


def _verdict(m: Any) -> str:
    said = "contradicts the step" if m.violation else "agrees"
    return f"{m.action} {said} ({m.backend}, confidence {m.confidence:.2f}): {m.detail}"


def _state(m: Any) -> str:
    entities = ", ".join(f"{e.id}={e.state}" for e in m.entities if e.state)
    agents = []
    for a in m.agents:
        doing = _label(Activity, a.activity)
        error = getattr(a, "tracking_error", math.nan)
        offset = f" tracking {error:.3f} m" if isinstance(error, float) and math.isfinite(error) else ""
        agents.append(f"{a.agent_id} {doing} {a.action}{offset}".rstrip())
    return f"{entities} | {'; '.join(agents)}"


SUMMARIES: dict[str, tuple[Callable[[Any], str], Callable[[Any], str]]] = {
    names.TRIGGERS: (lambda m: m.agent_id, _trigger),
    names.DECISIONS: (lambda m: m.trigger.agent_id, _decision),
    names.REPLAN_CALLS: (lambda m: m.agent_id, _call),
    names.PLAN: (lambda m: m.agent_id, _plan),
    names.OUTCOMES: (lambda m: m.agent_id, _outcome),
    names.VERDICTS: (lambda m: m.agent_id, _verdict),
    names.WORLD_STATE: (lambda m: m.world, _state),
}
"""Per traced topic (but the episode's own): the agent a message is about and its one-line summary."""


def _decoded(contents: BagContents, cls_of: Callable[[str], type]) -> Iterator[tuple[str, int, Any]]:
    types = RecordedTypes(contents.definitions)
    for m in contents.messages:
        role = m.topic.rsplit("/", 1)[-1]
        type_name = TRACED.get(role)
        if type_name is None or m.type != type_name:
            continue
        try:
            message, _ = types.read(type_name, m.data, cls_of(type_name))
        except (KeyError, ValueError):
            continue  # a message neither definition reads: the report counts those; a trace skips them
        yield role, m.log_time_ns, message


def episode_trace(contents: BagContents, episode: int, cls_of: Callable[[str], type], state_every_s: float = 5.0,
                  agent: str = "") -> list[TraceLine]:
    """The timeline of episode `episode` (from its start event to its end event, or the bag's end); world states
    at most every `state_every_s` s (0: every one; negative: none); only `agent`'s events when it is given.
    TraceError when the bag has no start of that episode."""
    lines: list[TraceLine] = []
    start: Optional[int] = None
    last_state = -math.inf
    for role, t_ns, m in _decoded(contents, cls_of):
        if role == names.EPISODE:
            if m.episode != episode:
                continue
            if m.event == EpisodeEvent.START and start is None:
                start = t_ns
                lines.append(TraceLine(0.0, "episode", "", f"{episode} starts ({m.world}, seed {m.seed}, "
                                                              f"{m.variant or 'no variant'})"))
            elif m.event == EpisodeEvent.END and start is not None:
                lines.append(TraceLine((t_ns - start) / 1e9, "episode", "",
                                       f"{episode} ends: {'success' if m.success else 'failure'}, "
                                       f"{m.steps} steps, {m.plans} plans"))
                break
            continue
        if start is None:
            continue
        t_s = (t_ns - start) / 1e9
        if role == names.WORLD_STATE:
            if state_every_s < 0 or m.episode != episode or t_s - last_state < state_every_s:
                continue
            last_state = t_s
        who, summary = SUMMARIES[role]
        if agent and role != names.WORLD_STATE and who(m) != agent:
            continue
        lines.append(TraceLine(t_s, role, who(m), summary(m)))
    if start is None:
        raise TraceError(f"the bag has no start of episode {episode}")
    return lines
