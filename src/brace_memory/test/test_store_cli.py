"""brace-memory list / show / clear: output, filters, confirmation, exit codes, and one run as a real process."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import brace_memory
from brace_memory.records import MemoryRecord, RecordKind
from brace_memory.store import MemoryStore
from brace_memory.store_cli import main


def child_env() -> dict[str, str]:
    """The environment of a child Python that imports brace_memory (and brace_common) as this test does."""
    import brace_common

    roots = [str(Path(m.__file__).resolve().parents[1]) for m in (brace_memory, brace_common)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(roots + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


class Terminal(io.StringIO):
    """A stdin that says it is a terminal and answers with its text."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def store_path(tmp_path) -> Path:
    """A store with agent_0 (episodic, failure, note), agent_1 (note) and one corrupt row."""
    path = tmp_path / "memory.db"
    with MemoryStore(path) as store:
        store.put(MemoryRecord("agent_0", RecordKind.EPISODIC, "1", {"summary": "picked apple"}, 0, 4, 1.0, 0.5, 1))
        store.put(MemoryRecord("agent_0", RecordKind.FAILURE, "pick|apple|table|grasp", {"skill": "pick"}, 3, 7,
                               2.0, 0.8, 2))
        store.put(MemoryRecord("agent_1", RecordKind.NOTE, "n1", {"text": "door is locked"}, 5, 5, 3.0, 0.25, 1))
        store.put(MemoryRecord("agent_0", RecordKind.NOTE, "n2", {}, 6, 6, 4.0, 1.0, 1))
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO records (agent_id, kind, key, fields, first_step, last_step, stamp, importance, "
                     "count) VALUES ('agent_0', 'note', 'broken', '{bad', 0, 0, 0.0, 0.5, 1)")
    conn.close()
    return path


def count_rows(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        n = conn.execute("SELECT COUNT(*) FROM records").fetchone()[0]
    conn.close()
    return n


def test_list_prints_one_line_per_record_and_a_count(store_path, capsys):
    assert main(["list", "--store", str(store_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split("\t") == ["agent_0", "episodic", "1", "steps=0..4", "count=1", "importance=0.50",
                                    '{"summary":"picked apple"}']
    assert lines[1].split("\t") == ["agent_0", "failure", "pick|apple|table|grasp", "steps=3..7", "count=2",
                                    "importance=0.80", '{"skill":"pick"}']
    assert [line.split("\t")[2] for line in lines[:-1]] == ["1", "pick|apple|table|grasp", "n1", "n2"]
    assert lines[-1] == "4 records, 1 corrupt skipped"


def test_list_filters(store_path, capsys):
    assert main(["list", "--store", str(store_path), "--agent", "agent_0", "--kind", "note"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[2] for line in lines[:-1]] == ["n2"]
    assert lines[-1] == "1 records, 1 corrupt skipped"
    assert main(["list", "--store", str(store_path), "--agent", "agent_9"]) == 0
    assert capsys.readouterr().out.splitlines() == ["0 records, 0 corrupt skipped"]


def test_list_json(store_path, capsys):
    assert main(["list", "--store", str(store_path), "--json", "--kind", "failure"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["count"] == 1 and out["corrupt"] == 0 and out["store"] == str(store_path)
    assert out["records"] == [{"agent_id": "agent_0", "kind": "failure", "key": "pick|apple|table|grasp",
                               "fields": {"skill": "pick"}, "first_step": 3, "last_step": 7, "stamp": 2.0,
                               "importance": 0.8, "count": 2}]


def test_show_groups_by_kind(store_path, capsys):
    assert main(["show", "--store", str(store_path), "--agent", "agent_0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "agent_0: 3 records, 1 corrupt skipped"
    assert lines[1] == "episodic (1)"
    assert lines[2].startswith("  1\tsteps=0..4")
    assert lines[3] == "failure (1)"
    assert lines[5] == "note (1)"
    assert lines[6].startswith("  n2\t")
    assert len(lines) == 7


def test_clear_with_yes(store_path, capsys):
    assert main(["clear", "--store", str(store_path), "--agent", "agent_0", "--kind", "note", "--yes"]) == 0
    assert "deleted 2 note records of agent_0" in capsys.readouterr().out  # n2 and the corrupt row
    assert main(["clear", "--store", str(store_path), "--yes"]) == 0
    assert "deleted 3 records of every agent" in capsys.readouterr().out
    assert count_rows(store_path) == 0


def test_clear_without_yes_refuses_when_not_on_a_terminal(store_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    assert main(["clear", "--store", str(store_path)]) == 2
    assert "--yes" in capsys.readouterr().err
    assert count_rows(store_path) == 5


def test_clear_asks_on_a_terminal(store_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", Terminal("n\n"))
    assert main(["clear", "--store", str(store_path), "--agent", "agent_1"]) == 1
    out = capsys.readouterr().out
    assert "delete 1 records of agent_1" in out and "nothing deleted" in out
    assert count_rows(store_path) == 5
    monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
    assert main(["clear", "--store", str(store_path), "--agent", "agent_1"]) == 0
    assert count_rows(store_path) == 4


@pytest.mark.parametrize("command", [["list"], ["show", "--agent", "agent_0"], ["clear", "--yes"]])
def test_missing_store_is_an_error_and_is_not_created(tmp_path, capsys, command):
    path = tmp_path / "nowhere" / "memory.db"
    assert main([command[0], "--store", str(path), *command[1:]]) == 2
    assert "memory.db" in capsys.readouterr().err
    assert not path.exists() and not path.parent.exists()


def test_not_a_store_file(tmp_path, capsys):
    path = tmp_path / "notes.txt"
    path.write_text("hello\n" * 300)
    assert main(["list", "--store", str(path)]) == 2
    assert "notes.txt" in capsys.readouterr().err
    assert path.read_text() == "hello\n" * 300


@pytest.mark.parametrize("argv", [
    [],
    ["list"],
    ["show", "--store", "x.db"],
    ["list", "--store", "x.db", "--kind", "dream"],
    ["list", "--store", "x.db", "--agent", "agent_0/../../x"],
    ["clear", "--store", "x.db", "--agent", "1agent"],
    ["frobnicate", "--store", "x.db"],
])
def test_bad_arguments_exit_2(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert capsys.readouterr().err
    assert not (tmp_path / "x.db").exists()


def test_help_exits_0(capsys):
    assert main(["--help"]) == 0
    assert "list" in capsys.readouterr().out


def test_runs_as_a_module(store_path):
    done = subprocess.run([sys.executable, "-m", "brace_memory.store_cli", "list", "--store", str(store_path),
                           "--agent", "agent_1"], capture_output=True, text=True, env=child_env(),
                          stdin=subprocess.DEVNULL, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["agent_1\tnote\tn1\tsteps=5..5\tcount=1\timportance=0.25\t"
                                        '{"text":"door is locked"}', "1 records, 0 corrupt skipped"]
