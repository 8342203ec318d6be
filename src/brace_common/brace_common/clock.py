"""The stack's two clocks, and which one each thing uses.

- Stamps (message headers) are ROS time: the node's clock, which follows
  /clock when `use_sim_time` is set, so bags replay correctly.
- Latencies, SLOs and hard deadlines are durations of real computation: the
  steady clock (time.monotonic()). A replanning call takes wall time even when
  the simulator holds its clock while waiting for it, so its deadline must not
  stop with the simulated time.
- Timers that pace real work (deadline watchdogs, diagnostics, the simulator's
  own stepping) run on the steady clock for the same reason.
"""

from __future__ import annotations

from collections.abc import Callable

from builtin_interfaces.msg import Time
from rclpy.clock import Clock, ClockType

_NS = 1_000_000_000


def steady_timer(node, period_s: float, callback: Callable[[], None], callback_group=None):
    """A timer of `node` on the steady clock (it fires whatever ROS time does)."""
    return node.create_timer(period_s, callback, callback_group=callback_group,
                             clock=Clock(clock_type=ClockType.STEADY_TIME))


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
