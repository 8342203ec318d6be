"""The local servers' command lines: llama.cpp's C++ server with its slots, where its binary is found, bad counts."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from erecap_planner.local_server import ENGINES, LocalServer, engine_command, llama_server_binary, main


def fake_binary(path: Path) -> Path:
    """An executable file at `path` (what the lookup checks; it never runs)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_llama_server_gets_a_context_per_slot_continuous_batching_and_metrics(tmp_path, monkeypatch):
    binary = fake_binary(tmp_path / "bin" / "llama-server")
    monkeypatch.setenv("BRACE_LLAMA_SERVER", str(binary))
    command = engine_command("llama_server", tmp_path / "m.gguf", 8123, threads=2, parallel=4)
    assert command[0] == str(binary)
    assert command[command.index("--model") + 1] == str(tmp_path / "m.gguf")
    assert command[command.index("--parallel") + 1] == "4"
    assert int(command[command.index("--ctx-size") + 1]) == 4 * 8192  # llama-server splits it over the slots
    assert {"--cont-batching", "--metrics"} <= set(command) and command[command.index("--port") + 1] == "8123"
    assert command[command.index("--threads") + 1] == "2"
    assert "llama_server" in ENGINES


def test_the_built_binary_is_found_in_the_cache_and_a_missing_one_names_the_script(tmp_path, monkeypatch):
    monkeypatch.delenv("BRACE_LLAMA_SERVER", raising=False)
    monkeypatch.setenv("BRACE_MODEL_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="build_llama_server.sh"):
        llama_server_binary()
    built = fake_binary(tmp_path / "llama-server-0.3.36" / "llama-server")
    assert llama_server_binary() == built
    monkeypatch.setenv("BRACE_LLAMA_SERVER", str(tmp_path / "absent"))
    with pytest.raises(FileNotFoundError, match="absent"):
        llama_server_binary()


def test_slot_counts_below_one_are_refused(tmp_path, capsys):
    with pytest.raises(ValueError, match="parallel"):
        LocalServer(tmp_path, engine="llama_server", parallel=0)
    with pytest.raises(SystemExit):
        main(["--engine", "llama_server", "--parallel", "0"])
    assert "--parallel" in capsys.readouterr().err


def test_the_cli_reports_a_missing_llama_server_without_starting_anything(tmp_path, monkeypatch, capsys):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr("erecap_planner.local_server.served_model", lambda *a: gguf)
    monkeypatch.setenv("BRACE_LLAMA_SERVER", str(tmp_path / "absent"))
    assert main(["--engine", "llama_server", "--parallel", "2"]) == 2
    assert "build_llama_server.sh" in capsys.readouterr().err
