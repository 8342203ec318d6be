"""Benchmarks that cannot rot: every script under bench/ runs its quick mode as a user would.

Each script runs as its own process from the workspace root (`python bench/<script>.py --quick --out <tmp>`, the
sourced environment of the test run). It must start, measure and write its table: no traceback, exit 0 or 1 (1 is
a missed target, which a smoke run on a busy machine may well miss: no target is checked here), the table on
stdout, and the CSVs it names in the temporary folder with rows whose measured columns are positive numbers.
Nothing may be written into bench/out. bench/fuzz_graph.py has its own short test (test_fuzz_graph.py);
bench/report.py is the scripts' shared helper, not a benchmark.
"""

from __future__ import annotations

import csv
import math
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from brace_system_tests.browser_opt_out import browser_opted_out

WORKSPACE = Path(__file__).resolve().parents[3]
BENCH = WORKSPACE / "bench"


@dataclass(frozen=True)
class Quick:
    """A script's quick run: its extra arguments ({out}: the temporary folder), the stdout table's header,
    the CSVs (relative to {out}) with the columns every row must fill with a positive number, and its figures."""

    args: tuple[str, ...]
    header: str
    tables: dict[str, tuple[str, ...]]
    figures: tuple[str, ...] = ()


RUNS = {
    "backbones": Quick(("--out", "{out}"), "| model | layers | method |",
                       {"backbones.csv": ("layers", "calls", "tokens_after", "latency_mean_ms", "prefill_256_ms")},
                       ("backbones.png",)),
    "budget_targets": Quick(("--out", "{out}/budget_targets"), "call latency while the context grows",
                            {"budget_targets_growth.csv": ("tokens_before", "p50_ms", "prefill_ms"),
                             "budget_targets_growth_calls.csv": ("latency_ms",),
                             "budget_targets.csv": ()}, ("budget_targets.png",)),
    "closed_loop_trace": Quick(("--out", "{out}"), "episode seed 0:",
                               {"closed_loop_trace.csv": ("tokens_before", "tokens_after", "latency_ms")}),
    "collision_monitor": Quick(("--out", "{out}"), "Collision monitor decision per command",
                               {"collision_monitor.csv": ("count", "p50_us", "p99_us")}, ("collision_monitor.png",)),
    "controller_overhead": Quick(("--out", "{out}"), "Trigger -> decision over DDS",
                                 {"controller_overhead.csv": ("count", "p50", "p99")}, ("controller_overhead.png",)),
    "erecap_quality": Quick(("--out", "{out}"), "seed recall %", {"erecap_quality.csv": ("cases", "tokens_after")},
                            ("erecap_quality.png",)),
    "erecap_speed": Quick(("--out", "{out}/erecap_speed"), "prefill_speedup",
                          {"erecap_speed.csv": ("tokens_after", "prefill_ms", "e2e_ms", "kv_mb")}, ("erecap_speed.png",)),
    "loop_detection": Quick(("--out", "{out}"), "| world | detector |",
                            {"loop_detection.csv": ("trajectories", "states", "revisits")}),
    "pusht_drift": Quick(("--out", "{out}"), "| arm | trials |", {"pusht_drift.csv": ("trials", "duration_s")},
                         ("pusht_drift.png",)),
    "visual_verifier": Quick(("--out", "{out}"), "| backend | trials |",
                             {"visual_verifier.csv": ("trials", "frames", "cost_p95_ms"),
                              "visual_verifier_trials.csv": ("frames", "verdicts")}, ("visual_verifier.png",)),
    "state_encoder": Quick(("--out", "{out}"), "| features | world |",
                           {"state_encoder.csv": ("trajectories", "states", "intra_pairs"),
                            "state_encoder_timing.csv": ("calls", "p95_ms")}, ("state_encoder.png",)),
    "memory_haystack": Quick(("--threads", "1", "--out", "{out}"), "| row | cases |",
                             {"memory_haystack.csv": ("cases", "context_tokens", "raw_tokens", "latency_p50_ms"),
                              "memory_haystack_calls.csv": ("context_tokens", "raw_tokens", "latency_ms")},
                             ("memory_haystack.png",)),
    "memory_retrieval": Quick(("--out", "{out}"), "| records / kind | corpus |",
                              {"memory_retrieval.csv": ("records", "retrieve_p50_ms", "memory_tokens")},
                              ("memory_retrieval.png",)),
    "textworld_memory": Quick(("--out", "{out}"), "| row | games |",
                              {"textworld_memory_L3.csv": ("games", "calls", "p50_ms")}, ("textworld_memory_L3.png",)),
    "planner_backends": Quick(("--out", "{out}"), "## Call latency by backend",
                              {"planner_backends.csv": ("tokens_n", "p50_ms"),
                               "planner_backends_quality.csv": ("points", "p50_ms")}, ("planner_backends.png",)),
    "plan_quality": Quick(("--out", "{out}", "--quiet"), "| label | compared_with | points | lost |",
                          {"plan_quality_states.csv": ("points", "tokens_before", "latency_p50_ms"),
                           "plan_quality_points.csv": (),  # seed, step and agreed may be 0
                           # tokens are counted over answered calls: on a busy machine every call may pass its
                           # deadline, and a row then has none
                           "plan_quality_loop.csv": ("episodes", "calls")}, ("plan_quality.png",)),
    "planner_start": Quick(("--out", "{out}"), "| planner | configured (s, median) |",
                           {"planner_start.csv": ("configured_s", "peak_rss_mib")}),
    "planner_choice": Quick(("--out", "{out}"), "first_step_agreement:",
                            {"planner_choice.csv": ("points", "latency_p50_ms", "tokens_before")}),
    "training_speed": Quick(("--out", "{out}"), "| row | training | examples |",
                            {"training_speed.csv": ("examples", "train_s", "examples_per_s", "held_out_points")},
                            ("training_speed.png",)),
    "warehouse_oracle": Quick(("--out", "{out}"), "| floor plan | K | cadence |",
                              {"warehouse_oracle.csv": ("seeds", "steps_p50", "max_steps")}, ("warehouse_oracle.png",)),
    "fleet_load": Quick(("--variants", "brace_erecap", "--out", "{out}"), "| variant | R |",  # one cell: ~90 s less
                        {"fleet_load.csv": ("fleet_size", "calls", "wall_s"),
                         "fleet_load_robots.csv": ("calls", "latency_p95_ms")},
                        ("fleet_load.png",)),
    "viewer": Quick(("--out", "{out}"), "| world | agents | steps |",
                    {"viewer.csv": ("agents", "steps", "first_frame_s", "loaded_s", "slo_pixels", "event_pixels")},
                    ("viewer.png", "viewer_warehouse.png")),
    "reproduce": Quick(("--out", "{out}"), "| label | episodes |",
                       {"table2.csv": ("episodes", "latency_p50_ms")}, ("table2.png",)),  # tokens: see plan_quality
}
NEEDS_BROWSER = {"viewer"}  # skipped, and saying so, where the user opted out of the browser (BRACE_NO_BROWSER=1)
NOT_BENCHMARKS = {"report", "fuzz_graph"}  # the shared helper; the fuzz harness (test_fuzz_graph.py)


