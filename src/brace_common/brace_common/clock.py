"""The stack's two clocks, and which one each thing uses.

- Stamps (message headers) are ROS time: the node's clock, which follows
  /clock when `use_sim_time` is set, so bags replay correctly.
- Latencies, SLOs and hard deadlines are durations of real computation: the
  steady clock (time.monotonic()). A replanning call takes wall time even when
  the simulator holds its clock while waiting for it, so its deadline must not
  stop with the simulated time.
- Timers that pace real work (deadline watchdogs, diagnostics, the simulator's
  own stepping) run on the steady clock for the same reason; a world's step
  timer restarts its period after each step (`spaced_timer`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from builtin_interfaces.msg import Time
from rclpy.clock import Clock, ClockType

_NS = 1_000_000_000


def steady_timer(node, period_s: float, callback: Callable[[], None], callback_group=None):
    """A timer of `node` on the steady clock (it fires whatever ROS time does)."""
    return node.create_timer(period_s, callback, callback_group=callback_group,
                             clock=Clock(clock_type=ClockType.STEADY_TIME))


def spaced_timer(node, period_s: float, callback: Callable[[], None], callback_group=None, lock=None):
    """A steady timer whose period restarts when `callback` returns: at least `period_s` between the end of one run
    and the start of the next.

    A world's step that takes longer than its period would otherwise find its timer ready again at once, and a
    multi-threaded executor (brace-run's, the tests') yields a node's ready timers before its subscriptions: the
    plans and decisions the world waits for would never be taken while it steps. `lock` (a lifecycle node's
    transition lock) is held across the run and the restart, so a deactivation that cancels the timer is never
    undone by the restart.
    """
    timer = None

    def run() -> None:
        with lock if lock is not None else contextlib.nullcontext():
            try:
                callback()
            finally:
                if not timer.is_canceled():
                    timer.reset()

    timer = steady_timer(node, period_s, run, callback_group)
    return timer


def stamp_after(base: Time, offset_ms: float) -> Time:
    """The stamp `offset_ms` after `base` (a phase's start after its call's start)."""
    total = base.sec * _NS + base.nanosec + int(round(offset_ms * 1e6))
    return Time(sec=total // _NS, nanosec=total % _NS)


def stamp_of(seconds: float) -> Time:
    """A stamp from seconds of ROS time (e.g. the simulator's own clock)."""
    total = int(round(seconds * _NS))
    return Time(sec=total // _NS, nanosec=total % _NS)


def seconds_of(stamp: Time) -> float:
    """Seconds of a stamp."""
    return stamp.sec + stamp.nanosec * 1e-9
