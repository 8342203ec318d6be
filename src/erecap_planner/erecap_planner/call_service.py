"""The planner's calls from acceptance to record: queued earliest deadline first, run one at a time, accounted.

ROS-free: the node hands in each goal's request and how to answer it; this waits for a schema the world has yet to
publish, runs the call path on the newest context, keeps a plan's memory writes and counts every call by status.
Whatever fails on the way, a call ends with an outcome saying why (docs/planner.md).
"""

from __future__ import annotations

import itertools
import time
import traceback
from collections.abc import Callable
from typing import Any, Optional

from brace_common.counters import Counters, Health
from brace_common.vocabulary import CallState, CallStatus
from brace_memory.memory_write import split_memory_writes

from .call_path import INTERNAL_ERROR, CallOutcome, CallPath, CallRequest, internal_error_outcome, unserved_outcome
from .call_queue import CallQueue, QueuedCall
from .planner_inputs import PlannerInputs
from .world_schema import WorldSchema

WARNED = ("goals_rejected", "status.planner_error", "status.deadline")
"""The counters whose non-zero value makes the planner's status WARN."""


def waited_ms(sent_ns: int, now_ns: int, hard_deadline_ms: float) -> float:
    """How long a goal sent at `sent_ns` (0: unstamped) waited before its acceptance at `now_ns`, within [0, its hard
    deadline]: a clock that disagrees counts nothing."""
    before_ms = (now_ns - sent_ns) / 1e6 if sent_ns > 0 else 0.0
    return min(max(0.0, before_ms), hard_deadline_ms)


