"""OmniAct's reflective memory (OmniAct Sec. 3.4): failure reflections, static priors and notes, retrieved per call.

Every failed step and every preemption writes (or updates) a failure record keyed by skill, object, location and
failure kind: how often it happened, first and last step, and the corrective strategy for that kind of failure.
Static priors (skills, constraints) come from a file; notes are what a plan asked to keep. At a call, records whose
skill or object the call's query names come first (key match); the rest are ranked by Generative Agents' sum of
recency, importance and relevance, each in [0, 1] with equal weights (Park et al., 2023).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Optional

from brace_common.vocabulary import Failure

from .records import MemoryRecord, RecordKind, cached_line, check_agent
from .relevance import bm25, words
from .store import MemoryStore

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
OBJECT_PARAMETERS = ("object", "item", "obj", "box", "target_object")
LOCATION_PARAMETERS = ("target", "location", "place", "to", "dock", "shelf")


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


class ReflectiveMemory:
    """Failure records and notes per agent (in `store`) and static priors shared by every agent."""

    def __init__(self, store: MemoryStore, priors: tuple[Prior, ...] = ()) -> None:
        self.store = store
        self.priors = priors
        self.counts = {"failures": 0, "notes": 0}

    def on_failure(self, agent_id: str, step: int, skill: str, parameters: Optional[dict[str, Any]],
                   kind: str, detail: str, location: str = "", stamp: float = 0.0) -> MemoryRecord:
        """A failed step (or a preemption, `kind` PREEMPTION): write or update its failure record."""
        check_agent(agent_id)
        parameters = parameters or {}
        obj = next((str(parameters[p]) for p in OBJECT_PARAMETERS if p in parameters), "")
        location = location or next((str(parameters[p]) for p in LOCATION_PARAMETERS if p in parameters), "")
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
        text = " ".join(text.split())[:240]
        key = hashlib.sha1(text.encode()).hexdigest()[:16]
        record = MemoryRecord(check_agent(agent_id), RecordKind.NOTE, key, {"text": text}, step, step, stamp,
                              importance)
        self.store.put(record)
        self.counts["notes"] += 1
        return record

    def ranked(self, agent_id: str, query: str, now_step: int) -> list[str]:
        """The agent's priors, failure records and notes as lines, best first: key matches, then by score."""
        query_words = set(words(query))
        lines: list[tuple[int, float, str]] = []  # (0 = key match, 1 = scored, -score, line)
        for prior in self.priors:
            if prior.keys & query_words:
                lines.append((0, -1.0, prior.text))
        records = self.store.records(agent_id, RecordKind.FAILURE) + self.store.records(agent_id, RecordKind.NOTE)
        texts = [failure_line(r) if r.kind == RecordKind.FAILURE else f"note: {r.fields.get('text', '')}"
                 for r in records]
        relevance = bm25(query, texts)
        for record, text, rel in zip(records, texts, relevance, strict=True):
            recency = RECENCY_DECAY ** max(0, now_step - record.last_step)
            score = recency + record.importance + rel
            keyed = record.kind == RecordKind.FAILURE and bool(
                {w for f in ("skill", "object") for w in words(str(record.fields.get(f, "")))} & query_words)
            lines.append((0 if keyed else 1, -score, text))
        lines.sort(key=lambda item: (item[0], item[1]))
        return [text for _, _, text in lines]
