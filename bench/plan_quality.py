#!/usr/bin/env python3
"""Plans as good inside the budget as outside it: every variant's plan quality on oracle states and in the loop.

Two parts, side by side in one run, on seeds no training used (training episodes start at seed 1000):

- **on oracle states**: the oracle drives seeded warehouse episodes (K = 4, the demo's aisles floor plan;
  `--floor-plans compact aisles` adds the compact one) and each row's planner (the sim planner: SmolLM2-135M with the shipped
  warehouse adapter, constrained decoding, the stable_first layout, first_cut 1.5) is asked at the same decision
  points, with the point's mode and a memory fed as a run feeds it. First-step and whole-plan agreement with the
  oracle, and first-step agreement at the full_replan points alone (an initial or finished plan: a planner that
  only continues the plan its state line names fails there, and in the loop no plan ever starts). Rows: flat
  history unpruned (No BRACE's context), flat under E-RECAP at B = 384 (the demo profile's full replan), and
  OmniAct's memory, RAG static, RAG memory and GiG (state graph + Bounded Lookahead answered by the world's
  transition model) under E-RECAP at that B; on request (`--state-rows`), OmniAct's memory and GiG unpruned, which
  tell what a memory costs from what the budget costs. GiG's loop warnings need a loop, which oracle-driven states
  rarely have: they show in the loop.
- **closed loop**: each variant of runs/variants.yaml (no_brace, brace_erecap, brace_erecap_memory,
  rag_static_erecap, rag_memory_erecap, brace_erecap_gig) runs the full graph over DDS (`brace-run`'s
  run_variant) in the demo's world: K = 4, aisles, a step a second whatever the planner does (the world does not
  wait), seeds 0..N-1, audit bag per row. Success, objects delivered, oracle agreement of the plans in the loop,
  SLO violation, latency P95, loop steps.

Targets: in the loop, BRACE + E-RECAP's agreement within 3 points of No BRACE's and its success >= No
BRACE's; every memory row's agreement within 3 points of BRACE + E-RECAP's and success >= it; SLO violation <= 5%
for every BRACE row; on oracle states every memory row within 3 points of flat (E-RECAP) and flat unpruned >= 95%.
Writes <out>/plan_quality_states.csv, plan_quality_points.csv (each row's choice and the oracle's at every point;
the printed table of where a row loses points against its flat row comes from it), plan_quality_loop.csv and
plan_quality.png (--out, default bench/out/plan_quality);
exits 1 when a target is missed. Run inside the workspace (~90 min on 2 cores):

    source scripts/env.sh && python bench/plan_quality.py --episodes 8 --points 80

Quick mode (`--quick`, what `make test` runs): 2 decision points for two state rows (flat and OmniAct memory under
E-RECAP), and the loop's no_brace and brace_erecap_memory rows for one episode of K = 2 cut off after 4 steps.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import math
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from report import (
    cpu_report,
    describe_cpu,
    fill_defaults,
    load_planner_model,
    print_written,
    report_checks,
    save_plot,
    sim_planner_checkpoint,
    write_csv,
)

from brace_audit.audit_report import markdown

OUT = Path(__file__).resolve().parent / "out" / "plan_quality"
AGENTS = 4
FLOOR_PLAN = "aisles"
TOKEN_BUDGET = 384
"""B of the E-RECAP rows on oracle states: the demo's `embedded` profile's full-replan budget."""
FIRST_CUT = 1.5
LAYOUT = "stable_first"
POINTS_GAP = 3.0
"""A row's agreement within this many points of the row it is compared with."""
FLAT_FLOOR = 0.95
SLO_VIOLATION_MAX = 0.05
# The demo's world (runs/demo.yaml), not variants.yaml's lockstep: plan quality where latency costs steps.
DEMO_WORLD = {"num_agents": AGENTS, "hold_while_planning": False, "step_period_s": 1.0, "floor_plan": FLOOR_PLAN}
QUICK_WORLD = {"num_agents": 2, "max_steps": 4, "step_period_s": 0.5}


@dataclass(frozen=True)
class StateRow:
    """A planner configuration read at oracle states: its compressor and memory (finetune_cli.MEMORY_CONFIGS name)."""

    label: str
    compressor: str
    memory: str = ""


