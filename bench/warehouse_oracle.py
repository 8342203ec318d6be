#!/usr/bin/env python3
"""The warehouse oracle: which settings can a planner saturate? Success of the oracle policy by floor plan and K.

The oracle (`Warehouse.oracle_plan`, the plan a perfect planner would return) drives every agent of seeded episodes
of the embedded warehouse, as the closed loop's `max_steps` allows. Two cadences:

- `every step`: each agent's plan is recomputed every step (the ceiling);
- `on plan end`: an agent gets a new plan only when its plan ends or a step fails, as a planner called on triggers
  would give it (no periodic call, no prediction of others' moves).

Target: on the aisles floor plan at K = 8 within 80 steps the oracle finishes >= 95% of seeds (every
step). A setting where it does not cannot show that BRACE keeps success. Writes <out>/warehouse_oracle.{csv,png}
(--out, default bench/out); exits 1 when the target is missed or a collision happened.
Run inside the workspace: `source scripts/env.sh && python bench/warehouse_oracle.py` (seconds per 100 seeds).

Quick mode (`--quick`, what `make test` runs): 10 seeds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from report import fill_defaults, print_written, report_checks, save_plot, write_csv

from sim_bridges.warehouse.warehouse_world import Warehouse, WorldConfig, run_oracle

OUT = Path(__file__).resolve().parent / "out"
SETTINGS = (("compact", 4), ("compact", 8), ("aisles", 4), ("aisles", 8))
CADENCES = ("every step", "on plan end")
TARGET_SUCCESS = 0.95
"""The oracle finishes at least this share of K = 8 seeds on the aisles floor plan within max_steps."""


def measure(floor_plan: str, agents: int, cadence: str, seeds: int, max_steps: int) -> dict:
    """One table row: success share, steps to finish (successful episodes), collisions and near-misses per episode."""
    worlds = [Warehouse(WorldConfig(num_agents=agents, seed=seed, max_steps=max_steps, floor_plan=floor_plan))
              for seed in range(seeds)]
    for world in worlds:
        run_oracle(world, replan_every=1 if cadence == CADENCES[0] else 0)
    steps = [w.t for w in worlds if w.success] or [max_steps]
    return {"floor_plan": floor_plan, "num_agents": agents, "cadence": cadence, "seeds": seeds,
            "max_steps": max_steps, "success": round(float(np.mean([w.success for w in worlds])), 4),
            "steps_p50": float(np.percentile(steps, 50)), "steps_p95": float(np.percentile(steps, 95)),
            "collisions": sum(w.collisions for w in worlds),
            "near_misses_per_episode": round(float(np.mean([w.near_misses for w in worlds])), 2)}


def draw(rows: list[dict]):
    """The figure: success by setting, one bar per cadence."""
    def figure(plt):
        fig, ax = plt.subplots(figsize=(7, 3.5))
        width = 0.38
        for i, cadence in enumerate(CADENCES):
            values = [next(r["success"] for r in rows if (r["floor_plan"], r["num_agents"], r["cadence"]) ==
                           (plan, k, cadence)) * 100 for plan, k in SETTINGS]
            ax.bar(np.arange(len(SETTINGS)) + (i - 0.5) * width, values, width, label=f"oracle, {cadence}")
        ax.axhline(TARGET_SUCCESS * 100, color="k", linestyle="--", linewidth=1, label="target (aisles, K = 8)")
        ax.set_xticks(range(len(SETTINGS)), [f"{plan}\nK = {k}" for plan, k in SETTINGS])
        ax.set_ylabel(f"episodes finished within {rows[0]['max_steps']} steps (%)")
        ax.set_ylim(0, 105)
        ax.legend(loc="lower left", fontsize=8)
        fig.tight_layout()
        return fig
    return figure


def main() -> int:
    """Measure every row, print the table, write the CSV and PNG; the exit status of the targets."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, help="episodes per row (default 100; --quick 10)")
    ap.add_argument("--max-steps", type=int, default=80, help="the closed loop's horizon (bench/budget_targets k8)")
    ap.add_argument("--quick", action="store_true", help="10 seeds per row")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    fill_defaults(args, {"seeds": 10}, {"seeds": 100})
    rows = [measure(plan, k, cadence, args.seeds, args.max_steps) for plan, k in SETTINGS for cadence in CADENCES]
    print("| floor plan | K | cadence | seeds | success | steps P50 / P95 | collisions | near-misses / ep. |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['floor_plan']} | {r['num_agents']} | {r['cadence']} | {r['seeds']} | {r['success']:.0%} | "
              f"{r['steps_p50']:.0f} / {r['steps_p95']:.0f} | {r['collisions']} | {r['near_misses_per_episode']} |")
    print_written(write_csv(rows, args.out / "warehouse_oracle.csv"),
                  save_plot(args.out / "warehouse_oracle.png", draw(rows)))
    target = next(r for r in rows if (r["floor_plan"], r["num_agents"], r["cadence"]) == ("aisles", 8, CADENCES[0]))
    return report_checks([
        (f"oracle finishes >= {TARGET_SUCCESS:.0%} of K = 8 seeds on the aisles floor plan",
         target["success"] >= TARGET_SUCCESS, f"{target['success']:.0%} of {target['seeds']}"),
        ("no collision under the oracle", all(r["collisions"] == 0 for r in rows),
         f"{sum(r['collisions'] for r in rows)} collisions")])


if __name__ == "__main__":
    sys.exit(main())
