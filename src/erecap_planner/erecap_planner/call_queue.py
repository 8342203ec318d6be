"""Calls waiting for the planner model, served earliest deadline first (SLO deadline = accepted + SLO_t).

A newer call for an agent supersedes its waiting older one; a waiting call past its hard deadline leaves unserved.
Thread-safe. docs/planner.md says why.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from brace_common.counters import Counters, Health
from brace_common.vocabulary import CallState

from .call_path import CallRequest


def _unanswerable() -> None:
    raise RuntimeError("this call has no way to be answered")


@dataclass
class QueuedCall:
    """A call accepted by the planner and not finished yet."""

    call_id: str
    agent_id: str
    accepted_at: float            # time.monotonic() at acceptance
    slo_ms: float
    hard_deadline_ms: float
    request: Optional[CallRequest] = None  # what the goal asked
    answer: Callable[[], None] = _unanswerable  # runs the goal's execute callback, which answers the call
    stamp: Any = None             # the ROS time the call counts from (builtin_interfaces Time: its record's stamp)
    outcome: CallState = CallState.WAITING
    superseded_by: str = ""
    seq: int = field(default=0, compare=False)

    @property
    def slo_deadline(self) -> float:
        """When the call misses its SLO (monotonic seconds): the EDF key."""
        return self.accepted_at + self.slo_ms / 1000.0

    @property
    def hard_deadline(self) -> float:
        """When the call is past its hard deadline (monotonic seconds)."""
        return self.accepted_at + self.hard_deadline_ms / 1000.0


class CallQueue:
    """EDF queue of waiting calls with per-agent supersession; at most one call runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._heap: list[tuple[float, int, QueuedCall]] = []
        self._waiting: dict[str, QueuedCall] = {}   # agent -> its waiting call
        self._seq = itertools.count()
        self.running: Optional[QueuedCall] = None
        self.counts = Counters(("superseded", "expired_waiting", "cancelled_waiting"))

    def __len__(self) -> int:
        with self._lock:
            return len(self._waiting)

    def submit(self, call: QueuedCall) -> Optional[QueuedCall]:
        """Queue a call; return the agent's older waiting call it supersedes (no longer queued), if any."""
        with self._lock:
            older = self._waiting.pop(call.agent_id, None)
            if older is not None:
                older.outcome, older.superseded_by = CallState.SUPERSEDED, call.call_id
                self.counts.add("superseded")
            call.seq = next(self._seq)
            call.outcome = CallState.WAITING
            self._waiting[call.agent_id] = call
            heapq.heappush(self._heap, (call.slo_deadline, call.seq, call))
            return older

    def start_next(self) -> Optional[QueuedCall]:
        """If no call runs, take the waiting call with the earliest SLO deadline and mark it running."""
        with self._lock:
            if self.running is not None:
                return None
            while self._heap:
                _, _, call = heapq.heappop(self._heap)
                if call.outcome is CallState.WAITING and self._waiting.get(call.agent_id) is call:
                    del self._waiting[call.agent_id]
                    call.outcome = CallState.RUNNING
                    self.running = call
                    return call
            return None

    def finish(self, call: QueuedCall) -> None:
        """The running call is done; the next one may start."""
        with self._lock:
            call.outcome = CallState.DONE
            if self.running is call:
                self.running = None

    def remove(self, call_id: str, outcome: CallState) -> Optional[QueuedCall]:
        """Take a waiting call out (outcome CANCELLED or EXPIRED); None when it is not waiting."""
        with self._lock:
            for agent, call in list(self._waiting.items()):
                if call.call_id == call_id:
                    del self._waiting[agent]
                    call.outcome = CallState(outcome)
                    self.counts.add(f"{call.outcome.value}_waiting")
                    return call
            return None

    def expired(self, now: float) -> list[QueuedCall]:
        """Take out every waiting call whose hard deadline has passed."""
        with self._lock:
            gone = [c for c in self._waiting.values() if now >= c.hard_deadline]
            for call in gone:
                del self._waiting[call.agent_id]
                call.outcome = CallState.EXPIRED
                self.counts.add("expired_waiting")
            return gone

    def waiting(self) -> list[QueuedCall]:
        """The waiting calls in service order."""
        with self._lock:
            return sorted(self._waiting.values(), key=lambda c: (c.slo_deadline, c.seq))

    def health(self, prefix: str = "queue.") -> Health:
        """The calls waiting now and those that left the queue unserved, by why (values only)."""
        return Health({f"{prefix}waiting": len(self), **self.counts.health(prefix).values})