def test_every_benchmark_has_a_quick_run():
    scripts = {p.stem for p in BENCH.glob("*.py")} - NOT_BENCHMARKS
    assert scripts == set(RUNS), "a benchmark under bench/ without a quick run here (or one that is gone)"


def snapshot(folder: Path) -> dict[str, int]:
    """Every file under `folder` with its modification time."""
    return {str(p): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()} if folder.exists() else {}


def positive(value: str) -> bool:
    try:
        number = float(value)
    except ValueError:
        return False
    return math.isfinite(number) and number > 0


def run_in_own_group(cmd: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    """Run `cmd` in its own process group; past `timeout_s` the whole group is killed (a benchmark's server too,
    which a kill of the benchmark alone left running) and the test fails naming the timeout."""
    with subprocess.Popen(cmd, cwd=WORKSPACE, env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            pytest.fail(f"$ {' '.join(cmd)} ran past {timeout_s} s\n{stdout[-3000:]}\n{stderr[-3000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("script", sorted(RUNS), ids=sorted(RUNS))
def test_quick_run_measures_and_writes_its_table(script, tmp_path):
    if script in NEEDS_BROWSER and browser_opted_out():
        pytest.skip("BRACE_NO_BROWSER=1: the viewer's benchmark drives a browser")
    quick = RUNS[script]
    before = snapshot(BENCH / "out")
    cmd = [sys.executable, f"bench/{script}.py", "--quick", *(a.format(out=tmp_path) for a in quick.args)]
    proc = run_in_own_group(cmd, timeout_s=540)
    output = f"$ {' '.join(cmd)}\n--- stdout\n{proc.stdout[-6000:]}\n--- stderr\n{proc.stderr[-6000:]}"
    assert proc.returncode in (0, 1), output  # 1: a missed target; anything else: it did not run through
    assert "Traceback" not in proc.stdout + proc.stderr, output
    assert quick.header in proc.stdout, output
    for name, columns in quick.tables.items():
        path = tmp_path / name
        assert path.is_file(), f"{name} not written\n{output}"
        with path.open() as f:
            rows = list(csv.DictReader(f))
        assert rows, f"{name} has no rows\n{output}"
        for column in columns:
            bad = [row.get(column) for row in rows if not positive(row.get(column) or "")]
            assert not bad, f"{name}: column {column} is not a positive number in every row: {bad}\n{output}"
    for name in quick.figures:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{name} is not a PNG\n{output}"
    assert snapshot(BENCH / "out") == before, "a quick run wrote into bench/out"
