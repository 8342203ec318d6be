"""Samples a subscription never got, seen as gaps in each publisher's sequence numbers (ROS-free).

Every DDS writer numbers its samples 1, 2, 3, ... per topic; rmw passes the
number and the writer's gid with each taken message (rclpy's MessageInfo). A
reliable stream arrives in order, so a jump from n to n + k means k - 1 samples
this reader will never take: its history overwrote them before the node took
them, or the writer's own history discarded them before they were delivered (a
keep-last writer faster than the reader). The samples a writer sent before its
first one seen here are not counted: the reader may have matched it later.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Mapping
from typing import Any, Optional


class SequenceGaps:
    """Counts the samples missing between consecutive samples of each publisher (at most `max_publishers`
    remembered, the least recently heard forgotten)."""

    def __init__(self, max_publishers: int = 1024) -> None:
        self.max_publishers = max_publishers
        self._last: OrderedDict[bytes, int] = OrderedDict()
        self.lost = 0
        self.unordered = 0  # samples at or before their publisher's last one (a duplicate or a restarted writer)

    def received(self, info: Optional[Mapping[str, Any]]) -> int:
        """Account one taken sample's MessageInfo; how many samples of its publisher were missed just before it
        (0 when the rmw gives no sequence number or gid)."""
        if not info:
            return 0
        number, gid = info.get("publication_sequence_number"), info.get("publisher_gid")
        if number is None or not gid:
            return 0
        return self.observe(bytes(gid.get("data", b"")) if isinstance(gid, Mapping) else bytes(gid), number)

    def observe(self, publisher: Hashable, number: int) -> int:
        """Account sample `number` of `publisher`; how many of its samples were missed just before it."""
        last = self._last.pop(publisher, None)
        self._last[publisher] = number if last is None else max(last, number)
        if len(self._last) > self.max_publishers:
            self._last.popitem(last=False)
        if last is None:
            return 0
        if number <= last:
            self.unordered += 1
            return 0
        missed = number - last - 1
        self.lost += missed
        return missed

    @property
    def publishers(self) -> int:
        """Publishers remembered."""
        return len(self._last)

    def forget(self) -> None:
        """Forget every publisher (the subscription was recreated)."""
        self._last.clear()
