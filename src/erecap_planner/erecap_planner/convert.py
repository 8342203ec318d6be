"""The only place that turns brace_msgs messages into erecap_planner dataclasses and back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from brace_msgs.action import Replan
from brace_msgs.msg import ContextEntry, Episode, ExecutionOutcome, PhaseTiming, Plan, PlanStep, ReplanCall, ServerLoad
from builtin_interfaces.msg import Time

from brace_common.clock import seconds_of, stamp_after
from brace_common.validation import (
    MAX_TEXT_CHARS,
    InvalidInput,
    check_agent_id,
    check_float,
    check_id,
    check_int,
    check_step,
    check_text,
)
from brace_common.vocabulary import Block, EntryKind, Mode, TriggerKind
from brace_memory.system import StepOutcome

from .call_path import CallOutcome, CallRequest
from .context import Entry

if TYPE_CHECKING:
    from .call_queue import QueuedCall
    from .server_watch import LoadReport

MIN_TOKEN_BUDGET = 8
"""The smallest B_t a call may ask for (the protected head and tail alone take more)."""
MAX_TOKEN_BUDGET = 1_000_000
MAX_CALL_MS = 3_600_000.0
"""An hour: the longest SLO or hard deadline a call may ask for."""
CALL_MODES = (Mode.FULL_REPLAN, Mode.PARTIAL_REPLAN, Mode.REUSE_SUBPLAN)
"""The modes a call may have (defer_replan makes no call)."""
TRIGGER_KINDS = frozenset(int(k) for k in TriggerKind)
"""Replan.Goal.trigger_kind's valid values."""


def entry_from_msg(msg: ContextEntry, max_text_chars: int = MAX_TEXT_CHARS) -> Entry:
    """ContextEntry -> Entry; InvalidInput naming the field when the message is out of bounds."""
    try:
        block = Block(msg.block)
    except ValueError:
        raise InvalidInput("bad_block", f"unknown block {msg.block}") from None
    return Entry(check_agent_id("agent_id", msg.agent_id), check_step("step", msg.step), block,
                 check_text("text", msg.text, max_text_chars, allow_empty=False),
                 check_id("kind", msg.kind, allow_empty=True) or EntryKind.OBSERVATION.value,
                 seconds_of(msg.header.stamp))


def outcome_from_msg(msg: ExecutionOutcome) -> StepOutcome:
    """ExecutionOutcome -> StepOutcome; InvalidInput naming the field when the message is out of bounds."""
    return StepOutcome(check_agent_id("agent_id", msg.agent_id), check_step("step", msg.step),
                       check_id("action", msg.action), bool(msg.success),
                       check_text("detail", msg.detail, MAX_TEXT_CHARS, allow_empty=True), int(msg.failure),
                       seconds_of(msg.header.stamp))


@dataclass(frozen=True)
class EpisodeMark:
    """An episode's boundary as the planner's inputs read it (Episode)."""

    event: int        # EpisodeEvent (another value: not a boundary the planner acts on)
    stamp_s: float
    key: str          # <world>/<seed>/<episode>/<stamp>: how the experience bank names an ended episode
    success: bool
    steps: int
    episode: tuple[str, int]  # (world, episode)


def episode_from_msg(msg: Episode) -> EpisodeMark:
    """Episode -> EpisodeMark."""
    stamp_s = seconds_of(msg.header.stamp)
    return EpisodeMark(int(msg.event), stamp_s, f"{msg.world}/{msg.seed}/{msg.episode}/{stamp_s:.3f}", bool(msg.success),
                       int(msg.steps), (msg.world, msg.episode))


