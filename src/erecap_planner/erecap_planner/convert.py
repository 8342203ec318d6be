"""The only place that turns brace_msgs messages into erecap_planner dataclasses and back."""

from __future__ import annotations

from brace_msgs.msg import ContextEntry, PhaseTiming, Plan, PlanStep, ReplanCall
from builtin_interfaces.msg import Time

from brace_common.clock import seconds_of, stamp_after
from brace_common.vocabulary import Block, EntryKind

from .call_path import CallOutcome, CallRequest
from .context import Entry


def entry_from_msg(msg: ContextEntry) -> Entry:
    """ContextEntry -> Entry; ValueError naming the field when malformed."""
    if not msg.agent_id.strip():
        raise ValueError("agent_id is empty")
    if not msg.text.strip():
        raise ValueError("text is empty")
    try:
        block = Block(msg.block)
    except ValueError:
        raise ValueError(f"unknown block {msg.block}") from None
    return Entry(msg.agent_id, int(msg.step), block, msg.text, msg.kind or EntryKind.OBSERVATION.value,
                 seconds_of(msg.header.stamp))


def request_from_goal(goal) -> CallRequest:
    """Replan goal -> CallRequest."""
    return CallRequest(goal.agent_id, int(goal.token_budget), float(goal.slo_ms), float(goal.hard_deadline_ms),
                       int(goal.mode), int(goal.step), goal.decision_id)


def call_to_msg(outcome: CallOutcome, request: CallRequest, call_id: str, model: str, accepted: Time) -> ReplanCall:
    """CallOutcome -> the ReplanCall audit record, stamped with the ROS time the call was `accepted`."""
    msg = ReplanCall()
    msg.header.stamp = accepted
    msg.call_id = call_id
    msg.decision_id = request.decision_id
    msg.agent_id = request.agent_id
    msg.step = request.step
    msg.mode = request.mode
    msg.token_budget = request.token_budget
    msg.slo_ms = float(request.slo_ms)
    msg.hard_deadline_ms = float(request.hard_deadline_ms)
    msg.tokens_before = outcome.tokens_before
    msg.tokens_after = outcome.tokens_after
    msg.tokens_reused = outcome.tokens_reused
    msg.latency_ms = float(outcome.latency_ms)
    msg.slo_met = outcome.slo_met
    msg.status = int(outcome.status)
    msg.compressor = outcome.compressor
    msg.model = model
    msg.error = outcome.error
    for phase in outcome.phases:
        timing = PhaseTiming(phase=phase.phase, duration_ms=float(phase.duration_ms),
                             tokens_in=int(phase.tokens_in), tokens_out=int(phase.tokens_out))
        timing.header.stamp = stamp_after(accepted, phase.offset_ms)
        msg.phases.append(timing)
    return msg


def plan_to_msg(outcome: CallOutcome, request: CallRequest, plan_id: str, stamp: Time) -> Plan:
    """The validated steps as a Plan (no steps when the call produced none)."""
    plan = Plan(plan_id=plan_id, agent_id=request.agent_id, step=request.step, decision_id=request.decision_id)
    plan.header.stamp = stamp
    for i, step in enumerate(outcome.steps):
        plan_step = PlanStep(index=i, action=step.action, parameters_json=step.parameters_json())
        plan_step.header.stamp = stamp
        plan.steps.append(plan_step)
    return plan
