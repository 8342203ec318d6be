"""The admitted calls a controller has not closed yet (ROS-free): their hard deadlines, which still wait for a
planner server, which are due at a watchdog tick, and how each ended (CallEnd)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Optional

from brace_common.counters import Health
from brace_common.replanning import CallRecord, Decision
from brace_common.vocabulary import CallStatus

COUNTS = ("calls_finished", "calls_waited_for_planner", "goals_rejected", "planner_unavailable",
          "deadline_cancellations", "calls_cancelled_by_episode", "calls_aborted_by_planner", "malformed_calls")
"""How calls waited and ended (CallEnd.counter), as counted by their owner (diagnostics keys)."""
WARNINGS = ("goals_rejected", "planner_unavailable", "deadline_cancellations", "calls_aborted_by_planner",
            "malformed_calls")
"""Of COUNTS, those that make the owner's diagnostics WARN when non-zero."""


@dataclass(frozen=True)
class CallEnd:
    """How a call ended: its status and latency, what its result said, the audit record's `error` when no planner
    answered (the controller writes that record), a planner error's `fault`, the counter (diagnostics key) of the
    way it ended, if it has one (a goal rejected, a deadline, a status that is no CallStatus ...), and whether the
    controller ended it while its goal may still run (`cancels`: the goal is cancelled)."""

    status: CallStatus
    latency_ms: float
    plan_changed: bool = False
    tokens_after: int = 0
    tokens_before: int = 0
    error: str = ""
    fault: str = ""
    counter: str = ""
    cancels: bool = False

    def record(self, decision: Decision) -> CallRecord:
        """What the core learns of `decision`'s call."""
        return CallRecord(agent_id=decision.trigger.agent_id, step=decision.trigger.step, status=self.status,
                          plan_changed=self.plan_changed, latency_ms=self.latency_ms, tokens_after=self.tokens_after,
                          slo_ms=decision.slo_ms, decision_id=decision.decision_id, mode=decision.mode,
                          tokens_before=self.tokens_before, fault=self.fault)


@dataclass
class PendingCall:
    """An admitted call whose Replan goal has not finished yet."""

    decision: Decision
    deadline: float  # time.monotonic() past which the call is cancelled
    goal_handle: Optional[object] = None
    started: float = 0.0
    sent: bool = False  # the goal went to a server (false: waiting for one)

    def elapsed_ms(self, now: float) -> float:
        """Milliseconds since the call was admitted."""
        return (now - self.started) * 1000.0

    def overdue(self, now: float) -> CallEnd:
        """How the call ends at its hard deadline: no server took it (unavailable, audited here), or cut off."""
        if self.sent:
            return CallEnd(CallStatus.DEADLINE, self.elapsed_ms(now), counter="deadline_cancellations", cancels=True)
        return CallEnd(CallStatus.UNAVAILABLE, self.elapsed_ms(now), error="no planner server by the hard deadline",
                       counter="planner_unavailable")

    def overdue_text(self) -> str:
        """The warning of a call at its hard deadline."""
        call = f"call {self.decision.decision_id} for {self.decision.trigger.agent_id}"
        if self.sent:
            return f"{call} passed its hard deadline {self.decision.hard_deadline_ms:.0f} ms; cancelled"
        return f"{call}: no Replan server by its hard deadline"

    def cancelled_by_episode(self, now: float) -> CallEnd:
        """How the call ends when a new episode begins (one a planner took gets the planner's own record)."""
        return CallEnd(CallStatus.CANCELLED, self.elapsed_ms(now), counter="calls_cancelled_by_episode", cancels=True,
                       error="" if self.sent else "a new episode began before a planner took the call")

    def rejected(self, now: float) -> CallEnd:
        """How the call ends when the planner rejected its goal."""
        return CallEnd(CallStatus.UNAVAILABLE, self.elapsed_ms(now), error="planner rejected the goal",
                       counter="goals_rejected")


@dataclass
class Due:
    """What a watchdog tick must do: send the calls whose server is up now, close those no server took by their
    hard deadline (`unavailable`) and cancel those still running at it (`missed`)."""

    send: list[PendingCall] = field(default_factory=list)
    unavailable: list[PendingCall] = field(default_factory=list)
    missed: list[PendingCall] = field(default_factory=list)


class PendingCalls:
    """The calls in flight or waiting for a server, by decision id (the owner serialises access)."""

    def __init__(self) -> None:
        self.calls: dict[str, PendingCall] = {}

    def __len__(self) -> int:
        return len(self.calls)

    def add(self, decision: Decision, now: float) -> PendingCall:
        """An admitted decision's call, due by its hard deadline from `now`."""
        call = PendingCall(decision, now + decision.hard_deadline_ms / 1000.0, started=now)
        self.calls[decision.decision_id] = call
        return call

    def get(self, decision_id: str) -> Optional[PendingCall]:
        """The open call of `decision_id` (None: closed)."""
        return self.calls.get(decision_id)

    def pop(self, decision_id: str) -> Optional[PendingCall]:
        """Close the call of `decision_id`; None when something closed it already."""
        return self.calls.pop(decision_id, None)

    def drain(self) -> list[PendingCall]:
        """Close every call (a new episode: their plans are for the world that ended)."""
        calls, self.calls = list(self.calls.values()), {}
        return calls

    def waiting(self) -> int:
        """Calls still waiting for a server."""
        return sum(not c.sent for c in self.calls.values())

    def health(self, server_ready: bool, action: str) -> Health:
        """The calls in flight and waiting, and whether a Replan server is up on `action` (WARN when none is)."""
        waiting = self.waiting()
        return Health({"calls_in_flight": len(self) - waiting, "calls_waiting_for_planner": waiting,
                       "planner_server": server_ready},
                      warnings=() if server_ready else (f"no Replan server on '{action}'",))

    def due(self, now: float, server_ready: Callable[[], bool]) -> Due:
        """The calls due at steady time `now` (`server_ready` is asked at most once, only when a call waits). A call
        the result closed between the snapshot and its turn is skipped (results arrive outside the watchdog)."""
        out, ready = Due(), None
        for decision_id, call in list(self.calls.items()):
            if not call.sent and now < call.deadline:
                ready = server_ready() if ready is None else ready
                if ready:
                    out.send.append(call)
                continue
            if now < call.deadline or self.pop(decision_id) is None:
                continue
            (out.missed if call.sent else out.unavailable).append(call)
        return out
