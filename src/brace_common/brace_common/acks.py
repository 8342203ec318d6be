"""Waiting until a reliable publisher's samples are acknowledged, without freezing the process.

rclpy's `Publisher.wait_for_all_acked(timeout)` holds the interpreter lock for the whole wait: every other thread of
the process stops (measured: a busy thread ran 1 iteration in a 2 s wait), so in a process that composes several
nodes a world's last END froze the arm, the executor and the verifier beside it, and their own watchdogs fired when
it let go. A zero timeout asks once and returns at once; polling it lets the other threads run between the asks.
"""

from __future__ import annotations

import time

from rclpy.duration import Duration
from rclpy.publisher import Publisher

POLL_S = 0.01
"""Seconds between two asks."""


def wait_for_all_acked(publisher: Publisher, timeout_s: float) -> bool:
    """True once every matched reliable reader acknowledged every sample `publisher` sent; False after `timeout_s`."""
    end = time.monotonic() + timeout_s
    while not publisher.wait_for_all_acked(Duration(nanoseconds=0)):
        if time.monotonic() >= end:
            return False
        time.sleep(POLL_S)
    return True
