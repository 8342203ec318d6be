"""Readiness in the graph: a node that needs its peers waits for them, whatever order they started in.

`ros2 launch` starts every process at once; a model takes seconds to load. A
node that must not act before its peers are up (the simulator before the
controller and the planner) asks `PeerWait.ready()` from a timer: true once
every required node is in the graph, every required action server answers
and the graph has settled for `settle_s`. Past `timeout_s` without them it
reports what is missing (`overdue`), so diagnostics can say ERROR while it
keeps waiting.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Optional


class PeerWait:
    """Waits for nodes (by name, in the waiting node's namespace) and action servers (by client)."""

    def __init__(self, node, nodes: Sequence[str] = (), action_clients: Mapping[str, object] = (),
                 settle_s: float = 0.5, timeout_s: float = 60.0):
        self.node = node
        self.nodes = list(nodes)
        self.action_clients = dict(action_clients)  # action name -> its rclpy ActionClient
        self.settle_s = settle_s
        self.timeout_s = timeout_s
        self.started = time.monotonic()
        self._all_up_since: Optional[float] = None
        self.done = not self.nodes and not self.action_clients

    def missing(self) -> list[str]:
        """What is not up yet: node names and action names."""
        namespace = self.node.get_namespace()
        present = {name for name, ns in self.node.get_node_names_and_namespaces() if ns == namespace}
        gone = [n for n in self.nodes if n not in present]
        gone += [f"action server '{name}'" for name, c in self.action_clients.items() if not c.server_is_ready()]
        return gone

    def ready(self) -> bool:
        """True once everything required has been up for `settle_s` (then true for good)."""
        if self.done:
            return True
        now = time.monotonic()
        if self.missing():
            self._all_up_since = None
            return False
        self._all_up_since = self._all_up_since or now
        self.done = now - self._all_up_since >= self.settle_s
        return self.done

    def waiting(self, counts: MutableMapping[str, int], logger) -> bool:
        """A tick's check: True (counted in counts['ticks_waiting_for_peers'], logged on the first tick and when
        overdue, at most every 10 s) while the peers are not ready."""
        if self.ready():
            return False
        counts["ticks_waiting_for_peers"] += 1
        if counts["ticks_waiting_for_peers"] == 1 or self.overdue():
            logger.info(f"waiting for {', '.join(self.missing()) or 'the graph to settle'}", throttle_duration_sec=10.0)
        return True

    def overdue(self) -> bool:
        """Still waiting after `timeout_s`."""
        return not self.done and time.monotonic() - self.started > self.timeout_s

    def waited_s(self) -> float:
        """Seconds since the wait began."""
        return time.monotonic() - self.started

    def errors(self, consequence: str = "") -> list[str]:
        """The diagnostics ERROR line of an overdue wait (what is missing, for how long, and `consequence`); []
        while the wait is not overdue."""
        if not self.overdue():
            return []
        missing = ", ".join(self.missing()) or "a settled graph"
        return [f"peers missing after {self.waited_s():.0f} s: {missing}" + (f"; {consequence}" if consequence else "")]
