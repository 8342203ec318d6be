"""MemoryStore: round trip, upsert, eviction, clear, corrupt rows, bad files, ids, persistence, threads, SIGKILL."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import brace_memory
from brace_memory.records import MemoryRecord, RecordKind
from brace_memory.store import STORE_VERSION, MemoryStore, StoreError

BAD_AGENT = "agent_0/../../x"


def child_env() -> dict[str, str]:
    """The environment of a child Python that imports brace_memory (and brace_common) as this test does."""
    import brace_common

    roots = [str(Path(m.__file__).resolve().parents[1]) for m in (brace_memory, brace_common)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(roots + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def rec(key: str, agent: str = "agent_0", kind: RecordKind | str = RecordKind.NOTE, **kw) -> MemoryRecord:
    return MemoryRecord(agent_id=agent, kind=kind, key=key, **kw)


def keys(records: list[MemoryRecord]) -> list[str]:
    return [r.key for r in records]


def insert_raw(path: Path, **values) -> None:
    """Write one row with sqlite3 directly, as another program could (defaults: a valid row)."""
    row = {"agent_id": "agent_0", "kind": "note", "key": "raw", "fields": "{}", "first_step": 0, "last_step": 0,
           "stamp": 0.0, "importance": 0.5, "count": 1}
    row.update(values)
    with sqlite3.connect(path) as conn:
        conn.execute(f"INSERT INTO records ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                     tuple(row.values()))
    conn.close()


# --- round trip, upsert, order ---------------------------------------------------------------------------------

def test_round_trip_every_attribute(tmp_path):
    record = MemoryRecord(agent_id="agent_0", kind=RecordKind.FAILURE, key="pick|apple|table|grasp_failed",
                          fields={"skill": "pick", "objects": ["apple", None], "ok": False, "n": 3, "x": -1.5,
                                  "nested": {"é": "ü"}},
                          first_step=3, last_step=7, stamp=12.25, importance=0.8, count=2)
    with MemoryStore(tmp_path / "store.db") as store:
        store.put(record)
        assert store.get("agent_0", RecordKind.FAILURE, record.key) == record
        assert store.get("agent_0", "failure", record.key) == record
        assert store.get("agent_0", "note", record.key) is None
        assert store.get("agent_1", "failure", record.key) is None
        assert store.records() == [record]
        assert store.counts == {"written": 1, "evicted": 0, "corrupt": 0}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12)


@settings(max_examples=60, deadline=None)
@given(fields=st.dictionaries(st.text(max_size=8), json_values, max_size=5),
       key=st.text(min_size=1, max_size=40),
       kind=st.sampled_from(list(RecordKind)),
       steps=st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(0, 10**9)),
       stamp=st.floats(allow_nan=False, allow_infinity=False),
       importance=st.floats(0.0, 1.0),
       count=st.integers(0, 10**6))
def test_round_trip_property(fields, key, kind, steps, stamp, importance, count):
    record = MemoryRecord("agent_7", kind, key, fields, steps[0], steps[1], stamp, importance, count)
    with MemoryStore() as store:
        store.put(record)
        got = store.get("agent_7", kind, key)
    assert got == record
    assert got.fields == fields


def test_in_memory_store_for_none_and_empty_path():
    for path in (None, ""):
        with MemoryStore(path) as store:
            assert store.path is None
            store.put(rec("a"))
            assert keys(store.records()) == ["a"]
    with pytest.raises(StoreError):
        MemoryStore(None, create=False)


def test_upsert_replaces_and_becomes_newest():
    with MemoryStore() as store:
        store.put(rec("a", fields={"v": 1}))
        store.put(rec("b"))
        store.put(rec("a", fields={"v": 2}, count=2, last_step=5))
        assert keys(store.records()) == ["b", "a"]
        got = store.get("agent_0", "note", "a")
        assert got.fields == {"v": 2} and got.count == 2 and got.last_step == 5
        assert store.count() == 2
        assert store.counts == {"written": 3, "evicted": 0, "corrupt": 0}


def test_replace_fields_keeps_the_update_order_and_compares_before_it_sets():
    from brace_memory.record_index import RecordIndex

    with MemoryStore(max_records=2) as store:
        index = RecordIndex(store)
        index.put(rec("a", fields={"v": 1}, count=3, last_step=4))
        index.put(rec("b"))
        assert index.replace_fields("agent_0", "note", "a", {"v": 2}, expected={"v": 1})
        assert keys(store.records()) == keys(index.records("agent_0")) == ["a", "b"]  # not moved: a is still oldest
        got = store.get("agent_0", "note", "a")
        assert got.fields == {"v": 2} and (got.count, got.last_step) == (3, 4)
        assert index.get("agent_0", "note", "a").fields == {"v": 2}
        assert not index.replace_fields("agent_0", "note", "a", {"v": 3}, expected={"v": 1})  # rewritten meanwhile
        assert not index.replace_fields("agent_0", "note", "gone", {"v": 3})
        index.put(rec("c"))  # a was least recently updated: it is evicted, the replacement did not refresh it
        assert keys(store.records()) == ["b", "c"]
        assert not index.replace_fields("agent_0", "note", "a", {"v": 3})
        with pytest.raises(ValueError, match="not JSON"):
            store.replace_fields("agent_0", "note", "b", {"v": float("nan")})
        assert store.counts["written"] == 4


def test_records_filter_and_agents():
    with MemoryStore() as store:
        store.put(rec("e1", "agent_1", RecordKind.EPISODIC))
        store.put(rec("n1", "agent_0", RecordKind.NOTE))
        store.put(rec("f1", "agent_1", RecordKind.FAILURE))
        store.put(rec("e2", "agent_0", RecordKind.EPISODIC))
        assert keys(store.records()) == ["e1", "n1", "f1", "e2"]
        assert keys(store.records("agent_1")) == ["e1", "f1"]
        assert keys(store.records(kind="episodic")) == ["e1", "e2"]
        assert keys(store.records("agent_0", RecordKind.EPISODIC)) == ["e2"]
        assert store.records("agent_9") == []
        assert store.agents() == ["agent_0", "agent_1"]
        with pytest.raises(ValueError):
            store.records(kind="dream")


# --- eviction ------------------------------------------------------------------------------------------------

def test_eviction_drops_the_least_recently_updated_per_agent_and_kind():
    with MemoryStore(max_records=3) as store:
        for key in ("a", "b", "c"):
            store.put(rec(key))
        store.put(rec("a", fields={"updated": True}))  # a is now the most recently updated
        store.put(rec("d"))
        assert keys(store.records("agent_0", "note")) == ["c", "a", "d"]  # b was the least recently updated
        assert store.counts["evicted"] == 1
        # other agents and kinds have their own bound
        for key in ("x", "y", "z"):
            store.put(rec(key, "agent_1"))
            store.put(rec(key, "agent_0", RecordKind.FAILURE))
        assert keys(store.records("agent_0", "note")) == ["c", "a", "d"]
        assert keys(store.records("agent_1")) == ["x", "y", "z"]
        assert keys(store.records("agent_0", "failure")) == ["x", "y", "z"]
        assert store.counts == {"written": 11, "evicted": 1, "corrupt": 0}
        store.put(rec("e"))
        store.put(rec("f"))
        assert keys(store.records("agent_0", "note")) == ["d", "e", "f"]
        assert store.counts["evicted"] == 3


def test_a_smaller_bound_on_reopen_applies_at_the_next_put(tmp_path):
    path = tmp_path / "store.db"
    with MemoryStore(path, max_records=5) as store:
        for i in range(5):
            store.put(rec(f"k{i}"))
    with MemoryStore(path, max_records=2) as store:
        store.put(rec("k5"))
        assert keys(store.records()) == ["k4", "k5"]
        assert store.counts["evicted"] == 4


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "10"])
def test_max_records_is_a_positive_int(bad):
    with pytest.raises(ValueError):
        MemoryStore(max_records=bad)


# --- clear ---------------------------------------------------------------------------------------------------

def test_clear_returns_how_many_it_deleted():
    with MemoryStore() as store:
        for agent in ("agent_0", "agent_1"):
            for kind in RecordKind:
                for i in range(2):
                    store.put(rec(f"{kind.value}{i}", agent, kind))
        assert store.count() == 2 * 2 * len(RecordKind)
        assert store.count("agent_0", "note") == 2
        assert store.clear("agent_0", "note") == 2
        assert store.clear("agent_0", "note") == 0
        assert store.clear(kind=RecordKind.FAILURE) == 4
        assert store.clear("agent_1") == 2 * (len(RecordKind) - 1)
        assert store.agents() == ["agent_0"]
        assert store.clear() == 2 * (len(RecordKind) - 2)
        assert store.records() == [] and store.agents() == []


# --- values put refuses ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("changes", [
    {"fields": {"t": (1, 2)}},
    {"fields": {1: "int key"}},
    {"fields": {"s": {1, 2}}},
    {"fields": {"x": float("nan")}},
    {"fields": {"x": float("inf")}},
    {"fields": {"o": object()}},
    {"stamp": float("nan")},
    {"stamp": float("inf")},
    {"count": True},
    {"count": 2.0},
    {"first_step": "3"},
    {"last_step": 2**64},
])
def test_put_refuses_values_that_would_not_read_back(changes):
    base = {"agent_id": "agent_0", "kind": RecordKind.NOTE, "key": "k"}
    record = MemoryRecord(**{**base, **changes})
    with MemoryStore() as store:
        with pytest.raises(ValueError):
            store.put(record)
        assert store.records() == [] and store.counts["written"] == 0


def test_put_takes_a_memory_record():
    with MemoryStore() as store, pytest.raises(TypeError):
        store.put({"agent_id": "agent_0", "kind": "note", "key": "k"})


# --- agent ids -------------------------------------------------------------------------------------------------

def test_path_like_agent_id_is_rejected_everywhere(tmp_path):
    path = tmp_path / "store.db"
    with pytest.raises(ValueError):
        rec("k", BAD_AGENT)
    with MemoryStore(path) as store:
        forged = rec("k")
        object.__setattr__(forged, "agent_id", BAD_AGENT)  # a record that skipped its own check
        with pytest.raises(ValueError):
            store.put(forged)
        for call in (lambda: store.get(BAD_AGENT, "note", "k"), lambda: store.records(BAD_AGENT),
                     lambda: store.clear(BAD_AGENT), lambda: store.count(BAD_AGENT),
                     lambda: store.get("", "note", "k"), lambda: store.records(3)):
            with pytest.raises(ValueError):
                call()
        assert store.records() == []
    assert {p.name for p in tmp_path.rglob("*")} <= {"store.db", "store.db-wal", "store.db-shm"}


# --- corrupt rows ----------------------------------------------------------------------------------------------

BAD_ROWS = [
    {"key": "bad_json", "fields": "{bad"},
    {"key": "empty_fields", "fields": ""},
    {"key": "not_an_object", "fields": "[1, 2]"},
    {"key": "nan_in_fields", "fields": '{"x": NaN}'},
    {"key": "blob_fields", "fields": b"{}"},
    {"key": "bad_kind", "kind": "dream"},
    {"key": "bad_agent", "agent_id": BAD_AGENT},
    {"key": "bad_importance", "importance": 7.0},
    {"key": "text_step", "first_step": "abc"},
    {"key": "text_stamp", "stamp": "soon"},
    {"key": "real_count", "count": 1.5},
    {"key": ""},
    {"key": b"\x00blob"},
]


def test_corrupt_rows_are_skipped_and_counted_once(tmp_path):
    path = tmp_path / "store.db"
    with MemoryStore(path) as store:
        store.put(rec("good_1"))
        for values in BAD_ROWS:
            insert_raw(path, **values)
        store.put(rec("good_2", "agent_1", "episodic"))
        assert keys(store.records()) == ["good_1", "good_2"]
        assert store.counts["corrupt"] == len(BAD_ROWS)
        assert keys(store.records()) == ["good_1", "good_2"]  # reading again counts nothing new
        assert keys(store.records("agent_0", "note")) == ["good_1"]
        assert store.get("agent_0", "note", "bad_importance") is None
        assert store.get("agent_0", "note", "bad_json") is None
        assert store.counts == {"written": 2, "evicted": 0, "corrupt": len(BAD_ROWS)}
        assert store.agents() == ["agent_0", "agent_1"]  # the invalid id is not an agent
        assert store.count() == len(BAD_ROWS) + 2
        store.put(rec("bad_json", fields={"fixed": True}))  # a put replaces a corrupt row
        assert store.get("agent_0", "note", "bad_json").fields == {"fixed": True}
        assert store.clear() == len(BAD_ROWS) + 2
    with MemoryStore(path) as reopened:
        assert reopened.counts["corrupt"] == 0 and reopened.records() == []


def test_corrupt_rows_yield_first_to_eviction(tmp_path):
    path = tmp_path / "store.db"
    with MemoryStore(path, max_records=2) as store:
        insert_raw(path, key="bad", fields="{bad")
        store.put(rec("a"))
        store.put(rec("b"))
        assert store.counts["evicted"] == 1
        assert keys(store.records()) == ["a", "b"] and store.count() == 2
        assert store.counts["corrupt"] == 0


# --- files -----------------------------------------------------------------------------------------------------

def test_creates_parent_folders_and_uses_wal(tmp_path):
    path = tmp_path / "a" / "b" / "memory.db"
    with MemoryStore(str(path)) as store:
        store.put(rec("k"))
        assert store.path == path
        with sqlite3.connect(path) as other:
            assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert other.execute("PRAGMA user_version").fetchone()[0] == STORE_VERSION
        other.close()


def test_persistence_across_reopen(tmp_path):
    path = tmp_path / "store.db"
    with MemoryStore(path) as store:
        for key in ("a", "b", "c"):
            store.put(rec(key, fields={"key": key}, last_step=len(key)))
        before = store.records()
    with MemoryStore(path) as store:
        assert store.records() == before
        assert store.counts == {"written": 0, "evicted": 0, "corrupt": 0}
        store.put(rec("a", fields={"key": "a2"}))
        store.put(rec("d"))
    with MemoryStore(path, create=False) as store:
        assert keys(store.records()) == ["b", "c", "a", "d"]
        assert store.get("agent_0", "note", "a").fields == {"key": "a2"}


def test_text_file_is_not_a_store(tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("not a database\n" * 200)
    before = path.read_bytes()
    with pytest.raises(StoreError, match="notes.db") as info:
        MemoryStore(path)
    assert isinstance(info.value, ValueError)
    assert path.read_bytes() == before


def test_other_sqlite_database_is_not_a_store(tmp_path):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE foo (x)")
    conn.close()
    with pytest.raises(StoreError, match="other.db.*not a memory store"):
        MemoryStore(path)


def test_another_schema_version_is_refused(tmp_path):
    path = tmp_path / "store.db"
    MemoryStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(StoreError, match=r"store\.db.*version 99"):
        MemoryStore(path)


def test_folder_and_missing_file(tmp_path):
    with pytest.raises(StoreError, match=str(tmp_path)):
        MemoryStore(tmp_path)
    missing = tmp_path / "missing.db"
    with pytest.raises(StoreError, match="missing.db"):
        MemoryStore(missing, create=False)
    assert not missing.exists()
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(StoreError, match="empty.db"):
        MemoryStore(empty, create=False)
    assert empty.stat().st_size == 0
    with MemoryStore(empty) as store:  # an empty file becomes a store when creating is allowed
        store.put(rec("k"))


def test_closed_store_raises(tmp_path):
    store = MemoryStore(tmp_path / "store.db")
    store.close()
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.put(rec("k"))
    with pytest.raises(StoreError, match="closed"):
        store.records()


# --- threads ---------------------------------------------------------------------------------------------------

def run_threads(target, n: int) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def wrapped(i: int) -> None:
        try:
            barrier.wait()
            target(i)
        except BaseException as exc:  # noqa: B036 - reported to the test below
            errors.append(exc)

    threads = [threading.Thread(target=wrapped, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_concurrent_puts_from_threads(tmp_path):
    per_thread, n = 40, 8
    with MemoryStore(tmp_path / "store.db") as store:
        def work(i: int) -> None:
            for j in range(per_thread):
                store.put(rec(f"k{j}", f"agent_{i}", fields={"i": i, "j": j}))
                if j % 10 == 0:
                    store.records(f"agent_{i}")
                    store.counts  # noqa: B018

        run_threads(work, n)
        assert store.counts == {"written": n * per_thread, "evicted": 0, "corrupt": 0}
        assert store.agents() == [f"agent_{i}" for i in range(n)]
        for i in range(n):
            assert keys(store.records(f"agent_{i}")) == [f"k{j}" for j in range(per_thread)]


def test_concurrent_puts_respect_the_bound(tmp_path):
    per_thread, n, bound = 30, 4, 16
    with MemoryStore(tmp_path / "store.db", max_records=bound) as store:
        run_threads(lambda i: [store.put(rec(f"t{i}_{j}")) for j in range(per_thread)], n)
        assert store.count() == bound and len(store.records()) == bound
        assert store.counts == {"written": n * per_thread, "evicted": n * per_thread - bound, "corrupt": 0}
        # each thread's own puts are in order, so what remains of a thread is its latest puts
        for i in range(n):
            mine = [int(k.split("_")[1]) for k in keys(store.records()) if k.startswith(f"t{i}_")]
            assert mine == list(range(per_thread - len(mine), per_thread))


# --- SIGKILL ---------------------------------------------------------------------------------------------------

WRITER = """
import sys
from brace_memory.records import MemoryRecord
from brace_memory.store import MemoryStore
store = MemoryStore(sys.argv[1], max_records=10**6)
for i in range(10**6):
    key = f"k{i:07d}"
    store.put(MemoryRecord("agent_0", "episodic", key, {"i": i, "pad": "x" * 256}, first_step=i, last_step=i))
    print(key, flush=True)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sigkill_loses_at_most_the_record_being_written(tmp_path):
    path = tmp_path / "store.db"
    wanted = 40
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=child_env())
    printed: list[str] = []
    try:
        while len(printed) < wanted:
            line = proc.stdout.readline()
            if not line:
                proc.wait()
                pytest.fail(f"the writer ended early (rc {proc.returncode}): {proc.stderr.read()}")
            printed.append(line.rstrip("\n"))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        rest = proc.stdout.read()  # not communicate(): it would skip what readline has buffered already
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    printed += [line.rstrip("\n") for line in rest.splitlines(keepends=True) if line.endswith("\n")]

    with MemoryStore(path, max_records=10**6) as store:
        stored = store.records()
        assert store.counts["corrupt"] == 0
        for key in printed:
            got = store.get("agent_0", "episodic", key)
            assert got is not None, key
            assert got.fields == {"i": int(key[1:]), "pad": "x" * 256}
    stored_keys = keys(stored)
    assert stored_keys[:len(printed)] == printed
    assert len(stored_keys) <= len(printed) + 1  # at most the record committed but not yet printed
    if len(stored_keys) > len(printed):
        assert stored_keys[-1] == f"k{len(printed):07d}"
