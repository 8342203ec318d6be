"""When a controller decides its held triggers again (ROS-free): at once when a call finishes, or, with a planner
server shared by other robots, after a random jitter once that server's load fell; a load without news goes stale."""

from __future__ import annotations

import random
from collections.abc import Callable

from brace_common.counters import Counters
from brace_common.replanning import Trigger

from .config import ControllerNodeConfig
from .controller import BraceController

COUNTS = ("held_decided_again", "server_load_samples", "server_load_stale")
"""The counters HeldRelease counts into (its owner declares them)."""


class HeldRelease:
    """The server-load release rule of `core`'s held triggers (`cfg`: jitter and staleness, read when used).

    Each event says whether the held triggers are due now; `watching` says whether a watchdog must still tick.
    """

    def __init__(self, core: BraceController, cfg: ControllerNodeConfig, counts: Counters,
                 uniform: Callable[[float, float], float] = random.uniform) -> None:
        self.core, self.cfg, self.counts, self.uniform = core, cfg, counts, uniform
        self.load_at = 0.0  # steady time of the latest server_load that reported a load (0: none yet)
        self.release_at = 0.0  # steady time at which held triggers are decided again (0: not due)

    @property
    def watching(self) -> bool:
        """A release is scheduled, or the server's load must be dropped once it goes stale."""
        return bool(self.release_at or self.core.server_calls)

    def call_finished(self, now: float) -> bool:
        """The backlog shrank at steady time `now`: True when the held triggers are decided now (no shared server's
        load seen yet); else a release after a jitter up to server_release_jitter_s is scheduled (none is first)."""
        if not self.load_at:
            return True
        if self.core.held and not self.release_at:
            self.release_at = now + self.uniform(0.0, self.cfg.server_release_jitter_s)
        return False

    def server_load(self, reported: bool, others: int, now: float) -> bool:
        """A server_load sample: the requests of other clients (`reported` False: the server knows none); True when
        the held triggers are decided now."""
        self.counts["server_load_samples"] += 1
        if reported:
            self.load_at = now
        return self._set(max(0, others) if reported else 0, now)

    def due(self, now: float) -> bool:
        """A watchdog tick: a load older than server_load_stale_after_s is dropped (unknown, not assumed); True when
        the held triggers are decided now."""
        fell = False
        if self.core.server_calls and now - self.load_at > self.cfg.server_load_stale_after_s:
            self.counts["server_load_stale"] += 1
            fell = self._set(0, now)
        return fell or bool(self.release_at and now >= self.release_at)

    def take(self) -> list[Trigger]:
        """The held triggers to decide again now, oldest step first (each counted as decided again)."""
        self.release_at = 0.0
        held = self.core.release_held()
        self.counts.add("held_decided_again", len(held))
        return held

    def _set(self, calls: int, now: float) -> bool:
        return self.core.set_server_calls(calls) and self.call_finished(now)
