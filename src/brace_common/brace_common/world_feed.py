"""What a world tells the rest of the stack, before it becomes messages (ROS-free): context entries, agent
reports and which of a step's events are execution outcomes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .vocabulary import Block, EntryKind


@dataclass(frozen=True)
class FeedEntry:
    """One context entry (becomes a ContextEntry message)."""

    agent_id: str
    step: int
    block: Block
    kind: str  # an EntryKind value
    text: str


@dataclass(frozen=True)
class AgentReport:
    """One agent's state after a step (becomes an AgentState message)."""

    agent_id: str
    step: int
    x: float
    y: float
    tracking_error: float
    has_goal: bool
    z: float = 0.0


def outcomes(events: Iterable[Any]) -> list[Any]:
    """The events that are execution outcomes (success or failure of a skill): a world's events with `action`
    and `kind` (an EntryKind)."""
    return [e for e in events if e.action and e.kind in (EntryKind.ACTION_OUTCOME, EntryKind.FAILURE_TRACE)]