class CallService:
    """The calls of one call path (`name`/<n> their ids); `log` is the node's logger."""

    def __init__(self, inputs: PlannerInputs, schema: WorldSchema, name: str, log) -> None:
        self.path: Optional[CallPath] = None  # set while configured
        self.inputs = inputs
        self.schema = schema
        self.log = log
        self.queue = CallQueue()  # one model: calls run one at a time, earliest deadline first
        self.calls: dict[bytes, QueuedCall] = {}  # goal id -> its call
        self._ids = (f"{name}/{n}" for n in itertools.count(1))
        self.goal_wait_ms = 0.0  # the latest goal's wait before acceptance
        self.last_internal_error = ""  # the latest exception the planner raised in a call (diagnostics ERROR)
        self.counts = Counters(("calls", "goals_rejected", "calls_waited_for_schema", "memory_writes",
                                "respelled_values", "plans_cut_at_slo", "steps_vetoed", "plans_vetoed",
                                "internal_errors",
                                *(f"status.{s.label}" for s in CallStatus)),
                               warn=WARNED)

    @property
    def model_name(self) -> Optional[str]:
        """The model the calls name (None without a call path)."""
        return self.path.model_name if self.path is not None else None

    def use(self, path: CallPath) -> None:
        """Run calls on `path` (at configure)."""
        self.path = path

    def release(self) -> None:
        """Close the path's memory system (its summary worker, then its store), forget the path and every call
        (cleanup): waiting goals belonged to the destroyed action server, their callers see no result and cancel at
        their deadlines."""
        memory = memory_of(self.path)
        if memory is not None:
            memory.close()
        self.path, self.queue, self.calls = None, CallQueue(), {}

    def rejected(self) -> None:
        """A goal was refused."""
        self.counts.add("goals_rejected")

    def accept(self, key: bytes, request: CallRequest, before_ms: float, answer: Callable[[], None],
               stamp: Any) -> None:
        """Queue an accepted goal (its clock started `before_ms` ago); answer the agent's older waiting call it
        supersedes; start one if none runs."""
        self.goal_wait_ms = round(before_ms, 1)
        call = QueuedCall(next(self._ids), request.agent_id, time.monotonic() - before_ms / 1000.0, request.slo_ms,
                          request.hard_deadline_ms, request=request, answer=answer, stamp=stamp)
        self.calls[key] = call
        older = self.queue.submit(call)
        if older is not None:
            older.answer()  # answered at once: superseded
        self.dispatch()

    def cancel(self, key: bytes) -> bool:
        """A cancel request: True when the call was waiting (it is answered now); a running one stops by itself."""
        call = self.calls.get(key)
        return call is not None and self.queue.remove(call.call_id, CallState.CANCELLED) is not None

    def expire(self) -> bool:
        """Answer every waiting call whose hard deadline has passed (it would only be cancelled later); whether calls
        still wait."""
        for call in self.queue.expired(time.monotonic()):
            call.answer()
        return len(self.queue) > 0

    def dispatch(self) -> None:
        """Start the next waiting call when none runs."""
        call = self.queue.start_next()
        if call is not None:
            call.answer()

    def take(self, key: bytes) -> QueuedCall:
        """The call of a goal whose answer is due (no longer tracked)."""
        return self.calls.pop(key)

    def outcome(self, call: QueuedCall, cancelled: Callable[[], bool],
                on_phase: Callable[[str, float], None]) -> CallOutcome:
        """The call run (or answered without running: superseded, cancelled, expired) and accounted; a call whose
        run raised is a planner error `internal_error`, a failure in the bookkeeping after it keeps the plan."""
        try:
            outcome = self._outcome(call, cancelled, on_phase)
        except Exception as exc:  # noqa: BLE001 - a bug must not make a call vanish from the audit
            outcome = internal_error_outcome(call, self.path.compressor_name, exc)
            self._internal_error(call, "run", exc)
        try:
            self._account(call, outcome)
        except Exception as exc:  # noqa: BLE001 - the validated plan stands; the failed bookkeeping is reported
            outcome.error = f"{INTERNAL_ERROR} after the plan was validated: {type(exc).__name__}: {exc}"
            self._internal_error(call, "bookkeeping", exc)
        return outcome

    def _outcome(self, call: QueuedCall, cancelled: Callable[[], bool],
                 on_phase: Callable[[str, float], None]) -> CallOutcome:
        try:
            if call.outcome is not CallState.RUNNING:
                return unserved_outcome(call, self.path.compressor_name)
            if not self.schema.known.is_set():  # the world's WorldInfo is on its way (sent at its episode start)
                self.counts.add("calls_waited_for_schema")
                left_s = call.hard_deadline_ms / 1000.0 - (time.monotonic() - call.accepted_at)
                self.schema.known.wait(max(0.0, left_s))  # none by the deadline: the call path answers NO_SCHEMA
            # The newest context: a call that waited plans from what is known now.
            return self.path.run(self.inputs.snapshot(), call.request, cancelled=cancelled, on_phase=on_phase,
                                 queued_at=call.accepted_at)
        finally:
            if call.outcome is CallState.RUNNING:
                self.queue.finish(call)
                self.dispatch()

    def _account(self, call: QueuedCall, outcome: CallOutcome) -> None:
        """A finished call's memory writes and plan into memory, its counts, its log lines."""
        request = call.request
        memory = memory_of(self.path)
        if memory is not None and outcome.status == CallStatus.OK and outcome.steps:
            self._keep_notes(memory, request, outcome)
            if outcome.steps:
                memory.on_plan(request.agent_id, request.step, request.mode, outcome.steps)
        self.counts.add("calls")
        self.counts.add(f"status.{CallStatus(outcome.status).label}")
        if outcome.status == CallStatus.OK and outcome.respelled:
            self.counts.add("respelled_values", len(outcome.respelled))
            self.log.info(f"call {call.call_id}: ids respelled {', '.join(outcome.respelled)}",
                          throttle_duration_sec=1.0)
        if outcome.status == CallStatus.OK and outcome.cut_at_slo:
            self.counts.add("plans_cut_at_slo")
        if outcome.vetoed:  # the lookahead veto refused these first steps (the plan went on, or was refused)
            self.counts.add("steps_vetoed", len(outcome.vetoed))
            self.counts.add("plans_vetoed", int(not outcome.steps))
            self.log.info(f"call {call.call_id}: vetoed {', '.join(outcome.vetoed)}", throttle_duration_sec=1.0)
        if outcome.status != CallStatus.OK:
            said = f" (output: {outcome.output_text[:160]!r})" if outcome.status == CallStatus.PLANNER_ERROR else ""
            self.log.warning(f"call {call.call_id} for {request.agent_id}: {outcome.error}{said}",
                             throttle_duration_sec=1.0)

    def _keep_notes(self, memory, request: CallRequest, outcome: CallOutcome) -> None:
        """A plan's memory writes (memory_write) leave the plan for reflective memory; a plan of nothing but
        writes is a planner error (nothing to execute), its notes kept."""
        steps, notes = split_memory_writes(outcome.steps)
        outcome.steps = steps  # before the notes are written: a failing store never sends a store_memory step on
        if notes and not steps:
            outcome.status = CallStatus.PLANNER_ERROR
            outcome.error = "only_memory_writes: the plan holds no step to execute besides store_memory"
        for text in notes:
            self.counts.add("memory_writes", memory.on_note(request.agent_id, request.step, text))

    def _internal_error(self, call: QueuedCall, where: str, exc: BaseException) -> None:
        """Count and log (with its trace) an exception the planner raised in a call's `where`."""
        self.counts.add("internal_errors")
        self.last_internal_error = f"call {call.call_id}, {where}: {type(exc).__name__}: {exc}"
        trace = "".join(traceback.format_exception(exc))
        self.log.error(f"internal error in {self.last_internal_error}\n{trace}")

    def health(self) -> Health:
        """Calls by status and what else was counted, the queue's, and an error for internal errors."""
        errors: tuple[str, ...] = ()
        if self.counts["internal_errors"]:
            errors = (f"{self.counts['internal_errors']} internal error(s), the latest in {self.last_internal_error} "
                      "(each call was answered with a record saying so)",)
        counts = self.counts.health()
        return (Health(counts.values, counts.warnings, errors) + Health({"goal_wait_before_acceptance_ms":
                                                                         self.goal_wait_ms})
                + self.queue.health())


def memory_of(path: Optional[CallPath]):
    """The call path's memory system (None without a path or memory)."""
    return path.memory.system if path is not None and path.memory is not None else None
