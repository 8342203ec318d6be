"""Output helpers shared by the benchmarks in bench/."""

from __future__ import annotations

import csv
from pathlib import Path


def write_csv(rows: list[dict], path: Path) -> Path:
    """Write `rows` (dicts with the same keys) as a CSV file, creating its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def sim_planner_checkpoint(name: str) -> str:
    """`adapter_path` or `predictor_path` as config/erecap_planner_sim.yaml ships it (the benches' default)."""
    from brace_controller.config import load_ros_parameters

    sim = Path(__file__).resolve().parent.parent / "config" / "erecap_planner_sim.yaml"
    return str(load_ros_parameters(sim, "erecap_planner")[name])
