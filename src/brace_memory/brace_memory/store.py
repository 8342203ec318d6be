"""The persistent per-agent memory store: one SQLite file holding every agent's MemoryRecords (bounded, durable).

File format (schema version STORE_VERSION, kept in `PRAGMA user_version`): one table `records`, one row per
(agent_id, kind, key); `seq` is the update order (every put takes the next value), `fields` is a JSON object.
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
from pathlib import Path
from typing import Any, Optional, Union

from brace_common.counters import Health
from brace_memory.records import MemoryRecord, RecordKind, check_agent

STORE_VERSION = 1
"""The schema version this module reads and writes (`PRAGMA user_version` of the file)."""

DEFAULT_MAX_RECORDS = 1000
"""How many records one (agent_id, kind) keeps by default."""

BUSY_TIMEOUT_S = 30.0
"""How long a call waits for another process's write to the same file."""

_SCHEMA = """
CREATE TABLE records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    fields TEXT NOT NULL,
    first_step INTEGER NOT NULL,
    last_step INTEGER NOT NULL,
    stamp REAL NOT NULL,
    importance REAL NOT NULL,
    count INTEGER NOT NULL,
    UNIQUE (agent_id, kind, key)
);
CREATE INDEX records_by_update ON records (agent_id, kind, seq);
"""

_COLUMNS = "seq, agent_id, kind, key, fields, first_step, last_step, stamp, importance, count"
_INT64 = (-(2**63), 2**63 - 1)

PathLike = Union[str, Path]


class StoreError(ValueError):
    """A store file that cannot be used: not a SQLite database, another schema version, missing, or closed."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _check_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not _INT64[0] <= value <= _INT64[1]:
        raise ValueError(f"{name} {value!r} is not a 64-bit integer")


def _check_real(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} {value!r} is not a finite number")


def _encode_fields(fields: Any) -> str:
    """`fields` as compact JSON text; ValueError unless it is a dict of JSON values that reads back equal."""
    if not isinstance(fields, dict):
        raise ValueError(f"fields must be a dict, not {type(fields).__name__}")
    try:
        text = json.dumps(fields, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"fields hold a value that is not JSON: {exc}") from None
    if json.loads(text) != fields:  # int keys, tuples ... would not read back as written
        raise ValueError("fields hold values that do not read back as written (only str keys, lists, JSON values)")
    return text


def _check_record(record: MemoryRecord) -> str:
    """The record's fields as JSON text when every value can be stored and read back; ValueError otherwise."""
    check_agent(record.agent_id)
    if not isinstance(record.key, str):
        raise ValueError(f"record key {record.key!r} is not a string")
    for name in ("first_step", "last_step", "count"):
        _check_int(name, getattr(record, name))
    for name in ("stamp", "importance"):
        _check_real(name, getattr(record, name))
    return _encode_fields(record.fields)


def _decode(row: tuple) -> MemoryRecord:
    """The record a row holds; ValueError or TypeError when any value is missing or invalid."""
    _, agent_id, kind, key, fields_text, first_step, last_step, stamp, importance, count = row
    if not isinstance(fields_text, str):
        raise ValueError("fields is not JSON text")
    fields = json.loads(fields_text, parse_constant=_reject_constant)
    record = MemoryRecord(agent_id=agent_id, kind=kind, key=key, fields=fields, first_step=first_step,
                          last_step=last_step, stamp=stamp, importance=importance, count=count)
    _check_record(record)
    return record


def _rollback(conn: sqlite3.Connection) -> None:
    try:
        conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass  # no transaction left to roll back (the failure ended it)


def _kind(kind: Union[RecordKind, str, None]) -> Optional[RecordKind]:
    return None if kind is None else RecordKind(kind)


