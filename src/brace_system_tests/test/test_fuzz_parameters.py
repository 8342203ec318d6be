"""The overlay attack's verdict: a crash at exit after the refusal is started once more and counted, never hidden."""

from __future__ import annotations

from pathlib import Path

from brace_system_tests import fuzz_parameters
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
    for first in ((-11, False), (1, True), (None, False)):
        outcome, runs = run_with(monkeypatch, [first, (2, True)])
        assert (runs, outcome.refused, outcome.crashes) == (1, False, []), first
    outcome, runs = run_with(monkeypatch, [(2, True)])
    assert (runs, outcome.note) == (1, "refused")