def request_from_goal(goal) -> CallRequest:
    """Replan goal -> CallRequest; InvalidInput naming the field when the goal is out of bounds."""
    if goal.mode not in CALL_MODES:
        raise InvalidInput("bad_mode", f"mode {goal.mode} is not a replanning call's (full, partial, reuse)")
    slo_ms = check_float("slo_ms", goal.slo_ms, 0.0, MAX_CALL_MS)
    deadline_ms = check_float("hard_deadline_ms", goal.hard_deadline_ms, 0.0, MAX_CALL_MS)
    if slo_ms <= 0.0 or deadline_ms <= 0.0:
        raise InvalidInput("range_slo_ms", "slo_ms and hard_deadline_ms must be > 0")
    if goal.trigger_kind not in TRIGGER_KINDS:
        raise InvalidInput("bad_trigger_kind", f"trigger_kind {goal.trigger_kind} is not a TriggerEvent.KIND_*")
    return CallRequest(check_agent_id("agent_id", goal.agent_id),
                       check_int("token_budget", goal.token_budget, MIN_TOKEN_BUDGET, MAX_TOKEN_BUDGET),
                       slo_ms, deadline_ms, int(goal.mode), check_step("step", goal.step),
                       check_id("decision_id", goal.decision_id, allow_empty=True), memory=not goal.memory_off,
                       trigger_kind=int(goal.trigger_kind))


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
    msg.backend = outcome.backend
    msg.server_prompt_tokens = int(outcome.server_prompt_tokens)
    msg.server_completion_tokens = int(outcome.server_completion_tokens)
    msg.error = outcome.error
    msg.vetoed = list(outcome.vetoed)
    if outcome.recap is not None:
        msg.recap_call, msg.depth = int(outcome.recap.kind), int(outcome.recap.depth)
    for phase in outcome.phases:
        timing = PhaseTiming(phase=phase.phase, duration_ms=float(phase.duration_ms),
                             tokens_in=int(phase.tokens_in), tokens_out=int(phase.tokens_out))
        timing.header.stamp = stamp_after(accepted, phase.offset_ms)
        msg.phases.append(timing)
    return msg


def plan_to_msg(outcome: CallOutcome, request: CallRequest, plan_id: str, stamp: Time) -> Plan:
    """The validated steps as a Plan (no steps when the call produced none)."""
    plan = Plan(plan_id=plan_id, agent_id=request.agent_id, step=request.step, decision_id=request.decision_id,
                trigger_kind=request.trigger_kind)
    plan.header.stamp = stamp
    for i, step in enumerate(outcome.steps):
        plan_step = PlanStep(index=i, action=step.action, parameters_json=step.parameters_json())
        plan_step.header.stamp = stamp
        plan.steps.append(plan_step)
    recap = outcome.recap
    if recap is not None:
        plan.thought, plan.depth, plan.recap_need = recap.thought, recap.next_depth, int(recap.need)
        for i, subtask in enumerate(recap.subtasks):
            entry = PlanStep(index=i, action=subtask.step.action, parameters_json=subtask.step.parameters_json(),
                             composite=subtask.composite)
            entry.header.stamp = stamp
            plan.subtasks.append(entry)
    return plan


def replan_result(outcome: CallOutcome, call: QueuedCall, model: str, now: Time) -> Replan.Result:
    """A finished call's Replan result: its ReplanCall record (`result.call`) and its Plan stamped `now`."""
    result = Replan.Result(call=call_to_msg(outcome, call.request, call.call_id, model, call.stamp))
    result.plan = plan_to_msg(outcome, call.request, f"{call.call_id}/plan", now)
    return result


def feedback_msg(phase: str, elapsed_ms: float, now: Time) -> Replan.Feedback:
    """The feedback of a call entering `phase` `elapsed_ms` after it started."""
    feedback = Replan.Feedback(phase=phase, elapsed_ms=float(elapsed_ms))
    feedback.header.stamp = now
    return feedback


def server_load_to_msg(report: LoadReport, now: Time) -> ServerLoad:
    """A server_load reading as the ServerLoad message the controller reads."""
    msg = ServerLoad(server_url=report.server_url, reported=report.load is not None, own_requests=report.own_requests)
    msg.header.stamp = now
    if report.load is not None:
        msg.engine, msg.requests_running, msg.requests_waiting = (report.load.engine, report.load.running,
                                                                  report.load.waiting)
    return msg