STATE_ROWS = (StateRow("flat, unpruned", "none"), StateRow("flat, E-RECAP", "erecap"),
              StateRow("OmniAct memory, E-RECAP", "erecap", "omniact"),
              StateRow("RAG static, E-RECAP", "erecap", "rag_static"),
              StateRow("RAG memory, E-RECAP", "erecap", "rag_memory"), StateRow("GiG, E-RECAP", "erecap", "gig"),
              StateRow("OmniAct memory, unpruned", "none", "omniact"), StateRow("GiG, unpruned", "none", "gig"))
"""The unpruned memory rows tell a memory's own cost from the budget's: not in the default run."""
DEFAULT_STATE_ROWS = [r.label for r in STATE_ROWS if r.memory == "" or r.compressor == "erecap"]
LOOP_ROWS = (("No BRACE", "no_brace"), ("BRACE + E-RECAP", "brace_erecap"),
             ("BRACE + E-RECAP + memory", "brace_erecap_memory"), ("RAG static + E-RECAP", "rag_static_erecap"),
             ("RAG memory + E-RECAP", "rag_memory_erecap"), ("BRACE + E-RECAP + GiG", "brace_erecap_gig"))
MEMORY_LOOP_ROWS = ("brace_erecap_memory", "rag_static_erecap", "rag_memory_erecap", "brace_erecap_gig")
LOOP_COLUMNS = ("label", "variant", "episodes", "success", "delivered", "oracle_agreement", "slo_violation",
                "latency_p95_ms", "calls", "tokens_before", "tokens_after", "loop_steps", "retrieved_tokens")


def states_part(rows: list[StateRow], floor_plans: list[str], episodes: int, points: int, dtype: str,
                adapter: str) -> tuple[list[dict], list[dict]]:
    """Each row's agreement on each floor plan at the same oracle decision points (seeds 0..episodes-1), and a line
    per row and point (PlannerPolicy.records: what the oracle chose and what the row's planner chose)."""
    from brace_common.config import resolve_path
    from brace_training.finetune_cli import MEMORY_CONFIGS, memory_use
    from brace_training.plan_data import decision_points
    from brace_training.planner_policy import PlannerPolicy
    from brace_training.prompts import use_memory
    from erecap_planner.call_path import CallOptions, LocalModel, PlannerCallPath
    from erecap_planner.plan_parser import ActionSchema
    from erecap_planner.predictor import PredictorBank
    from erecap_planner.pruning import PruneSchedule, table8_layers
    from sim_bridges.warehouse.warehouse_feed import action_schema
    from sim_bridges.warehouse.warehouse_world import Warehouse, WorldConfig

    model, tok = load_planner_model(adapter, dtype=dtype)
    bank = PredictorBank.load(resolve_path(sim_planner_checkpoint("predictor_path")), model.config)
    schedule = PruneSchedule(tuple(table8_layers(model.config.num_hidden_layers)), 0.7, first_cut=FIRST_CUT)
    out, lines = [], []
    for floor_plan, row in itertools.product(floor_plans, rows):
        schema = ActionSchema.from_dict(action_schema(Warehouse(WorldConfig(num_agents=AGENTS, floor_plan=floor_plan))))
        local = LocalModel(model, tok, schedule, bank if row.compressor == "erecap" else None)
        path = PlannerCallPath(local, CallOptions(compressor=row.compressor, decoding="constrained", layout=LAYOUT),
                               schema)
        use_memory(path, memory_use(next(c for c in MEMORY_CONFIGS if c.name == row.memory)) if row.memory else None)
        policy = PlannerPolicy(path, TOKEN_BUDGET if row.compressor == "erecap" else 100_000)
        started = time.monotonic()
        # generated lazily: the memory holds what a run's would when each point is consumed
        for point in itertools.islice(decision_points(range(episodes), AGENTS, floor_plan=floor_plan,
                                                      memory=path.memory.system if path.memory else None), points):
            policy(point)
        if path.memory:
            path.memory.system.close()
        out.append({"label": row.label, "floor_plan": floor_plan, "compressor": row.compressor, "memory": row.memory or "none",
                    "token_budget": TOKEN_BUDGET if row.compressor == "erecap" else 0, **policy.scores(),
                    "wall_s": round(time.monotonic() - started, 1)})
        lines += [{"label": row.label, "compressor": row.compressor, "floor_plan": floor_plan, **r}
                  for r in policy.records]
        print(out[-1], file=sys.stderr, flush=True)
    return out, lines


