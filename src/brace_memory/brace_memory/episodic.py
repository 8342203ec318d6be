"""OmniAct's episodic memory (OmniAct Sec. 3.4, App. H): event-boundary compression of an agent's history.

An agent's entries accumulate in an open segment. At a semantic boundary (its task done, a failed step, a
preemption, a plan change, a handoff to a teammate) the segment folds into one structured record with OmniAct's
keys (topic, time range, request, actions, outcome, important observations, open questions, evidence) and the
segment starts again. The record renders as one line, so the history the planner reads grows with the number of
distinct events, not of turns: the entries a record folded leave the prompt (`folded_through`). The fold is a
template (deterministic, no model call), written at the boundary; `on_fold` hears each record written, so an LLM
summariser (summary.py, OmniAct App. H) can replace its fields later, within the same limits (TEXT_LIMITS,
LIST_LIMITS).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Optional

from brace_common.counters import Counters, Health

from .records import MemoryRecord, RecordKind, cached_line, check_agent
from .store import MemoryStore

MAX_FIELD_CHARS = 96
"""Each text field of a record line is cut to this."""
MAX_SEGMENT_ENTRIES = 256
"""An open segment holds at most this many entries (the oldest yield); a boundary folds it anyway."""
IMPORTANCE = {"failure": 0.9, "preemption": 0.9, "task done": 0.7, "handoff": 0.6, "plan change": 0.4,
              "segment full": 0.3}
"""Importance of a record by the boundary that closed it (reflective retrieval weighs it)."""
TEXT_LIMITS = {"topic": 48, "request": 2 * MAX_FIELD_CHARS, "outcome": MAX_FIELD_CHARS}
"""A record's text fields and the most characters of each."""
LIST_LIMITS = {"actions": (6, 48), "observations": (2, MAX_FIELD_CHARS), "open_questions": (2, MAX_FIELD_CHARS),
               "evidence": (3, MAX_FIELD_CHARS)}
"""A record's list fields: the most items and the most characters of an item."""
RECORD_KEYS = ("topic", "request", "actions", "outcome", "observations", "open_questions", "evidence")
"""OmniAct's episodic log keys as a record's fields (App. H), in the order a summary lists them; a record also keeps
`boundary`, what closed its segment (task done, failure, preemption, plan change, handoff, segment full)."""
KIND_TASK, KIND_TASK_DONE, KIND_OBSERVATION = "task", "task_done", "observation"
KIND_OUTCOME, KIND_FAILURE, KIND_MESSAGE = "action_outcome", "failure_trace", "message"


def cut(text: str, limit: int = MAX_FIELD_CHARS) -> str:
    """`text` on one line, at most `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


@dataclass
class Segment:
    """An agent's entries since its last boundary."""

    first_step: int = -1
    last_step: int = -1
    actions: list[str] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    entries: list[tuple[int, str, str]] = field(default_factory=list)  # (step, kind, text) in arrival order
    size: int = 0

    def add(self, step: int, kind: str, text: str) -> None:
        """One entry of the agent."""
        if self.first_step < 0:
            self.first_step = step
        self.last_step = max(self.last_step, step)
        self.size += 1
        text = cut(text)
        target = {KIND_OUTCOME: self.actions, KIND_FAILURE: self.failures, KIND_MESSAGE: self.messages}.get(
            kind, self.observations)
        for held, value in ((target, text), (self.entries, (step, kind, text))):
            held.append(value)
            if len(held) > MAX_SEGMENT_ENTRIES:
                del held[0]


@cached_line
def record_line(record: MemoryRecord) -> str:
    """An episodic record as the one line the planner reads."""
    f = record.fields
    parts = []
    for key, label in (("request", "request"), ("actions", "did"), ("outcome", "outcome"),
                       ("observations", "saw"), ("open_questions", "open")):
        value = f.get(key)
        if isinstance(value, list):
            value = "; ".join(str(v) for v in value)
        if value:
            parts.append(f"{label}: {value}")
    return f"[t={record.first_step}-{record.last_step} {f.get('topic', '')}] " + " | ".join(parts)


