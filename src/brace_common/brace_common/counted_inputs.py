"""Event-topic subscriptions whose every lost sample is counted on /diagnostics.

A node's event inputs (triggers, call records, outcomes, verdicts, context, decisions) are reliable keep-last
`qos.INPUTS` subscriptions. A sample the node never takes (its history overwrote it under a flood, or a keep-last
publisher discarded it first) leaves a gap in that publisher's sequence numbers, counted as
`lost.<input>.sequence_gap`; what the rmw itself reports lost is `lost.<input>.message_lost`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Optional

from rclpy.event_handler import QoSMessageLostInfo, SubscriptionEventCallbacks
from rclpy.node import Node
from rclpy.qos import QoSProfile
from rclpy.subscription import MessageInfo, Subscription

from . import qos
from .counters import Counters, Health
from .reception import SequenceGaps


class CountedInputs:
    """The lost-sample counters of a node's event inputs (`counts`: 'lost.<input>.<reason>' -> samples)."""

    def __init__(self) -> None:
        self.counts = Counters([])
        self._gaps: dict[str, SequenceGaps] = {}
        self._lock = threading.Lock()

    def subscribe(self, node: Node, msg_type: Any, topic: str, callback: Callable[[Any], None], name: str,
                  qos_profile: QoSProfile = qos.INPUTS, **kwargs: Any) -> Subscription:
        """`node.create_subscription` for input `name` whose callback first counts the samples missing before each
        one taken (`raw=True` and callback groups pass through)."""
        gaps = self._gaps.setdefault(name, SequenceGaps())
        self.counts.declare(f"lost.{name}.sequence_gap", f"lost.{name}.message_lost", warn=True)

        def take(msg: Any, info: MessageInfo) -> None:
            with self._lock:
                self.counts[f"lost.{name}.sequence_gap"] += gaps.received(info)
            callback(msg)

        def lost(info: QoSMessageLostInfo) -> None:
            with self._lock:
                self.counts[f"lost.{name}.message_lost"] += int(info.total_count_change)

        return node.create_subscription(msg_type, topic, take, qos_profile,
                                        event_callbacks=SubscriptionEventCallbacks(message_lost=lost), **kwargs)

    def forget(self, name: Optional[str] = None) -> None:
        """Forget the publishers of input `name` (every input when None): its subscription was recreated."""
        for key, gaps in self._gaps.items():
            if name is None or key == name:
                gaps.forget()

    def total(self) -> int:
        """Samples lost on every input."""
        with self._lock:
            return sum(self.counts.values())

    def health(self) -> Health:
        """The lost samples per input as values; any loss is a warning."""
        return self.counts.health()