BASE_ROW = "flat, E-RECAP"
"""The row the memory rows' choices are compared with, point by point (an unpruned row: flat, unpruned)."""


def flat_row(compressor: str) -> str:
    """The flat-history row a memory row under `compressor` is compared with."""
    return BASE_ROW if compressor == "erecap" else "flat, unpruned"


def error_kind(line: dict) -> str:
    """How a choice differs from the oracle's: 'wait' (the planner waits where the oracle acts), 'acts, oracle
    waits', 'same action, other parameters' or 'other action' (or 'error': no plan)."""
    chosen, oracle = line["chosen_first"].split("(")[0], line["oracle_first"].split("(")[0]
    if chosen == "error":
        return "error"
    if chosen in ("", "wait"):
        return "wait"
    if oracle in ("", "wait"):
        return "acts, oracle waits"
    return "same action, other parameters" if chosen == oracle else "other action"


def after_last_delivery(line: dict) -> bool:
    """A point where the agent stands at a dock and the oracle sends it to park: its work is done."""
    return line["here"].startswith("dock_") and line["oracle_first"].startswith("move_to(target=park_")


def losses(lines: list[dict]) -> list[dict]:
    """Per row other than BASE_ROW: the points it shares with its flat row (`flat_row`; flat, unpruned's with
    BASE_ROW), where the flat row agrees with the oracle and it does not (lost) and the reverse (gained), the lost
    ones by error_kind, at full_replan points and after a last delivery (`after_last_delivery`), and its commonest
    lost choice (oracle -> chosen)."""
    key = ("label", "floor_plan", "seed", "step", "agent_id")
    at = {tuple(r[k] for k in key): r for r in lines}
    out = []
    for label, compressor in dict.fromkeys((r["label"], r["compressor"]) for r in lines if r["label"] != BASE_ROW):
        base = BASE_ROW if label == "flat, unpruned" else flat_row(compressor)
        pairs = [(at[k], r) for r in lines if r["label"] == label
                 and (k := (base, *(r[c] for c in key[1:]))) in at]
        if not pairs:
            continue
        lost = [r for b, r in pairs if b["agreed"] and not r["agreed"]]
        kinds = collections.Counter(error_kind(r) for r in lost)
        modes = collections.Counter(r["mode"] for r in lost)
        choice = collections.Counter(f"{r['oracle_first']} -> {r['chosen_first'] or '(empty)'}" for r in lost)
        out.append({"label": label, "compared_with": base, "points": len(pairs), "lost": len(lost),
                    "gained": sum(1 for b, r in pairs if r["agreed"] and not b["agreed"]),
                    **{f"lost_{k.replace(', ', '_').replace(' ', '_')}": kinds.get(k, 0) for k in LOSS_KINDS},
                    "lost_at_full_replan": modes.get("full_replan", 0),
                    "lost_after_last_delivery": sum(map(after_last_delivery, lost)),
                    "commonest_lost_choice": "; ".join(f"{c} ({n})" for c, n in choice.most_common(2))})
    return out


LOSS_KINDS = ("wait", "acts, oracle waits", "same action, other parameters", "other action", "error")
LOSS_COLUMNS = ("label", "compared_with", "points", "lost", "gained", "lost_wait", "lost_acts_oracle_waits",
                "lost_same_action_other_parameters", "lost_other_action", "lost_error", "lost_at_full_replan",
                "lost_after_last_delivery", "commonest_lost_choice")