class EpisodicMemory:
    """Every agent's open segment and its folded records (kept in `store`)."""

    def __init__(self, store: MemoryStore,
                 on_fold: Optional[Callable[[MemoryRecord, Segment], None]] = None) -> None:
        self.store = store
        self.on_fold = on_fold  # hears each record written with the segment it folded (it must not block)
        self.segments: dict[str, Segment] = {}
        self.tasks: dict[str, str] = {}
        self._folded_through: dict[str, int] = {}
        self._next_key: dict[str, int] = {}
        self._episode_from: dict[str, int] = {}  # per agent: the key number of its first record this episode
        self.counts = Counters(("records", "entries_folded"))

    def health(self, prefix: str = "") -> Health:
        """Records written and the entries they folded (each name after `prefix`)."""
        return self.counts.health(prefix)

    def on_entry(self, agent_id: str, step: int, kind: str, text: str, teammates: frozenset[str] = frozenset(),
                 stamp: float = 0.0) -> Optional[MemoryRecord]:
        """One context entry of `agent_id`; the record it closes (task done, failure, handoff), if any."""
        check_agent(agent_id)
        if kind == KIND_TASK:
            self.tasks[agent_id] = cut(text, 2 * MAX_FIELD_CHARS)
            return None
        segment = self.segments.setdefault(agent_id, Segment())
        segment.add(step, kind, text)
        if kind == KIND_TASK_DONE:
            return self.boundary(agent_id, step, "task done", stamp)
        if kind == KIND_FAILURE:
            return self.boundary(agent_id, step, "failure", stamp)
        if kind == KIND_MESSAGE and any(t != agent_id and t in text for t in teammates):
            return self.boundary(agent_id, step, "handoff", stamp)
        if segment.size >= MAX_SEGMENT_ENTRIES:
            return self.boundary(agent_id, step, "segment full", stamp)
        return None

    def boundary(self, agent_id: str, step: int, topic: str, stamp: float = 0.0) -> Optional[MemoryRecord]:
        """Fold the agent's open segment into one record (none when the segment is empty)."""
        segment = self.segments.pop(check_agent(agent_id), None)
        if segment is None or segment.size == 0:
            return None
        outcome = segment.failures[-1] if segment.failures else (segment.actions[-1] if segment.actions else topic)
        observations = segment.observations[:1] + segment.observations[-1:] if len(segment.observations) > 1 \
            else segment.observations
        most_actions, action_chars = LIST_LIMITS["actions"]
        fields = {
            "topic": topic,
            "request": self.tasks.get(agent_id, ""),
            "actions": [cut(a, action_chars) for a in segment.actions[-most_actions:]],
            "outcome": outcome,
            "observations": observations,
            "open_questions": [cut(f"why: {segment.failures[-1]}")] if topic in ("failure", "preemption") and
            segment.failures else [],
            "evidence": segment.failures[-2:] + segment.messages[-1:],
            "boundary": topic,
        }
        record = MemoryRecord(agent_id, RecordKind.EPISODIC, self._key(agent_id), fields, segment.first_step,
                              max(segment.last_step, step), stamp, IMPORTANCE.get(topic, 0.5))
        self.store.put(record)
        self._folded_through[agent_id] = max(self._folded_through.get(agent_id, -1), segment.last_step)
        self.counts["records"] += 1
        self.counts["entries_folded"] += segment.size
        if self.on_fold is not None:
            self.on_fold(record, segment)
        return record

    def _key(self, agent_id: str) -> str:
        if agent_id not in self._next_key:
            numbers = [int(r.key[1:]) for r in self.store.records(agent_id, RecordKind.EPISODIC)
                       if r.key[:1] == "e" and r.key[1:].isdigit()]
            self._next_key[agent_id] = max(numbers, default=0) + 1
        number = self._next_key[agent_id]
        self._next_key[agent_id] = number + 1
        self._episode_from.setdefault(agent_id, number)
        return f"e{number:09d}"

    def folded_through(self, agent_id: str) -> int:
        """The last controller step of the agent's entries folded into a record this run (-1: none)."""
        return self._folded_through.get(agent_id, -1)

    def records(self, agent_id: str) -> list[MemoryRecord]:
        """The agent's records, oldest first (earlier episodes' and runs' included)."""
        return self.store.records(agent_id, RecordKind.EPISODIC)

    def episode_records(self, agent_id: str) -> list[MemoryRecord]:
        """The agent's records folded in the current episode, oldest first: step numbers start again with each
        episode, so an earlier episode's record would read as this one's (`rag_memory` still reaches them)."""
        first = self._episode_from.get(agent_id)
        if first is None:
            return []
        return [r for r in self.records(agent_id) if r.key[1:].isdigit() and int(r.key[1:]) >= first]

    def start_episode(self) -> None:
        """An episode starts: open segments and tasks are dropped (records stay, for `rag_memory`)."""
        self.segments.clear()
        self.tasks.clear()
        self._folded_through.clear()
        self._episode_from.clear()
