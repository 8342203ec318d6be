"""The clock of one replanning call: its start, SLO and hard deadline, cancel flag and the phases it went through.

Shared by the in-process call path and the server call path so both account
phases the same way (paper Sec. 3.4): a call that waited starts its clock
when it was queued, and the wait is its `queue` phase.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional

from brace_common.vocabulary import Phase


@dataclass
class PhaseRecord:
    """Wall time and tokens of one phase of a call."""

    phase: str  # a Phase value (PhaseTiming.PHASE_*)
    duration_ms: float
    tokens_in: int
    tokens_out: int
    offset_ms: float = 0.0  # when the phase began, after the call's start (steady clock)


class PhaseClock:
    """Times the phases of one call against its hard deadline (and knows when its SLO_t ends: `slo_at`)."""

    def __init__(self, hard_deadline_ms: float, cancelled: Callable[[], bool] = lambda: False,
                 on_phase: Callable[[str, float], None] = lambda phase, elapsed_ms: None,
                 queued_at: Optional[float] = None, slo_ms: float = 0.0):
        now = time.monotonic()
        self.start = min(queued_at, now) if queued_at is not None else now
        self.deadline = self.start + hard_deadline_ms / 1000.0
        self.slo_at: Optional[float] = self.start + slo_ms / 1000.0 if slo_ms > 0.0 else None  # None: no SLO
        self.cancelled = cancelled
        self.on_phase = on_phase
        self.phases: list[PhaseRecord] = []
        if queued_at is not None:
            self.phases.append(PhaseRecord(Phase.QUEUE.value, (now - self.start) * 1000.0, 0, 0))

    def abort(self) -> bool:
        """True once the call is cancelled or past its hard deadline."""
        return self.cancelled() or time.monotonic() >= self.deadline

    def begin(self, name: Phase) -> float:
        """Announce phase `name` (feedback) and return its start instant."""
        self.on_phase(name.value, (time.monotonic() - self.start) * 1000.0)
        return time.monotonic()

    def end(self, name: Phase, t0: float, tokens_in: int, tokens_out: int, minus_ms: float = 0.0,
            t1: Optional[float] = None) -> PhaseRecord:
        """Record phase `name` from `t0` to `t1` (now by default), less `minus_ms` booked elsewhere."""
        t1 = time.monotonic() if t1 is None else t1
        phase = PhaseRecord(name.value, max(0.0, (t1 - t0) * 1000.0 - minus_ms), tokens_in, tokens_out,
                            (t0 - self.start) * 1000.0)
        self.phases.append(phase)
        return phase

    def elapsed_ms(self) -> float:
        """Wall time since the call's start (its latency when it ends now)."""
        return (time.monotonic() - self.start) * 1000.0