def loop_part(variants: list[tuple[str, str]], episodes: int, out: Path, world: dict, quiet: bool,
              adapter: str) -> list[dict]:
    """Run every variant's graph for `episodes` seeded episodes in `world` with the planner's `adapter`; its summary
    row."""
    from brace_audit.audit_report import summary
    from brace_bringup.run_config import RunConfig
    from brace_bringup.run_plan import plan
    from brace_bringup.runner import free_ports, run_variant

    cfg = RunConfig.load("variants")
    rows = []
    for i, (label, variant) in enumerate(variants):
        folder = out / "loop" / f"{i:02d}_{variant}"
        shutil.rmtree(folder, ignore_errors=True)
        started = time.monotonic()
        extra = {"embedded_sim": {**world, "episodes": episodes}, "erecap_planner": {"adapter_path": adapter}}
        records, _bag = run_variant(plan(cfg, variant, folder, extra, free_ports()), quiet)
        row = {"label": label, **summary(records), "variant": variant}
        rows.append({k: row.get(k, math.nan) for k in LOOP_COLUMNS})
        print(f"  loop row {i + 1}/{len(variants)} '{label}': {time.monotonic() - started:.0f} s {rows[-1]}",
              file=sys.stderr, flush=True)
    return rows


def checks_of(states: list[dict], loop: list[dict]) -> list[tuple[str, bool, str]]:
    """The targets over the rows that ran."""
    checks = []
    by = {r["variant"]: r for r in loop}
    base, brace = by.get("no_brace"), by.get("brace_erecap")
    if base and brace:
        gap = (base["oracle_agreement"] - brace["oracle_agreement"]) * 100
        checks.append(("loop: BRACE + E-RECAP agreement within 3 points of No BRACE's", gap <= POINTS_GAP,
                       f"{brace['oracle_agreement']:.1%} vs {base['oracle_agreement']:.1%}"))
        checks.append(("loop: BRACE + E-RECAP success >= No BRACE's", brace["success"] >= base["success"],
                       f"{brace['success']:.1%} vs {base['success']:.1%}"))
    for variant in MEMORY_LOOP_ROWS:
        if brace and variant in by:
            row = by[variant]
            gap = (brace["oracle_agreement"] - row["oracle_agreement"]) * 100
            checks.append((f"loop: {row['label']} agreement within 3 points of BRACE + E-RECAP's", gap <= POINTS_GAP,
                           f"{row['oracle_agreement']:.1%} vs {brace['oracle_agreement']:.1%}"))
            checks.append((f"loop: {row['label']} success >= BRACE + E-RECAP's", row["success"] >= brace["success"],
                           f"{row['success']:.1%} vs {brace['success']:.1%}"))
    for row in loop:
        if row["variant"] != "no_brace":
            checks.append((f"loop: {row['label']} SLO violation <= 5%", row["slo_violation"] <= SLO_VIOLATION_MAX,
                           f"{row['slo_violation']:.1%}"))
    st = {(r["floor_plan"], r["label"]): r for r in states}
    for r in states:
        where = f"states ({r['floor_plan']})"
        if r["label"] == "flat, unpruned":
            value = r["first_step_agreement"]
            checks.append((f"{where}: flat unpruned >= 95%", value >= FLAT_FLOOR, f"{value:.1%}"))
        base = flat_row(r["compressor"])
        flat = st.get((r["floor_plan"], base))
        if r["memory"] != "none" and flat:
            gap = (flat["first_step_agreement"] - r["first_step_agreement"]) * 100
            checks.append((f"{where}: {r['label']} within 3 points of {base}", gap <= POINTS_GAP,
                           f"{r['first_step_agreement']:.1%} vs {flat['first_step_agreement']:.1%}"))
    return checks


def draw(states: list[dict], loop: list[dict]):
    """Agreement on oracle states and in the loop, success and SLO violation per row."""
    def figure(plt):
        fig, axes = plt.subplots(1, 3, figsize=(13, 4))
        if states:
            axes[0].barh([f"{r['label']} ({r['floor_plan']})" for r in states], [r["first_step_agreement"] * 100 for r in states])
        axes[0].set_xlabel("first-step agreement on oracle states %")
        axes[0].set_xlim(0, 100)
        labels = [r["label"] for r in loop]
        axes[1].barh(labels, [r["oracle_agreement"] * 100 for r in loop], color="tab:green", label="agreement")
        axes[1].barh(labels, [r["success"] * 100 for r in loop], color="tab:orange", alpha=0.6, height=0.4,
                     label="success")
        axes[1].set_xlabel("in the loop %")
        axes[1].set_xlim(0, 100)
        axes[1].legend(fontsize=7)
        axes[2].barh(labels, [r["slo_violation"] * 100 for r in loop], color="tab:red")
        axes[2].axvline(SLO_VIOLATION_MAX * 100, color="k", linestyle="--", linewidth=1)
        axes[2].set_xlabel("SLO violation %")
        for ax in axes:
            ax.tick_params(axis="y", labelsize=7)
        fig.tight_layout()
        return fig
    return figure


