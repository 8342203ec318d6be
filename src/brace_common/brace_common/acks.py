"""Waiting until a reliable publisher's samples are acknowledged, without freezing the process.

rclpy's `Publisher.wait_for_all_acked(timeout)` holds the interpreter lock for the whole wait: every other thread of
the process stops (measured: a busy thread ran 1 iteration in a 2 s wait), so in a process that composes several
nodes a world's last END froze the arm, the executor and the verifier beside it, and their own watchdogs fired when
it let go. A zero timeout asks once and returns at once; polling it lets the other threads run between the asks.

A reader in another process acknowledges a sample only when the writer's next heartbeat asks for it: Fast DDS sends
one every 3 s by default, so a wait shorter than that fails whenever the reader is not in the writer's process
(measured between two processes: 2.3-3.0 s, every time). ACK_WAIT_S covers one heartbeat period.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from rclpy.duration import Duration
from rclpy.publisher import Publisher

POLL_S = 0.01
"""Seconds between two asks."""
HEARTBEAT_PERIOD_S = 3.0
"""Fast DDS's default heartbeat period: how often a reliable writer asks its readers to acknowledge."""
ACK_WAIT_S = HEARTBEAT_PERIOD_S + 1.0
"""How long a sample sent before exiting is waited for: one heartbeat period and a margin for a busy machine."""


def wait_for_all_acked(publisher: Publisher, timeout_s: float = ACK_WAIT_S) -> bool:
    """True once every matched reliable reader acknowledged every sample `publisher` sent; False after `timeout_s`."""
    return not unacknowledged({"": publisher}, timeout_s)


def unacknowledged(publishers: Mapping[str, Publisher], timeout_s: float = ACK_WAIT_S) -> list[str]:
    """Wait until every matched reliable reader of each of `publishers` (name -> publisher) acknowledged every sample
    it sent, at most `timeout_s` for all of them; the names of those still waiting then (none: all acknowledged)."""
    waiting = dict(publishers)
    end = time.monotonic() + timeout_s
    while True:
        waiting = {name: pub for name, pub in waiting.items() if not pub.wait_for_all_acked(Duration(nanoseconds=0))}
        if not waiting or time.monotonic() >= end:
            return list(waiting)
        time.sleep(POLL_S)