class MemoryStore:
    """Every agent's memory records in one SQLite file (or in memory when `path` is None or "").

    Eviction rule: after each put, at most `max_records` records remain per (agent_id, kind); the least recently
    updated ones (inserted or replaced longest ago) are deleted first.
    Durability: each put is one transaction, committed with `synchronous=FULL` in WAL mode before put returns, so a
    killed process loses at most the record it was writing.
    A row that does not decode (written by another program, or damaged) is skipped and counted, never raised.
    Agent ids are a column, never a path. Safe to call from several threads.
    With `create=False` a path that holds no store (missing, empty) raises StoreError instead of becoming one.
    """

    def __init__(self, path: Optional[PathLike] = None, max_records: int = DEFAULT_MAX_RECORDS, *,
                 create: bool = True) -> None:
        _check_int("max_records", max_records)
        if max_records < 1:
            raise ValueError(f"max_records {max_records} must be at least 1")
        self.max_records = max_records
        self.path: Optional[Path] = Path(path).expanduser() if path not in (None, "") else None
        self._lock = threading.Lock()
        self._written = 0
        self._evicted = 0
        self._corrupt_rows: set[tuple] = set()
        self._conn: Optional[sqlite3.Connection] = self._open(create)

    def _where(self) -> str:
        return str(self.path) if self.path is not None else ":memory:"

    def _open(self, create: bool) -> sqlite3.Connection:
        where = self._where()
        if self.path is None:
            if not create:
                raise StoreError("no store path: an in-memory store is always new (create=False needs a file)")
            target, uri = ":memory:", False
        elif self.path.is_dir():
            raise StoreError(f"{where}: is a folder, not a memory store file")
        elif create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            target, uri = str(self.path), False
        else:
            if not self.path.is_file():
                raise StoreError(f"{where}: no memory store there")
            target, uri = self.path.resolve().as_uri() + "?mode=rw", True
        try:
            conn = sqlite3.connect(target, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False,
                                   uri=uri)
        except sqlite3.Error as exc:
            raise StoreError(f"{where}: cannot open the memory store ({exc})") from None
        try:
            self._prepare(conn, create)
        except BaseException:
            conn.close()
            raise
        return conn

    def _prepare(self, conn: sqlite3.Connection, create: bool) -> None:
        where = self._where()
        try:
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("BEGIN IMMEDIATE")  # a second process creating the same store waits here
            try:
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                if version == 0 and not tables:
                    if not create:
                        raise StoreError(f"{where}: holds no memory store (an empty SQLite database)")
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            conn.execute(statement)
                    conn.execute(f"PRAGMA user_version = {STORE_VERSION}")
                elif version == 0:
                    raise StoreError(f"{where}: is a SQLite database but not a memory store (tables: "
                                     f"{', '.join(sorted(tables))})")
                elif version != STORE_VERSION:
                    raise StoreError(f"{where}: memory store schema version {version}; this version of brace_memory "
                                     f"reads version {STORE_VERSION}")
                elif "records" not in tables:
                    raise StoreError(f"{where}: memory store version {version} without its records table")
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
            if self.path is not None:
                conn.execute("PRAGMA journal_mode=WAL")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{where}: not a memory store ({exc})") from None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"{self._where()}: the memory store is closed")
        return self._conn

    def _decoded(self, rows: list[tuple]) -> list[MemoryRecord]:
        """The rows that decode, counting each distinct row that does not once."""
        out = []
        for row in rows:
            try:
                out.append(_decode(row))
            except (ValueError, TypeError):
                self._corrupt_rows.add(row)
        return out

    def put(self, record: MemoryRecord) -> None:
        """Insert `record`, or replace the one with its (agent_id, kind, key); then evict beyond `max_records`.

        Eviction rule: the (agent_id, kind) of `record` keeps its `max_records` most recently updated records; the
        least recently updated yield. Durable when put returns (one transaction). ValueError for values that cannot
        be stored and read back (fields that are not JSON, non-finite numbers).
        """
        if not isinstance(record, MemoryRecord):
            raise TypeError(f"put takes a MemoryRecord, not {type(record).__name__}")
        fields_text = _check_record(record)
        kind = record.kind.value
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute("INSERT OR REPLACE INTO records (agent_id, kind, key, fields, first_step, last_step, "
                             "stamp, importance, count) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             (record.agent_id, kind, record.key, fields_text, record.first_step, record.last_step,
                              float(record.stamp), float(record.importance), record.count))
                evicted = conn.execute(
                    "DELETE FROM records WHERE agent_id = ? AND kind = ? AND seq NOT IN (SELECT seq FROM records "
                    "WHERE agent_id = ? AND kind = ? ORDER BY seq DESC LIMIT ?)",
                    (record.agent_id, kind, record.agent_id, kind, self.max_records)).rowcount
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
            self._written += 1
            self._evicted += max(evicted, 0)

    def replace_fields(self, agent_id: str, kind: Union[RecordKind, str], key: str, fields: dict[str, Any],
                       expected: Optional[dict[str, Any]] = None) -> bool:
        """Replace the `fields` of the record (agent_id, kind, key) in place; whether it did.

        Nothing else of the record changes, its update order (`seq`) included, so neither the order `records`
        returns nor eviction sees a replacement. With `expected`, only a record whose fields still equal it is
        replaced (compare and set, in one transaction): a record that was evicted, cleared or rewritten meanwhile is
        left as it is. Durable when this returns. ValueError for fields that cannot be stored and read back.
        """
        check_agent(agent_id)
        kind_value = RecordKind(kind).value
        if not isinstance(key, str):
            raise ValueError(f"record key {key!r} is not a string")
        fields_text = _encode_fields(fields)
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute("SELECT seq, fields FROM records WHERE agent_id = ? AND kind = ? AND key = ?",
                                   (agent_id, kind_value, key)).fetchone()
                held = None
                if row is not None and expected is not None:
                    try:
                        held = json.loads(row[1], parse_constant=_reject_constant)
                    except (TypeError, ValueError):
                        held = None  # a corrupt row is never what was expected
                if row is None or (expected is not None and held != expected):
                    conn.execute("COMMIT")
                    return False
                conn.execute("UPDATE records SET fields = ? WHERE seq = ?", (fields_text, row[0]))
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
            self._written += 1
            return True

    def get(self, agent_id: str, kind: Union[RecordKind, str], key: str) -> Optional[MemoryRecord]:
        """The record of (agent_id, kind, key); None when there is none or its row does not decode."""
        check_agent(agent_id)
        kind_value = RecordKind(kind).value
        if not isinstance(key, str):
            raise ValueError(f"record key {key!r} is not a string")
        with self._lock:
            rows = self._connection().execute(f"SELECT {_COLUMNS} FROM records WHERE agent_id = ? AND kind = ? AND "
                                              "key = ?", (agent_id, kind_value, key)).fetchall()
            records = self._decoded(rows)
        return records[0] if records else None

    def records(self, agent_id: Optional[str] = None,
                kind: Union[RecordKind, str, None] = None) -> list[MemoryRecord]:
        """The records of `agent_id` (all agents when None) of `kind` (all kinds when None), oldest update first."""
        where, args = self._filter(agent_id, kind)
        with self._lock:
            rows = self._connection().execute(f"SELECT {_COLUMNS} FROM records{where} ORDER BY seq", args).fetchall()
            return self._decoded(rows)

    def count(self, agent_id: Optional[str] = None, kind: Union[RecordKind, str, None] = None) -> int:
        """How many rows match (what `clear` with the same arguments would delete), decodable or not."""
        where, args = self._filter(agent_id, kind)
        with self._lock:
            return self._connection().execute(f"SELECT COUNT(*) FROM records{where}", args).fetchone()[0]

    def agents(self) -> list[str]:
        """The agent ids that have records, sorted (ids that are not valid agent ids are left out)."""
        with self._lock:
            rows = self._connection().execute("SELECT DISTINCT agent_id FROM records ORDER BY agent_id").fetchall()
        out = []
        for (agent_id,) in rows:
            try:
                out.append(check_agent(agent_id))
            except ValueError:
                pass
        return out

    def clear(self, agent_id: Optional[str] = None, kind: Union[RecordKind, str, None] = None) -> int:
        """Delete the records of `agent_id` (all agents when None) of `kind` (all kinds when None); how many."""
        where, args = self._filter(agent_id, kind)
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                deleted = conn.execute(f"DELETE FROM records{where}", args).rowcount
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
            return deleted

    @staticmethod
    def _filter(agent_id: Optional[str], kind: Union[RecordKind, str, None]) -> tuple[str, tuple]:
        clauses, args = [], []
        if agent_id is not None:
            clauses.append("agent_id = ?")
            args.append(check_agent(agent_id))
        kind_enum = _kind(kind)
        if kind_enum is not None:
            clauses.append("kind = ?")
            args.append(kind_enum.value)
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), tuple(args)

    @property
    def counts(self) -> dict[str, int]:
        """Since this store was opened: records `written` (puts and in-place field replacements), `evicted`, and
        `corrupt` rows skipped (each distinct row once)."""
        with self._lock:
            return {"written": self._written, "evicted": self._evicted, "corrupt": len(self._corrupt_rows)}

    def health(self, prefix: str = "") -> Health:
        """`counts` as values (each name after `prefix`)."""
        return Health({prefix + k: v for k, v in self.counts.items()})

    def close(self) -> None:
        """Close the file (further calls raise StoreError); closing twice is harmless."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MemoryStore({self._where()!r}, max_records={self.max_records})"
