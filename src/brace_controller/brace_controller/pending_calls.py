"""The admitted calls a controller has not closed yet (ROS-free): their hard deadlines, which still wait for a
planner server, and which are due at a watchdog tick."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Optional

from brace_common.replanning import Decision


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
