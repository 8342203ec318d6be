"""The only place that turns brace_msgs messages into core dataclasses and back."""

from __future__ import annotations

import math
from typing import Optional

from action_msgs.msg import GoalStatus
from brace_msgs.action import Replan
from brace_msgs.msg import (
    AgentState,
    ControllerState,
    ExecutionOutcome,
    Plan,
    ReplanCall,
    ReplanDecision,
    TriggerEvent,
    VerifierVerdict,
)
from builtin_interfaces.msg import Time
from std_msgs.msg import Header

from brace_common.replanning import CallRecord, Decision, Trigger
from brace_common.validation import (
    MAX_COUNT,
    MAX_ID_CHARS,
    MAX_STEP,
    InvalidInput,
    check_agent_id,
    check_float,
    check_id,
    check_int,
    check_step,
    check_text,
    shorten,
)
from brace_common.vocabulary import TEAM_AGENT, CallStatus, Mode, Phase, RecapKind

from .gate import AgentCounters
from .latency_model import CallSample
from .pending_calls import CallEnd
from .quality_floor import fault_of
from .triggers import AgentObservation

ABORTED_BY_PLANNER = "aborted_by_planner"
"""The fault (and error prefix) of a call whose goal the planner aborted: the controller writes its record."""
PHASE_NAMES = frozenset(p.value for p in Phase)
MAX_LATENCY_MS = 86_400_000.0
"""A day: the longest latency, SLO or phase a record may carry."""


def _never(value):
    return -1 if value is None else max(-1, min(int(value), MAX_STEP))




def trigger_to_msg(trigger: Trigger, stamp: Time, trigger_id: str = "") -> TriggerEvent:
    """Trigger -> TriggerEvent stamped `stamp`."""
    msg = TriggerEvent()
    msg.header.stamp = stamp
    msg.trigger_id = trigger_id or trigger.trigger_id
    msg.agent_id = trigger.agent_id
    msg.kind = int(trigger.kind)
    msg.step = int(trigger.step)
    msg.severity = float(trigger.severity)
    msg.consecutive_failures = int(trigger.consecutive_failures)
    msg.detail = trigger.detail
    msg.has_goal = bool(trigger.has_goal)
    msg.depth = int(trigger.depth)
    return msg


def decision_to_msg(decision: Decision, source: TriggerEvent, stamp: Time) -> ReplanDecision:
    """Decision -> ReplanDecision; `source` is the trigger message the decision answers."""
    msg = ReplanDecision()
    msg.header.stamp = stamp
    msg.decision_id = decision.decision_id
    msg.trigger = source
    msg.admitted = decision.admitted
    msg.reason = decision.reason.value
    msg.override = decision.override
    msg.mode = int(decision.mode)
    msg.token_budget = int(decision.token_budget)
    msg.slo_ms = float(decision.slo_ms)
    msg.hard_deadline_ms = float(decision.hard_deadline_ms)
    msg.steps_since_call = _never(decision.steps_since_call)
    msg.steps_since_change = _never(decision.steps_since_change)
    msg.consecutive_failures = int(decision.consecutive_failures)
    msg.consecutive_deferrals = int(decision.consecutive_deferrals)
    msg.predicted_p95_ms = float(decision.predicted_p95_ms)
    msg.memory_off = bool(decision.memory_off)
    msg.depth = int(decision.trigger.depth)
    return msg



def goal_from_decision(decision: Decision, stamp: Time) -> Replan.Goal:
    """The Replan action goal of an admitted decision."""
    goal = Replan.Goal()
    goal.header.stamp = stamp
    goal.decision_id = decision.decision_id
    goal.agent_id = decision.trigger.agent_id
    goal.step = int(decision.trigger.step)
    goal.mode = int(decision.mode)
    goal.trigger_kind = int(decision.trigger.kind)
    goal.token_budget = int(decision.token_budget)
    goal.slo_ms = float(decision.slo_ms)
    goal.hard_deadline_ms = float(decision.hard_deadline_ms)
    goal.memory_off = bool(decision.memory_off)
    return goal


_WORK_PHASES = (Phase.CONTEXT_COMPRESS, Phase.PREFILL, Phase.REQUEST, Phase.FIRST_TOKEN, Phase.DECODE)


