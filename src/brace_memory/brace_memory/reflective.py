"""OmniAct's reflective memory (OmniAct Sec. 3.4): failure reflections, constraints, static priors and notes,
retrieved per call.

Failures and preemptions update records keyed by skill, object, location and kind; constraint entries consolidate
into the team's constraint records; a call reads key matches first, then the rest by recency, importance and
relevance (docs/memory.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Optional

from brace_common.action_schema import LOCATION_PARAMETERS, OBJECT_PARAMETERS, named_parameter
from brace_common.counters import Counters, Health
from brace_common.vocabulary import Failure

from .records import MemoryRecord, RecordKind, cached_line, check_agent
from .relevance import bm25, words
from .store import MemoryStore

MAX_NOTE_CHARS = 240
"""A note's length (a plan's memory write); longer texts are cut."""

RECENCY_DECAY = 0.99
"""Recency of a record = RECENCY_DECAY ** (controller steps since its last update)."""
PREEMPTION = "preemption"
"""The failure kind of a step the visual verifier preempted."""
CORRECTIVE_STRATEGY = {
    Failure.GRASP.label: "approach again and re-grasp centred on the object; after two misses pick another grasp "
                         "or object",
    Failure.DROP_SLIP.label: "re-grasp more firmly and move slower while carrying; check the object is held",
    Failure.TIMEOUT.label: "split the step into shorter ones or choose a nearer target",
    Failure.CONTACT_LOSS.label: "re-approach the object and push from its centre with shorter pushes",
    Failure.EXECUTOR.label: "check the precondition of the skill (position, what is held) before calling it again",
    Failure.COLLISION.label: "wait for the way to clear or take another route",
    PREEMPTION: "the verifier saw the step going wrong: re-observe, then redo the step from the current state",
}
"""A corrective strategy per failure kind (OmniAct: the reflection's 'corrective strategy')."""
CONSTRAINT_IMPORTANCE = 0.9
"""Importance of a constraint record (a rule the agents must keep; a note's default is 0.8)."""
MAX_CONSTRAINT_CHARS = 400
"""A constraint record keeps at most this many characters of its text (a three-ingredient recipe is ~300)."""


@dataclass(frozen=True)
class Prior:
    """A static prior (a skill's use, a constraint): its text and the words that retrieve it by key."""

    text: str
    keys: frozenset[str]


def failure_kind(failure: int) -> str:
    """The failure kind's name (Failure label; unknown values count as executor failures)."""
    try:
        return Failure(failure).label
    except ValueError:
        return Failure.EXECUTOR.label


@cached_line
def failure_line(record: MemoryRecord) -> str:
    """A failure record as the line the planner reads."""
    f = record.fields
    where = f" at {f['location']}" if f.get("location") else ""
    times = f" x{record.count}" if record.count > 1 else ""
    return (f"failure{times} (t={record.first_step}..{record.last_step}): {f.get('step', f.get('skill', ''))}{where} "
            f"- {f.get('failure_kind', '')}: {f.get('detail', '')}. Strategy: {f.get('strategy', '')}")


def constraint_text(text: str) -> str:
    """A constraint's text as its record keeps it: on one line, at most MAX_CONSTRAINT_CHARS characters (the same
    rule always gives the same record)."""
    return " ".join(text.split())[:MAX_CONSTRAINT_CHARS]


def constraint_keys(text: str) -> frozenset[str]:
    """The words that retrieve a constraint by key: the ids it names (words with a letter and a digit: `dock_2`,
    `box_7`, `agent_1`; a bare number such as a step is no key)."""
    return frozenset(w for w in words(text) if any(c.isdigit() for c in w) and any(c.isalpha() for c in w))


@cached_line
def constraint_line(record: MemoryRecord) -> str:
    """A constraint record as the line the planner reads."""
    f = record.fields
    times = f" x{record.count}" if record.count > 1 else ""
    return f"constraint{times} (t={record.first_step}, from {f.get('source', record.agent_id)}): {f.get('text', '')}"


class ReflectiveMemory:
    """Failure records and notes per agent, constraint records per agent that gave them (in `store`; every agent
    reads them), and static priors shared by every agent."""

    def __init__(self, store: MemoryStore, priors: tuple[Prior, ...] = ()) -> None:
        self.store = store
        self.priors = priors
        self.counts = Counters(("failures", "notes", "constraints"))
        # Who gave the constraints in the store (a store kept across runs already holds some).
        self.constraint_sources = {a for a in store.agents() if store.records(a, RecordKind.CONSTRAINT)}

    def health(self, prefix: str = "") -> Health:
        """Failure records, notes and constraints written (each name after `prefix`)."""
        return self.counts.health(prefix)

    def on_failure(self, agent_id: str, step: int, skill: str, parameters: Optional[dict[str, Any]],
                   kind: str, detail: str, location: str = "", stamp: float = 0.0) -> MemoryRecord:
        """A failed step (or a preemption, `kind` PREEMPTION): write or update its failure record."""
        check_agent(agent_id)
        parameters = parameters or {}
        obj = named_parameter(parameters, OBJECT_PARAMETERS)
        location = location or named_parameter(parameters, LOCATION_PARAMETERS)
        key = "|".join((skill, obj, location, kind))[:256]
        old = self.store.get(agent_id, RecordKind.FAILURE, key)
        call = f"{skill}({', '.join(f'{k}={v}' for k, v in parameters.items())})"
        fields = {"agent": agent_id, "skill": skill, "object": obj, "location": location, "failure_kind": kind,
                  "detail": " ".join(detail.split())[:160], "step": call[:120],
                  "strategy": CORRECTIVE_STRATEGY.get(kind, CORRECTIVE_STRATEGY[Failure.EXECUTOR.label])}
        count = old.count + 1 if old else 1
        record = MemoryRecord(agent_id, RecordKind.FAILURE, key, fields, old.first_step if old else step, step,
                              stamp, min(1.0, 0.6 + 0.1 * count), count)
        self.store.put(record)
        self.counts["failures"] += 1
        return record

    def note(self, agent_id: str, step: int, text: str, importance: float = 0.8, stamp: float = 0.0) -> MemoryRecord:
        """Keep `text` for the agent (a plan's explicit memory write)."""
        text = " ".join(text.split())[:MAX_NOTE_CHARS]
        key = hashlib.sha1(text.encode()).hexdigest()[:16]
        record = MemoryRecord(check_agent(agent_id), RecordKind.NOTE, key, {"text": text}, step, step, stamp,
                              importance)
        self.store.put(record)
        self.counts["notes"] += 1
        return record

    def on_constraint(self, agent_id: str, step: int, text: str, stamp: float = 0.0) -> Optional[MemoryRecord]:
        """A constraint `agent_id` gave (a context entry of kind `constraint`): write its record, or update the
        record of the same text (count, last step); None for an empty text."""
        text = constraint_text(text)
        if not text:
            return None
        key = hashlib.sha1(text.encode()).hexdigest()[:16]
        old = self.store.get(check_agent(agent_id), RecordKind.CONSTRAINT, key)
        record = MemoryRecord(agent_id, RecordKind.CONSTRAINT, key, {"text": text, "source": agent_id},
                              old.first_step if old else step, max(step, old.last_step) if old else step, stamp,
                              CONSTRAINT_IMPORTANCE, old.count + 1 if old else 1)
        self.store.put(record)
        self.constraint_sources.add(agent_id)
        self.counts["constraints"] += 1
        return record

    def constraints(self) -> list[MemoryRecord]:
        """Every constraint record (the team's), by who gave it, oldest update first within each."""
        return [r for source in sorted(self.constraint_sources)
                for r in self.store.records(source, RecordKind.CONSTRAINT)]

    def ranked(self, agent_id: str, query: str, now_step: int, in_prompt: Collection[str] = ()) -> list[str]:
        """The agent's priors, failure records and notes and the team's constraints as lines, best first: key
        matches, then by score. A constraint whose text is in `in_prompt` (the call's prompt holds it) is left out."""
        query_words = set(words(query))
        lines: list[tuple[int, float, str]] = []  # (0 = key match, 1 = scored, -score, line)
        for prior in self.priors:
            if prior.keys & query_words:
                lines.append((0, -1.0, prior.text))
        shown = {constraint_text(t) for t in in_prompt}
        constraints = []
        for record in self.constraints():
            text = record.fields.get("text", "")
            if text not in shown:  # also the same rule given by two sources: once
                shown.add(text)
                constraints.append(record)
        records = self.store.records(agent_id, RecordKind.FAILURE) + self.store.records(agent_id, RecordKind.NOTE) \
            + constraints
        texts = [self.line(r) for r in records]
        relevance = bm25(query, texts)
        for record, text, rel in zip(records, texts, relevance, strict=True):
            recency = RECENCY_DECAY ** max(0, now_step - record.last_step)
            score = recency + record.importance + rel
            if record.kind == RecordKind.FAILURE:
                keys = {w for f in ("skill", "object") for w in words(str(record.fields.get(f, "")))}
            elif record.kind == RecordKind.CONSTRAINT:
                keys = constraint_keys(record.fields.get("text", ""))
            else:
                keys = set()
            lines.append((0 if keys & query_words else 1, -score, text))
        lines.sort(key=lambda item: (item[0], item[1]))
        return [text for _, _, text in lines]

    @staticmethod
    def line(record: MemoryRecord) -> str:
        """A failure, note or constraint record as the line the planner reads."""
        if record.kind == RecordKind.FAILURE:
            return failure_line(record)
        if record.kind == RecordKind.CONSTRAINT:
            return constraint_line(record)
        return f"note: {record.fields.get('text', '')}"
