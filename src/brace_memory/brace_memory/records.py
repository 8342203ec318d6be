"""The unit every memory module keeps and the store persists: one MemoryRecord per (agent, kind, key)."""

from __future__ import annotations

import enum
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from brace_common.validation import AGENT_ID_PATTERN, MAX_AGENT_ID_CHARS


class RecordKind(str, enum.Enum):
    """What a record is (OmniAct Sec. 3.4): an episodic record folded at a boundary, a failure reflection, a
    note a plan asked to keep (`store_memory`), or a constraint the graph gave (a context entry of kind
    `constraint`), kept as a long-term rule; or (GiG Sec. 3.3) an experience: a successful episode's trajectory; or
    (ReCAP Alg. 1) an agent's frame stack, the recursion's state, which no call retrieves as a line."""

    EPISODIC = "episodic"
    FAILURE = "failure"
    NOTE = "note"
    CONSTRAINT = "constraint"
    EXPERIENCE = "experience"
    FRAME = "frame"


MAX_KEY_CHARS = 256
"""A record key's length."""


@dataclass(frozen=True)
class MemoryRecord:
    """One record of an agent's memory.

    `key` is unique per (agent_id, kind): an episodic record's sequence number, a failure's
    skill|object|location|failure kind (a repeat updates the record: count, last step), a note's or a
    constraint's text hash (a repeated constraint updates its record the same way).
    `fields` holds the record's structured content (JSON values only); `importance` is in [0, 1].
    """

    agent_id: str
    kind: RecordKind
    key: str
    fields: dict[str, Any] = field(default_factory=dict)
    first_step: int = 0
    last_step: int = 0
    stamp: float = 0.0
    importance: float = 0.5
    count: int = 1

    def __post_init__(self) -> None:
        check_agent(self.agent_id)
        object.__setattr__(self, "kind", RecordKind(self.kind))
        if not self.key or len(self.key) > MAX_KEY_CHARS:
            raise ValueError(f"record key must have 1..{MAX_KEY_CHARS} characters")
        if not 0.0 <= self.importance <= 1.0:
            raise ValueError(f"importance {self.importance} is outside [0, 1]")


def check_agent(agent_id: str) -> str:
    """`agent_id` when it is an agent id (a ROS name token: never a path); ValueError otherwise."""
    if not isinstance(agent_id, str) or len(agent_id) > MAX_AGENT_ID_CHARS or not AGENT_ID_PATTERN.fullmatch(agent_id):
        raise ValueError(f"'{str(agent_id)[:80]}' is not an agent id (a letter, then letters, digits and '_')")
    return agent_id


def cached_line(render: Callable[[MemoryRecord], str]) -> Callable[[MemoryRecord], str]:
    """`render` remembered per record object while it lives (records are immutable; a call renders every one)."""
    lines: dict[int, tuple[weakref.ref, str]] = {}

    def cached(record: MemoryRecord) -> str:
        held = lines.get(id(record))
        if held is not None and held[0]() is record:
            return held[1]
        line = render(record)
        key = id(record)
        lines[key] = (weakref.ref(record, lambda _, key=key: lines.pop(key, None)), line)
        return line

    cached.__doc__ = render.__doc__
    return cached