PERCENT = {"success", "oracle_agreement", "slo_violation", "first_step_agreement", "plan_agreement", "valid_plans",
           "full_replan_agreement"}
STATE_COLUMNS = ("label", "floor_plan", "points", "first_step_agreement", "full_replan_agreement", "plan_agreement",
                 "valid_plans", "tokens_before", "tokens_after", "latency_p50_ms")


def main() -> int:
    """Both parts, the tables, the targets."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, help="closed-loop episodes per row, seeds 0..N-1 (default 8)")
    ap.add_argument("--points", type=int, help="oracle decision points per state row (default 80)")
    ap.add_argument("--state-episodes", type=int, default=4, help="oracle episodes the points come from")
    ap.add_argument("--floor-plans", nargs="+", default=[FLOOR_PLAN], choices=["compact", "aisles"],
                    help="the oracle states' floor plans (default: the demo's)")
    ap.add_argument("--state-rows", nargs="*", choices=[r.label for r in STATE_ROWS],
                    help="default: all but the unpruned memory rows")
    ap.add_argument("--variants", nargs="*", choices=[v for _, v in LOOP_ROWS], help="loop rows (default: all)")
    ap.add_argument("--adapter", default=sim_planner_checkpoint("adapter_path"),
                    help="the planner's LoRA adapter in every row (default: the sim planner's shipped one)")
    ap.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                    help="the oracle-state planner's weights ('auto' as the sim planner picks)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--quiet", action="store_true", help="no per-step progress line")
    ap.add_argument("--quick", action="store_true", help="smoke run (see the module docstring)")
    args = ap.parse_args()
    fill_defaults(args, quick=dict(episodes=1, points=2, state_rows=[BASE_ROW, "OmniAct memory, E-RECAP"],
                                   variants=["no_brace", "brace_erecap_memory"]),
                  full=dict(episodes=8, points=80, state_rows=DEFAULT_STATE_ROWS,
                            variants=[v for _, v in LOOP_ROWS]))
    if args.quick:
        args.state_episodes = 1
    args.out.mkdir(parents=True, exist_ok=True)
    cpu = cpu_report()
    states, lines = states_part([r for r in STATE_ROWS if r.label in args.state_rows], args.floor_plans,
                                args.state_episodes, args.points, args.dtype, args.adapter)
    lost = losses(lines)
    world = {**DEMO_WORLD, **(QUICK_WORLD if args.quick else {})}
    loop = loop_part([(label, v) for label, v in LOOP_ROWS if v in args.variants], args.episodes, args.out, world,
                     args.quiet, args.adapter)
    print(f"\n## Plan quality ({describe_cpu(cpu)}; adapter {args.adapter})")
    print(f"\n### On oracle states (seeds 0-{args.state_episodes - 1}, "
          f"K = {AGENTS}, B = {TOKEN_BUDGET} for E-RECAP)\n\n{markdown(states, STATE_COLUMNS, PERCENT)}\n"
          + (f"\nWhere each row's first step differs from its flat row's, at the same points (lost: the flat row "
             f"agrees with the oracle and the row does not; gained: the reverse)\n\n"
             f"{markdown(lost, LOSS_COLUMNS, set())}\n"
             if lost else "") +
          f"### Closed loop ({args.episodes} episodes per row, seeds 0-{args.episodes - 1}, K = {world['num_agents']})"
          f"\n\n{markdown(loop, LOOP_COLUMNS, PERCENT)}")
    paths = (write_csv(states, args.out / "plan_quality_states.csv"), write_csv(lines, args.out / "plan_quality_points.csv"),
             write_csv(loop, args.out / "plan_quality_loop.csv"),
             save_plot(args.out / "plan_quality.png", draw(states, loop)))
    status = report_checks(checks_of(states, loop))
    print_written(*paths)
    return status


if __name__ == "__main__":
    sys.exit(main())
