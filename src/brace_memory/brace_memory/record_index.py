"""A planner's in-process view of its store: every agent's records decoded once, written through to the store.

A call reads all of an agent's records (ranking, relevance), so reading them from SQLite and decoding their JSON at
every call would make the retrieve phase grow with the store. The index loads an agent's records on first use and
applies every put itself, with the store's eviction rule (per agent and kind, the least recently updated beyond
`max_records` yields), so it holds exactly what the store holds as long as this process is the store's only writer.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import replace
from typing import Any, Optional, Union

from brace_common.counters import Health

from .records import MemoryRecord, RecordKind, check_agent
from .store import MemoryStore


class RecordIndex:
    """Decoded records per (agent, kind) in update order, in front of `store` (the same read API)."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._loaded: set[str] = set()
        self._records: dict[tuple[str, RecordKind], OrderedDict[str, MemoryRecord]] = {}

    def _load(self, agent_id: str) -> None:
        if agent_id in self._loaded:
            return
        for record in self.store.records(agent_id):
            self._records.setdefault((agent_id, record.kind), OrderedDict())[record.key] = record
        self._loaded.add(agent_id)

    def put(self, record: MemoryRecord) -> None:
        """Write `record` to the store (durable when this returns), then to the index."""
        self.store.put(record)
        with self._lock:
            self._load(record.agent_id)
            held = self._records.setdefault((record.agent_id, record.kind), OrderedDict())
            held.pop(record.key, None)
            held[record.key] = record
            while len(held) > self.store.max_records:
                held.popitem(last=False)

    def replace_fields(self, agent_id: str, kind: Union[RecordKind, str], key: str, fields: dict[str, Any],
                       expected: Optional[dict[str, Any]] = None) -> bool:
        """`MemoryStore.replace_fields` through to the store, then in the index (the record keeps its place in
        update order); whether it replaced."""
        if not self.store.replace_fields(agent_id, kind, key, fields, expected):
            return False
        with self._lock:
            self._load(agent_id)
            held = self._records.get((agent_id, RecordKind(kind)), {})
            if key in held:
                held[key] = replace(held[key], fields=fields)  # an OrderedDict keeps an existing key's place
        return True

    def get(self, agent_id: str, kind: Union[RecordKind, str], key: str) -> Optional[MemoryRecord]:
        """The record of (agent_id, kind, key), or None."""
        with self._lock:
            self._load(check_agent(agent_id))
            return self._records.get((agent_id, RecordKind(kind)), {}).get(key)

    def records(self, agent_id: str, kind: Union[RecordKind, str, None] = None) -> list[MemoryRecord]:
        """The agent's records of `kind` (every kind when None), oldest update first within a kind."""
        with self._lock:
            self._load(check_agent(agent_id))
            kinds = [RecordKind(kind)] if kind is not None else list(RecordKind)
            return [r for k in kinds for r in self._records.get((agent_id, k), {}).values()]

    def clear(self, agent_id: str, kind: Union[RecordKind, str]) -> int:
        """Delete the agent's records of `kind` from the store, then from the index; how many the store deleted."""
        deleted = self.store.clear(check_agent(agent_id), kind)
        with self._lock:
            self._records.pop((agent_id, RecordKind(kind)), None)
        return deleted

    def agents(self) -> list[str]:
        """The agent ids with records in the store or written through the index, sorted."""
        with self._lock:
            written = {agent for agent, _ in self._records}
        return sorted(set(self.store.agents()) | written)

    @property
    def counts(self) -> dict[str, int]:
        """The store's counts (written, evicted, corrupt)."""
        return self.store.counts

    def health(self, prefix: str = "") -> Health:
        """The store's health (its counts after `prefix`)."""
        return self.store.health(prefix)

    def close(self) -> None:
        """Close the store."""
        self.store.close()