def informs_latency(record: CallRecord) -> bool:
    """Whether the latency model learns from a finished call: every answered one (a plan or a planner error), and
    one cut off by its hard deadline or cancelled after it had run past its SLO, whose phases so far are a lower
    bound of its cost. Without the latter a saturated planner (a server shared by a fleet, where every call hits its
    hard deadline) would never be seen, and the controller would keep admitting calls it cannot serve."""
    if record.recap_call == RecapKind.REUSE:
        return False  # ReCAP's reuse answers from the planner's frame stack: no model call to learn from
    if record.status in (CallStatus.OK, CallStatus.PLANNER_ERROR):
        return True
    ran = any(record.phase_ms.get(p.value, 0.0) > 0.0 for p in _WORK_PHASES)
    return record.status in (CallStatus.DEADLINE, CallStatus.CANCELLED) and ran and \
        record.latency_ms - record.phase_ms.get(Phase.QUEUE.value, 0.0) >= record.slo_ms > 0.0


def latency_sample(record: CallRecord) -> CallSample:
    """What the latency model learns from a finished call: tokens, mode and phase times, the queue wait left out."""
    phases = record.phase_ms
    return CallSample(
        tokens_before=record.tokens_before, tokens_after=record.tokens_after, mode=int(record.mode),
        compress_ms=phases.get(Phase.CONTEXT_COMPRESS.value, 0.0) + phases.get(Phase.RETRIEVE.value, 0.0),
        # a planner server's queue and prefill (request, first_token) are what the local prefill is
        prefill_ms=sum(phases.get(p.value, 0.0) for p in (Phase.PREFILL, Phase.REQUEST, Phase.FIRST_TOKEN)),
        decode_ms=phases.get(Phase.DECODE.value, 0.0) + phases.get(Phase.PARSE.value, 0.0),
        total_ms=record.latency_ms - phases.get(Phase.QUEUE.value, 0.0))


def call_record_from_msg(msg: ReplanCall) -> CallRecord:
    """ReplanCall -> CallRecord (what the latency model learns; plan changes are the controller's own record).

    InvalidInput naming the field when the record is out of bounds.
    """
    try:
        status = CallStatus(msg.status)
    except ValueError:
        raise InvalidInput("bad_status", f"unknown call status {msg.status}") from None
    phase_ms: dict[str, float] = {}
    for p in msg.phases:
        if p.phase not in PHASE_NAMES:
            raise InvalidInput("bad_phase", f"unknown phase '{shorten(p.phase)}'")
        phase_ms[p.phase] = check_float("phase duration_ms", p.duration_ms, 0.0, MAX_LATENCY_MS)
    return CallRecord(
        agent_id=check_agent_id("agent_id", msg.agent_id),
        step=check_step("step", msg.step),
        status=status,
        plan_changed=False,
        latency_ms=check_float("latency_ms", msg.latency_ms, 0.0, MAX_LATENCY_MS),
        tokens_after=check_int("tokens_after", msg.tokens_after, 0, MAX_COUNT),
        slo_ms=check_float("slo_ms", msg.slo_ms, 0.0, MAX_LATENCY_MS),
        decision_id=check_id("decision_id", msg.decision_id, allow_empty=True),
        tokens_before=check_int("tokens_before", msg.tokens_before, 0, MAX_COUNT),
        mode=Mode(msg.mode) if msg.mode in Mode._value2member_map_ else Mode.FULL_REPLAN,
        phase_ms=phase_ms,
        recap_call=RecapKind(msg.recap_call) if msg.recap_call in RecapKind._value2member_map_ else RecapKind.NONE,
    )


def call_end(goal_status: int, result: Replan.Result, elapsed_ms: float) -> CallEnd:
    """How a Replan goal ended, from its GoalStatus and result (whether its plan changed is the core's to say): aborted
    by the planner (no result: an exception in its execute callback) -> a planner error the controller records;
    cancelled or otherwise unfinished -> cancelled; else the planner's own record (a status that is no CallStatus:
    a planner error counted as malformed)."""
    if goal_status == GoalStatus.STATUS_ABORTED:
        return CallEnd(CallStatus.PLANNER_ERROR, elapsed_ms, fault=ABORTED_BY_PLANNER, counter="calls_aborted_by_planner",
                       error=f"{ABORTED_BY_PLANNER}: the planner ended the goal without a result (status ABORTED)")
    if goal_status != GoalStatus.STATUS_SUCCEEDED:
        return CallEnd(CallStatus.CANCELLED, elapsed_ms)
    call = result.call
    try:
        status, counter = CallStatus(call.status), ""
    except ValueError:
        status, counter = CallStatus.PLANNER_ERROR, "malformed_calls"
    return CallEnd(status, float(call.latency_ms), tokens_after=int(call.tokens_after),
                   tokens_before=int(call.tokens_before), counter=counter,
                   fault=fault_of(call.error) if status == CallStatus.PLANNER_ERROR else "")


