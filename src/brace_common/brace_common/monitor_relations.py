"""The collision monitor's holds as scene-graph relations: `agent stopped_by obstacle` while the monitor's latest
state for the agent is a stop, a restore or a yield. A world node adds them to the world states it publishes, so the
planner's state graph, the trigger monitor's loop view, the bags and the viewer see what the monitor holds back."""

from __future__ import annotations

import threading
from dataclasses import replace

from .validation import InvalidInput
from .vocabulary import Predicate, ZoneAction
from .world_state import Relation, WorldState

HOLDING_ACTIONS = (ZoneAction.STOP, ZoneAction.RESTORE, ZoneAction.YIELD)
"""The monitor's actions that keep an agent from its commanded motion (slowdown and approach only scale it)."""


class MonitorRelations:
    """The latest obstacle each agent is stopped by, from CollisionMonitorState (agent, action, obstacle)."""

    def __init__(self) -> None:
        self.stopped_by: dict[str, str] = {}
        self._lock = threading.Lock()  # states arrive on the executor's threads while a step reads them

    def update(self, agent: str, action: int, obstacle: str) -> None:
        """One monitor state: the agent is stopped by `obstacle` (a stop or restore naming one), else by nothing.
        InvalidInput (reason unknown_action) for an action that is not a ZoneAction."""
        try:
            zone = ZoneAction(action)
        except ValueError:
            raise InvalidInput("unknown_action", f"action: {action} is none of the monitor's actions") from None
        with self._lock:
            if zone in HOLDING_ACTIONS and obstacle:
                self.stopped_by[agent] = obstacle
            else:
                self.stopped_by.pop(agent, None)

    def clear(self) -> None:
        """Forget every hold (a new episode: its agents start free)."""
        with self._lock:
            self.stopped_by.clear()

    def relations(self, ids: set[str]) -> list[Relation]:
        """The held agents' relations whose subject and object are both in `ids` (a state's entity ids: an obstacle
        the world does not report, a keep-out box of the arm's own, is left out)."""
        with self._lock:
            held = sorted(self.stopped_by.items())
        return [Relation(agent, Predicate.STOPPED_BY, obstacle) for agent, obstacle in held
                if agent in ids and obstacle in ids]

    def add_to(self, state: WorldState) -> WorldState:
        """`state` with the monitor's relations among its entities (unchanged when there are none)."""
        extra = self.relations({e.id for e in state.entities})
        return replace(state, relations=(*state.relations, *extra)) if extra else state
