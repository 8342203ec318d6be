"""Every reported number is in the bag: `brace-audit report <run folder>` prints what `brace-run` printed.

A tiny run of each world through brace-run's command line (a tiny planner model,
few steps): the embedded warehouse (`demo`, both variants), the PickFruit CAN twin
(`piper_twin`: Table 32) and the AirSim intersection at K = 8 on brace-airsim-peer
(`airsim_k8`: the drone table; the peer is a child process). brace-run's tables
come from its live collector; the report reads only the bags. Their stdout must
be the same text, and the CSVs the same files.
"""

from __future__ import annotations

import csv
import socket
from pathlib import Path

import pytest

from brace_audit.audit import main as audit_main
from brace_audit.audit import records_from_bag
from brace_bringup.runner import main as run_main
from brace_common.domain_leases import fresh_domain
from erecap_planner.testing import saved_tiny_llama

TINY_PLANNER = ("erecap_planner.pruning_layers=[1, 3]", "erecap_planner.predictor_path=''",
                "erecap_planner.adapter_path=''")
CSVS = ("summary.csv", "episodes.csv")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return str(saved_tiny_llama(tmp_path_factory.mktemp("tiny_llama")))


@pytest.fixture(autouse=True)
def domain(monkeypatch, tmp_path):
    monkeypatch.setenv("ROS_DOMAIN_ID", str(fresh_domain()))  # this test's own, given back after it


def brace_run(capsys, run: str, model_dir: str, output: Path, variants: list[str], sets: list[str]) -> tuple[str, Path]:
    """brace-run's stdout (its tables) and its run folder."""
    argv = [run, "--variants", *variants, "--episodes", "1", "--output", str(output), "--quiet",
            "--set", f"erecap_planner.model_path={model_dir}"]
    for item in (*TINY_PLANNER, *sets):
        argv += ["--set", item]
    capsys.readouterr()
    assert run_main(argv) == 0, capsys.readouterr().err[-3000:]
    out = capsys.readouterr().out
    tables, _, last = out.rstrip("\n").rpartition("\n")
    assert last.startswith("run folder: "), out[-500:]
    return tables + "\n", Path(last.removeprefix("run folder: ").split(" (")[0])


def audit_report(capsys, folder: Path, csv_dir: Path) -> str:
    """brace-audit report's stdout on the run folder (its CSVs into csv_dir)."""
    assert audit_main(["report", str(folder), "--csv", str(csv_dir)]) == 0, capsys.readouterr().err[-3000:]
    return capsys.readouterr().out


def same_csvs(folder: Path, csv_dir: Path, names: tuple[str, ...]) -> None:
    for name in names:
        assert (csv_dir / name).read_text() == (folder / name).read_text(), name


def test_the_warehouse_tables_from_the_bags_are_brace_runs(capsys, model_dir, tmp_path):
    printed, folder = brace_run(capsys, "demo", model_dir, tmp_path / "runs", ["no_brace", "brace_erecap"],
                                ["embedded_sim.max_steps=6", "embedded_sim.step_period_s=0.01",
                                 "embedded_sim.hold_while_planning=true"])
    assert "## Summary (paper Table 2 shape)" in printed and "| no_brace |" in printed and "| brace_erecap |" in printed
    assert "path_efficiency" in printed and "near_misses" in printed and "Table 32" not in printed
    assert audit_report(capsys, folder, tmp_path / "csv") == printed
    same_csvs(folder, tmp_path / "csv", CSVS)
    rows = list(csv.DictReader((folder / "episodes.csv").open()))
    assert [r["variant"] for r in rows] == ["no_brace", "brace_erecap"] and {r["world"] for r in rows} == {"warehouse"}
    assert "plans_agreeing" in rows[0] and "min_distance_m" not in rows[0]  # the warehouse has no distances


def test_table_32_from_the_bag_is_brace_runs(capsys, model_dir, tmp_path):
    with socket.socket() as probe:  # a free port for the /act stand-in (the executor must know it beforehand)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    printed, folder = brace_run(capsys, "piper_twin", model_dir, tmp_path / "runs", ["brace_erecap"], [
        "twin_world.max_episode_s=25.0", f"twin_world.act_port={port}", f"twin_world.can_port=twin_run_{port}",
        f"piper_arm.can_port=twin_run_{port}", f"openvla_executor.server_url=http://127.0.0.1:{port}/act"])
    assert "PickFruit on the PiPER CAN twin" in printed and "brace_erecap" in printed
    assert audit_report(capsys, folder, tmp_path / "csv") == printed
    same_csvs(folder, tmp_path / "csv", (*CSVS, "table32.csv"))
    (episode,) = csv.DictReader((folder / "episodes.csv").open())
    assert episode["world"] == "pickfruit" and float(episode["duration_s"]) <= 40.0
    assert int(episode["plans"]) >= 1, episode  # the world saw the plans the executor runs
    assert {"grasps", "slips", "failure_grasp", "failure_drop_slip"} <= set(episode)
    assert "path_efficiency" not in episode and "near_misses" not in episode  # nothing zero-filled
    records, note = records_from_bag(folder / "brace_erecap" / "bag")
    assert note == "" and records.calls and all(c.status == 0 for c in records.calls), [c.status for c in records.calls]


def test_the_drone_table_from_the_bag_is_brace_runs(capsys, model_dir, tmp_path):
    printed, folder = brace_run(capsys, "airsim_k8", model_dir, tmp_path / "runs", ["brace_erecap"],
                                ["airsim_bridge.max_steps=20", "airsim_bridge.step_period_s=0.05"])
    lines = printed.splitlines()
    title = lines.index("AirSim drone intersection (paper Tables 2, 24 and 26 shape)")
    row = lines[title + 2].split()
    assert row[:2] == ["8", "brace_erecap"], printed  # K from the episodes
    assert audit_report(capsys, folder, tmp_path / "csv") == printed
    same_csvs(folder, tmp_path / "csv", (*CSVS, "intersection.csv"))
    (episode,) = csv.DictReader((folder / "episodes.csv").open())
    assert episode["world"] == "airsim" and {"near_misses", "collisions", "plans_agreeing"} <= set(episode)
