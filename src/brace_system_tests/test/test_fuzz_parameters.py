"""The overlay attack's verdict: a crash at exit after the refusal, or a start still running at the limit, is started
once more and counted, never hidden."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from brace_system_tests import fuzz_parameters, process_graph
from brace_system_tests.fuzz_parameters import OverlayOutcome, default_cases


def run_with(monkeypatch, results: list[tuple[int | None, bool]]) -> tuple[OverlayOutcome, int]:
    """`_start` for one case whose successive processes end as `results` (exit code, named); and how many ran."""
    case, started = default_cases(1)[0], []

    def once(index, case_, folder, env):
        code, named = results[len(started)]
        started.append(code)
        return OverlayOutcome(case_, code, named, output=f"run {len(started)}")

    monkeypatch.setattr(fuzz_parameters, "_start_once", once)
    return fuzz_parameters._start(0, case, Path("."), {}), len(started)


def test_a_crash_after_naming_the_parameter_is_started_again_and_counted(monkeypatch):
    outcome, runs = run_with(monkeypatch, [(-11, True), (2, True)])
    assert (runs, outcome.refused, outcome.crashes, outcome.output) == (2, True, [-11], "run 2")
    assert outcome.note == "refused (crashed at exit [-11] before)"


def test_a_crash_every_time_is_not_a_refusal(monkeypatch):
    outcome, runs = run_with(monkeypatch, [(-11, True), (-11, True), (2, True)])
    assert (runs, outcome.refused, outcome.crashes, outcome.note) == (2, False, [-11], "NOT refused (crashed at exit "
                                                                                        "[-11] before)")


def test_a_crash_before_naming_the_parameter_or_a_wrong_exit_is_not_started_again(monkeypatch):
    for first in ((-11, False), (1, True)):
        outcome, runs = run_with(monkeypatch, [first, (2, True)])
        assert (runs, outcome.refused, outcome.crashes) == (1, False, []), first
    outcome, runs = run_with(monkeypatch, [(2, True)])
    assert (runs, outcome.note) == (1, "refused")


def test_a_start_still_running_at_the_limit_is_started_again_and_counted(monkeypatch):
    outcome, runs = run_with(monkeypatch, [(None, False), (2, True)])
    assert (runs, outcome.refused, outcome.hangs, outcome.output) == (2, True, ["run 1"], "run 2")
    assert outcome.note == "refused (hung at start 1x before)"
    outcome, runs = run_with(monkeypatch, [(None, False), (None, False), (2, True)])
    assert (runs, outcome.refused, outcome.note) == (2, False, "still running (hung at start 1x before)")


@pytest.mark.timeout(120)
def test_a_start_still_running_at_the_limit_writes_its_stacks(monkeypatch, tmp_path):
    """The process gets SIGABRT, and Python's fault handler (on in the cases' environment) writes where it was."""
    ready, hanging = tmp_path / "ready", tmp_path / "hanging"
    hanging.write_text(f"#!{sys.executable}\nimport pathlib\nimport time\n\n\ndef waiting_for_ever():\n"
                       f"    pathlib.Path({str(ready)!r}).touch()\n    time.sleep(3600)\n\n\nwaiting_for_ever()\n")
    hanging.chmod(0o755)

    class StartedPopen(subprocess.Popen):
        """Returns once the script runs (its fault handler is on): the limit then never cuts its start short."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            while not ready.exists() and self.poll() is None:
                time.sleep(0.01)

    monkeypatch.setattr(process_graph, "installed_executable", lambda package, executable: hanging)
    monkeypatch.setattr(fuzz_parameters.subprocess, "Popen", StartedPopen)
    monkeypatch.setattr(fuzz_parameters, "START_LIMIT_S", 0.5)
    outcome = fuzz_parameters._start_once(0, default_cases(1)[0], tmp_path, {**os.environ, "PYTHONFAULTHANDLER": "1"})
    assert outcome.returncode is None and not outcome.refused
    assert "waiting_for_ever" in outcome.output, outcome.output
