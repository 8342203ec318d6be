"""Capped exponential backoff between attempts (reconnecting to an arm, retrying a planning server)."""

from __future__ import annotations

import threading
from typing import Optional


class Backoff:
    """initial_s, 2 x initial_s, ... capped at max_s between failed attempts; `succeeded` starts again (thread-safe).

    Times are the caller's clock (time.monotonic in the stack); `not_before` is 0.0 while an attempt may go at once.
    """

    def __init__(self, initial_s: float, max_s: float) -> None:
        if not 0.0 < initial_s <= max_s:
            raise ValueError(f"need 0 < initial_s ({initial_s}) <= max_s ({max_s})")
        self.initial_s = initial_s
        self.max_s = max_s
        self._lock = threading.Lock()
        self.attempts = 0  # failed attempts since the last success
        self.not_before = 0.0

    def due(self, now: float) -> bool:
        """Whether an attempt may be made at `now` (the first one at once)."""
        return now >= self.not_before

    def failed(self, now: float, retry_after_s: Optional[float] = None) -> float:
        """An attempt at `now` failed: the seconds to wait before the next (at least `retry_after_s` when given)."""
        with self._lock:
            self.attempts += 1
            wait = min(self.max_s, self.initial_s * 2.0 ** (self.attempts - 1))
            if retry_after_s is not None:
                wait = max(wait, retry_after_s)
            self.not_before = max(self.not_before, now + wait)
            return wait

    def succeeded(self) -> None:
        """An attempt worked: the next trouble starts again from `initial_s`, and the next attempt goes at once."""
        with self._lock:
            self.attempts, self.not_before = 0, 0.0
