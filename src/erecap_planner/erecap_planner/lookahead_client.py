"""The planner's client of a world's Lookahead service: GiG's transition model T(s, a) for the lookahead module.

A late answer, a world without the service and a refused request leave the candidate out, each counted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Optional

from brace_msgs.srv import Lookahead
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node

from brace_common import names
from brace_common.action_schema import Step
from brace_common.counters import Counters, Health
from brace_common.world_state import world_state_from_msg
from brace_memory.lookahead import Projection


class LookaheadClient:
    """Projects candidate steps through the world's `lookahead` service (`where(agent)`: the (episode, step) of
    the agent's state, None when it has none); `counts` by outcome."""

    def __init__(self, node: Node, timeout_s: float,
                 where: Callable[[str], Optional[tuple[int, int]]]) -> None:
        self.client = node.create_client(Lookahead, names.LOOKAHEAD, callback_group=ReentrantCallbackGroup())
        self.timeout_s = timeout_s
        self.where = where
        self.counts = Counters(("answered", "refused", "late", "no_service", "malformed"))

    def _count(self, outcome: str) -> None:
        self.counts.add(outcome)

    def health(self, prefix: str = "lookahead.") -> Health:
        """The projections asked for, by outcome (values only)."""
        return Health(self.counts.health(prefix).values)

    def __call__(self, agent_id: str, step: Step) -> Optional[Projection]:
        """The world's projection of `step` for the agent, or None (see the module docstring)."""
        at = self.where(agent_id)
        if at is None:
            return None
        if not self.client.service_is_ready():
            self._count("no_service")
            return None
        request = Lookahead.Request(episode=int(at[0]), step=int(at[1]), agent_id=agent_id, action=step.action,
                                    parameters_json=step.parameters_json())
        done = threading.Event()
        future = self.client.call_async(request)
        future.add_done_callback(lambda _: done.set())
        if not done.wait(self.timeout_s):
            self.client.remove_pending_request(future)
            self._count("late")
            return None
        response = future.result()
        if response is None or (not response.valid and not response.state.entities):
            self._count("refused")
            return None
        try:
            state = world_state_from_msg(response.state) if response.state.entities else None
        except ValueError:
            self._count("malformed")
            return None
        self._count("answered")
        return Projection(bool(response.valid), response.reason, state)
