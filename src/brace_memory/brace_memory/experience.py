"""GiG's experience bank M (Sec. 3.3, Eq. 5-6, Alg. 1 lines 10-13 and 17-18): successful trajectories, searched by
state.

An experience E_j = (G_j, [(z_ji, a_ji)]) is one agent's session graph of a successful episode: its goal and, per
state, the state's key, its embedding (when an encoder gave one) and the action the agent executed from it. Each is
a record of kind `experience` in the memory store (it survives the process; the store bounds how many each agent
keeps). A call's state finds its match: the same key (distance 0) or the nearest embedding closer than `tau`
(GiG: 0.1); the match gives the experience's goal and the next `max_actions` actions taken from there.
Search is across every agent's experiences (GiG retrieves by structure alone, without goal filtering).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np

from brace_common.session_graph import Visit, action_text

from .record_index import RecordIndex
from .records import MemoryRecord, RecordKind

TAU = 0.1
"""GiG's retrieval threshold tau (Sec. 4.1): a state matches an experience's state closer than this."""
MAX_ACTIONS = 3
"""Actions of a matched experience a call reads (GiG retrieves the immediate transition; we allow a few)."""
MAX_GOAL_CHARS = 240
"""A goal's length in a record and a memory line."""


@dataclass(frozen=True)
class Trajectory:
    """One agent's successful episode as the bank keeps it: its states in order, its goal and their embeddings."""

    agent_id: str
    episode_id: str
    goal: str
    path: Sequence[Visit]
    zs: Sequence[Sequence[float]] = ()


@dataclass(frozen=True)
class Match:
    """The experience state nearest a call's state: its goal, the actions taken from there, the distance."""

    goal: str
    actions: tuple[str, ...]
    distance: float
    agent_id: str
    key: str                       # the experience's record key

    def line(self) -> str:
        """The match as the planner reads it (GiG's "Past Experience")."""
        return (f"past experience (goal: {self.goal}): from a state like this one, the next actions were: "
                f"{'; '.join(action_text(a) for a in self.actions)}")


def experience_fields(goal: str, path: Sequence[Visit], zs: Sequence[Sequence[float]] = ()) -> dict:
    """A trajectory as a record's fields: the goal, each state's key, embedding (when given) and action."""
    if zs and len(zs) != len(path):
        raise ValueError(f"{len(zs)} embeddings for {len(path)} states")
    return {"goal": goal[:MAX_GOAL_CHARS], "keys": [v.key for v in path], "actions": [v.action for v in path],
            "z": [[round(float(x), 6) for x in z] for z in zs] if zs else []}


def experience_key(agent_id: str, episode_id: str, path: Sequence[Visit]) -> str:
    """A trajectory's record key: its agent, episode and states (a repeated add of it updates the record)."""
    text = json.dumps([agent_id, episode_id, [v.key for v in path]])
    return hashlib.sha1(text.encode()).hexdigest()[:24]


class ExperienceBank:
    """The experience records of a store, indexed for search (exact keys; embeddings in one matrix)."""

    def __init__(self, store: RecordIndex, tau: float = TAU, max_actions: int = MAX_ACTIONS) -> None:
        if not math.isfinite(tau) or tau < 0:
            raise ValueError(f"tau {tau} must be finite and >= 0")
        if max_actions < 1:
            raise ValueError(f"max_actions {max_actions} must be >= 1")
        self.store, self.tau, self.max_actions = store, tau, max_actions
        self._by_key: dict[str, tuple[MemoryRecord, int]] = {}
        self._kept: set[tuple[str, str]] = set()   # (agent_id, record key) of every experience indexed
        self._rows: list[tuple[MemoryRecord, int]] = []
        self._blocks: list[np.ndarray] = []        # embeddings of the records indexed, one block each
        self._matrix: Optional[np.ndarray] = None  # the blocks stacked (rebuilt after an add), and its squared norms
        self._norms: Optional[np.ndarray] = None
        self._loaded = False

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        for agent in self.store.agents():
            for record in self.store.records(agent, RecordKind.EXPERIENCE):
                self._index(record)

    def _index(self, record: MemoryRecord) -> None:
        if (record.agent_id, record.key) in self._kept:
            return  # the same trajectory again (its record was updated, not added)
        self._kept.add((record.agent_id, record.key))
        keys, zs = record.fields.get("keys", []), record.fields.get("z", [])
        for i, key in enumerate(keys):
            self._by_key.setdefault(key, (record, i))
        if zs:
            self._rows += [(record, i) for i in range(len(zs))]
            self._blocks.append(np.asarray(zs, dtype=np.float32))
            self._matrix = self._norms = None

    def __len__(self) -> int:
        """Experiences in the bank."""
        self._load()
        return len(self._kept)

    def add(self, trajectory: Trajectory, step: int = 0, stamp: float = 0.0) -> Optional[MemoryRecord]:
        """Keep one successful trajectory (Alg. 1 line 18), written at `step`; None when it has fewer than two
        states (no action)."""
        self._load()
        t = trajectory
        if len(t.path) < 2:
            return None
        record = MemoryRecord(t.agent_id, RecordKind.EXPERIENCE, experience_key(t.agent_id, t.episode_id, t.path),
                              experience_fields(t.goal, t.path, t.zs), t.path[0].step, step, stamp)
        self.store.put(record)
        self._index(record)
        return record

    def search(self, key: str, z: Sequence[float] = ()) -> Optional[Match]:
        """The experience state matching a call's state (Eq. 6): the same key, else the nearest embedding within
        tau; None when neither, or the matched state is a trajectory's last (nothing was done from it)."""
        self._load()
        hit = self._by_key.get(key)
        distance = 0.0
        if hit is None and z and self._blocks and self.tau > 0:
            if self._matrix is None:
                self._matrix = np.ascontiguousarray(np.concatenate(self._blocks))
                self._norms = np.einsum("ij,ij->i", self._matrix, self._matrix)
            q = np.asarray(z, dtype=np.float32)
            d2 = self._norms - 2.0 * (self._matrix @ q) + float(q @ q)   # |b - q|^2 for every stored state
            best = int(np.argmin(d2))
            d = float(np.sqrt(max(0.0, float(d2[best]))))
            if d < self.tau:
                hit, distance = self._rows[best], d
        if hit is None:
            return None
        record, at = hit
        actions = tuple(a for a in record.fields["actions"][at:at + self.max_actions]
                        if a and a != "(no action)")
        if at >= len(record.fields["keys"]) - 1 or not actions:
            return None
        return Match(record.fields.get("goal", ""), actions, distance, record.agent_id, record.key)
