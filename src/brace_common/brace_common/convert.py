"""Messages <-> the replanning records every package reads (triggers, decisions, plans).

The controller publishes these records and the audit replays them from its bags; both convert here.
"""

from __future__ import annotations

import json
from typing import Optional

from brace_msgs.msg import Plan, ReplanDecision, TriggerEvent

from .clock import seconds_of
from .replanning import Decision, Trigger
from .validation import (
    MAX_COUNT,
    MAX_RECAP_DEPTH,
    InvalidInput,
    check_agent_id,
    check_float,
    check_id,
    check_int,
    check_step,
    check_text,
    parse_json_object,
)
from .vocabulary import Mode, Reason, TriggerKind


def trigger_from_msg(msg: TriggerEvent, latest_step: Optional[int] = None) -> Trigger:
    """TriggerEvent -> Trigger; InvalidInput naming the field when the message is out of bounds.

    `latest_step`: the latest step seen; a step that jumps far past it is rejected.
    """
    try:
        kind = TriggerKind(msg.kind)
    except ValueError:
        raise InvalidInput("bad_kind", f"unknown trigger kind {msg.kind}") from None
    trigger = Trigger(
        kind=kind,
        agent_id=check_agent_id("agent_id", msg.agent_id),
        step=check_step("step", msg.step, latest_step),
        severity=check_float("severity", msg.severity, 0.0, 1.0),
        consecutive_failures=check_int("consecutive_failures", msg.consecutive_failures, 0, MAX_COUNT),
        trigger_id=check_id("trigger_id", msg.trigger_id, allow_empty=True),
        detail=check_text("detail", msg.detail),
        stamp=seconds_of(msg.header.stamp),
        has_goal=bool(msg.has_goal),
        depth=check_int("depth", msg.depth, 0, MAX_RECAP_DEPTH),
    )
    trigger.validate()
    return trigger


def decision_from_msg(msg: ReplanDecision) -> Decision:
    """ReplanDecision -> Decision (audit replay); ValueError when the message is malformed."""
    try:
        reason, mode = Reason(msg.reason), Mode(msg.mode)
    except ValueError as exc:
        raise ValueError(f"decision {msg.decision_id}: {exc}") from None
    return Decision(
        decision_id=msg.decision_id, trigger=trigger_from_msg(msg.trigger), admitted=bool(msg.admitted),
        reason=reason, mode=mode, token_budget=int(msg.token_budget), slo_ms=float(msg.slo_ms),
        hard_deadline_ms=float(msg.hard_deadline_ms), override=bool(msg.override),
        steps_since_call=None if msg.steps_since_call < 0 else int(msg.steps_since_call),
        steps_since_change=None if msg.steps_since_change < 0 else int(msg.steps_since_change),
        consecutive_failures=int(msg.consecutive_failures), consecutive_deferrals=int(msg.consecutive_deferrals),
        predicted_p95_ms=float(msg.predicted_p95_ms), memory_off=bool(msg.memory_off),
    )


def plan_signature(plan: Plan) -> tuple[tuple[str, str], ...]:
    """What makes two plans the same: their actions and canonicalised parameters, in order."""
    def canonical(text: str) -> str:
        try:
            return json.dumps(parse_json_object("parameters_json", text), sort_keys=True) if text else ""
        except InvalidInput:
            return text  # not a (bounded) JSON object: compared as written

    return tuple((s.action, canonical(s.parameters_json)) for s in plan.steps)