def answered_plan(result: Replan.Result, decision: Decision) -> Optional[Plan]:
    """The plan of a call's result, its agent and decision filled in where the planner left them empty; None when
    it has no steps."""
    plan = result.plan
    if not plan.steps:
        return None
    plan.agent_id = plan.agent_id or decision.trigger.agent_id
    plan.decision_id = plan.decision_id or decision.decision_id
    return plan


def unanswered_call_to_msg(decision: Decision, status: CallStatus, latency_ms: float, stamp: Time,
                           error: str) -> ReplanCall:
    """The audit record of an admitted call no planner answered (so every admitted call has one)."""
    return ReplanCall(
        header=Header(stamp=stamp), call_id=f"{decision.decision_id}/unanswered", decision_id=decision.decision_id,
        agent_id=decision.trigger.agent_id, step=decision.trigger.step, mode=int(decision.mode),
        token_budget=decision.token_budget, slo_ms=decision.slo_ms, hard_deadline_ms=decision.hard_deadline_ms,
        latency_ms=float(latency_ms), slo_met=False, status=int(status), error=error,
    )



def controller_states(core, stamp: Time) -> list[ControllerState]:
    """ControllerState of every agent of `core` (a BraceController), sorted, then of the team."""
    agents = [*sorted(core.agents.items()), (TEAM_AGENT, core.team)]
    return [state_to_msg(agent_id, counters, core.tally.get(agent_id), stamp) for agent_id, counters in agents]


def state_to_msg(agent_id: str, counters: AgentCounters, tally, stamp: Time) -> ControllerState:
    """One agent's counters and tallies as a ControllerState message."""
    msg = ControllerState()
    msg.header.stamp = stamp
    msg.agent_id = agent_id
    msg.step = int(counters.latest_step)
    msg.steps_since_call = _never(counters.steps_since_call(counters.latest_step))
    msg.steps_since_change = _never(counters.steps_since_change(counters.latest_step))
    msg.consecutive_failures = int(counters.consecutive_failures)
    msg.consecutive_deferrals = int(counters.consecutive_deferrals)
    msg.call_in_flight = counters.call_in_flight
    if tally is not None:
        msg.triggers, msg.admitted, msg.suppressed, msg.overrides = (
            tally.triggers, tally.admitted, tally.suppressed, tally.overrides,
        )
    return msg



MAX_POSITION_M = 1e6
"""Positions farther than this from the origin (m) are rejected."""


def observation_from_msg(msg: AgentState, latest_step: Optional[int]) -> tuple[str, int, AgentObservation]:
    """AgentState -> (agent id, step, observation); InvalidInput naming the field when out of bounds.

    The tracking error may be NaN (unknown) or any non-negative number; positions are finite and bounded.
    """
    p = msg.position
    position = tuple(check_float(f"position.{axis}", v, -MAX_POSITION_M, MAX_POSITION_M)
                     for axis, v in (("x", p.x), ("y", p.y), ("z", p.z)))
    error = float(msg.tracking_error)
    if not (math.isnan(error) or 0.0 <= error < math.inf):
        raise InvalidInput("range_tracking_error", f"tracking_error {error} is neither NaN nor finite and >= 0")
    return (check_agent_id("agent_id", msg.agent_id), check_step("step", msg.step, latest_step),
            AgentObservation(position, error, bool(msg.has_goal)))


def outcome_from_msg(msg: ExecutionOutcome) -> tuple[str, bool, str]:
    """ExecutionOutcome -> (agent id, success, detail); InvalidInput naming the field when out of bounds."""
    check_step("step", msg.step)
    check_text("action", msg.action, MAX_ID_CHARS)
    return check_agent_id("agent_id", msg.agent_id), bool(msg.success), check_text("detail", msg.detail)


def verdict_from_msg(msg: VerifierVerdict) -> tuple[str, bool, float, str]:
    """VerifierVerdict -> (agent id, violation, confidence, detail); InvalidInput naming the field when out of bounds."""
    return (check_agent_id("agent_id", msg.agent_id), bool(msg.violation),
            check_float("confidence", msg.confidence, 0.0, 1.0), check_text("detail", msg.detail))
