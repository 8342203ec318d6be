"""The paper's tables in shape, from our own closed-loop runs on the embedded warehouse.

Every row is one `brace-run` variant (brace_bringup's runs/variants.yaml: the five nodes
on one executor over real DDS, audit bag per row) with the row's overrides:

  table2   No BRACE vs BRACE + E-RECAP (paper Table 2)
  table15  every variant at one matched budget B, adaptive budget off (Table 15)
  table6   a harder world (more grasp slips and drift): open loop, frozen plan,
           No BRACE, BRACE + E-RECAP (Table 6)
  table30  the delta / omega / w sweep of BRACE + E-RECAP in a deadlock-prone
           world (K = 6, every task to one dock) (Table 30), and (3, 2, 3) with GiG: loop trigger,
           loop warning and Bounded Lookahead; loop and wait steps per episode
  table5   K = 1, 2, 4, 8 with unpruned, E-RECAP and random context at the same B (Table 5 shape)
  table20  RAG x Prune at the small budget B = 128 (Table 20): retrieval from the warehouse corpus on or off,
           E-RECAP pruning on or off (unpruned: the whole context), with retrieved tokens and retrieval ms

and on the AirSim drone intersection (runs/airsim_k8.yaml: the airsim stack on brace-airsim-peer, the
protocol-level AirSim, one per row):

  airsim2  K = 8: No BRACE vs BRACE + E-RECAP with the safety proxies (Tables 2 and 24 shape: near-misses,
           collisions, minimum distance)
  airsim25 trigger audit of BRACE + E-RECAP over a replanning-interval sweep (Table 25 shape)
  airsim26 K = 2, 4, 8: No BRACE vs BRACE + E-RECAP (Table 26 shape)

Writes <out>/<table>.md, .csv and .png and <out>/reproduce.md (all tables),
prints each table as it finishes. Rows run one after another (one planner, two
cores: side by side in one run). Example, the subset in docs/results/warehouse_history.md:

    python bench/reproduce.py --tables table2 --episodes 4
    python bench/reproduce.py --tables airsim2 --episodes 2

Exits 0 when every table was written (no target). Quick mode (`--quick`, what `make test` runs): Table 2 only (No
BRACE and BRACE + E-RECAP), one episode per row of K = 2 agents cut off after 4 steps (a row's own settings, such as
Table 5's K, still win); --tables and --episodes given explicitly still win.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from report import save_plot, write_csv

from brace_audit.audit_report import markdown, summary, trigger_rows
from brace_bringup.run_config import RunConfig
from brace_bringup.run_plan import plan
from brace_bringup.runner import free_ports, run_variant
from brace_common.vocabulary import TriggerKind

OUT = Path(__file__).parent / "out" / "reproduce"
AIRSIM_RUN = "airsim_k8"  # installed run configurations are named


@dataclass
class Row:
    """One row: a label, the variant of variants.yaml it runs, and its overrides per node."""

    label: str
    variant: str
    extra: dict[str, dict] = field(default_factory=dict)


@dataclass
class Table:
    """A table: its rows, the columns it prints, and the metric its plot shows."""

    name: str
    title: str
    rows: list[Row]
    columns: list[str]
    plot: str = "slo_violation"
    config: str | None = None    # the run configuration of the rows (a name or a file; None: --config)
    world: str = "embedded_sim"  # the node whose episodes and agents the rows set


T2_COLUMNS = ["label", "episodes", "success", "tokens_before", "tokens_after", "token_reduction", "latency_p50_ms",
              "latency_p95_ms", "slo_ms", "slo_violation", "calls_per_episode", "oracle_agreement"]
T15_COLUMNS = ["label", "episodes", "success", "oracle_agreement", "tokens_after", "token_reduction",
               "latency_p95_ms", "slo_violation", "calls_per_episode", "churn"]
T6_COLUMNS = ["label", "episodes", "success", "delivered", "path_efficiency", "calls_per_episode", "latency_p95_ms",
              "slo_violation", "near_misses", "collisions"]
T30_COLUMNS = ["label", "episodes", "calls_per_episode", "changes_per_episode", "churn", "deadlocks_per_episode",
               "loops_per_episode", "coordination_wait", "loop_steps", "delivered", "success", "slo_violation"]
T20_COLUMNS = ["label", "episodes", "success", "tokens_after", "retrieved_tokens", "retrieve_ms", "latency_p95_ms",
               "slo_violation", "oracle_agreement"]
T5_COLUMNS = ["label", "num_agents", "episodes", "tokens_before", "tokens_after", "latency_p50_ms", "latency_p95_ms",
              "slo_violation", "success", "oracle_agreement"]

A2_COLUMNS = ["label", "episodes", "success", "delivered", "tokens_before", "tokens_after", "token_reduction",
              "latency_p50_ms", "latency_p95_ms", "slo_ms", "slo_violation", "calls_per_episode", "oracle_agreement",
              "near_misses", "collisions", "min_distance_m"]
A25_COLUMNS = ["label", "episodes", "triggers", "admitted", "suppressed", "share_periodic", "share_failure",
               "share_drift", "share_hazard", "share_deadlock", "calls_per_min", "slo_violation", "success"]
A26_COLUMNS = ["label", "num_agents", *A2_COLUMNS[1:]]

# Under a row's own settings. Steps of 0.5 s: on a busy machine the stack's subscriptions can match after the
# simulator's readiness wait, and 4 steps of 10 ms once ended an episode before its first call.
QUICK = {"embedded_sim": {"num_agents": 2, "max_steps": 4, "step_period_s": 0.5}}
HARD = {"embedded_sim": {"grasp_failure": 0.3, "drift": 0.05}}
DEADLOCK_PRONE = {"embedded_sim": {"num_agents": 6, "task_docks": 1}}  # six agents, one dock: they queue and block


def _merge(*layers: dict[str, dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for layer in layers:
        for node, values in layer.items():
            out.setdefault(node, {}).update(values)
    return out


def tables() -> dict[str, Table]:
    """The five tables and their rows."""
    matched = {"brace_controller": {"adaptive_budget": False}}  # Table 15 compares reducers at one B
    t15 = [Row(v, v, matched) for v in ("open_loop", "frozen_plan", "no_brace", "brace", "no_brace_erecap",
                                        "brace_erecap", "brace_erecap_table8", "random", "recency", "summary")]
    t30 = [Row(f"delta={d} omega={o} w={w}", "brace_erecap", _merge(
        DEADLOCK_PRONE, {"brace_controller": {"cooldown_steps": d, "commit_steps": o},
                         "trigger_monitor": {"deadlock_window": w, "deadlock_threshold": min(3, w)}}))
           for d, o, w in ((0, 0, 3), (3, 2, 3), (6, 4, 3), (3, 2, 6))]
    # GiG on (3, 2, 3): the loop trigger, the loop warning and Bounded Lookahead through the warehouse's service
    t30.append(Row("delta=3 omega=2 w=3 + GiG", "brace_erecap", _merge(
        DEADLOCK_PRONE, {"brace_controller": {"cooldown_steps": 3, "commit_steps": 2},
                         "trigger_monitor": {"deadlock_window": 3, "deadlock_threshold": 3, "loop_detection": True},
                         "erecap_planner": {"memory_modules": ["state_graph", "lookahead"]}})))
    t5 = [Row(f"K={k} {name}", "brace_erecap" if comp == "erecap" else "brace",
              _merge({"embedded_sim": {"num_agents": k}, "erecap_planner": {"compressor": comp}}))
          for k in (1, 2, 4, 8) for name, comp in (("unpruned", "none"), ("E-RECAP", "erecap"), ("random", "random"))]
    small = {"brace_controller": {"budget_profile": "embedded_small", "adaptive_budget": False}}
    rag = {"erecap_planner": {"memory_modules": ["rag_static"],
                              "memory_corpus_file": "package://sim_bridges/config/warehouse_corpus.yaml"}}
    t20 = [Row(f"RAG {'on' if on else 'off'}, prune {'on' if comp == 'erecap' else 'off'}", "brace_erecap",
               _merge(small, rag if on else {}, {"erecap_planner": {"compressor": comp}}))
           for on in (False, True) for comp in ("none", "erecap")]
    a25 = [Row(f"periodic every {n} steps", "brace_erecap", {"trigger_monitor": {"periodic_interval_steps": n}})
           for n in (5, 10, 20)]
    a26 = [Row(f"K={k} {label}", variant, {"airsim_bridge": {"num_agents": k}})
           for k in (2, 4, 8) for label, variant in (("No BRACE", "no_brace"), ("BRACE + E-RECAP", "brace_erecap"))]
    airsim = {"config": AIRSIM_RUN, "world": "airsim_bridge"}
    return {
        "airsim2": Table("airsim2", "AirSim intersection, K = 8: No BRACE vs BRACE + E-RECAP with safety proxies "
                         "(paper Tables 2 and 24 shape)",
                         [Row("No BRACE", "no_brace"), Row("BRACE + E-RECAP", "brace_erecap")], A2_COLUMNS, **airsim),
        "airsim25": Table("airsim25", "AirSim intersection, K = 8: trigger audit over the replanning interval "
                          "(paper Table 25 shape)", a25, A25_COLUMNS, plot="calls_per_min", **airsim),
        "airsim26": Table("airsim26", "AirSim intersection: K = 2, 4, 8 (paper Table 26 shape)", a26, A26_COLUMNS,
                          plot="slo_violation", **airsim),
        "table2": Table("table2", "No BRACE vs BRACE + E-RECAP (paper Table 2 shape)",
                        [Row("No BRACE", "no_brace"), Row("BRACE + E-RECAP", "brace_erecap")],
                        T2_COLUMNS),
        "table15": Table("table15", "Every variant at one matched budget B, adaptive budget off (paper Table 15 shape)",
                         t15, T15_COLUMNS, plot="success"),
        "table6": Table("table6", "Harder world: grasp slips 0.3, drift 0.05 (paper Table 6 shape)",
                        [Row("open loop", "open_loop", HARD), Row("frozen plan", "frozen_plan", HARD),
                         Row("No BRACE", "no_brace", HARD),
                         Row("BRACE + E-RECAP", "brace_erecap", HARD)], T6_COLUMNS, plot="success"),
        "table30": Table("table30", "delta / omega / w sweep, deadlock-prone world K = 6 (paper Table 30 shape)",
                         t30, T30_COLUMNS, plot="churn"),
        "table20": Table("table20", "RAG x Prune at B = 128 (paper Table 20 shape)", t20, T20_COLUMNS,
                         plot="retrieve_ms"),
        "table5": Table("table5", "Scaling with K: unpruned vs E-RECAP vs random at the same B (paper Table 5 shape)",
                        t5, T5_COLUMNS, plot="latency_p95_ms"),
    }


def row_metrics(label: str, records, agents: int) -> dict:
    """The summary row, the trigger audit and the sweep's deadlock count."""
    out = {"label": label, "num_agents": agents, **trigger_rows(records), **summary(records)}
    for kind, column in ((TriggerKind.DEADLOCK, "deadlocks_per_episode"), (TriggerKind.LOOP, "loops_per_episode")):
        raised = sum(d.trigger.kind == kind for _, d in records.decisions)
        out[column] = raised / out["episodes"] if out["episodes"] else math.nan
    return out


def plot(plt, table: Table, rows: list[dict]):
    """A bar chart of the table's headline metric."""
    fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(rows) + 2), 4))
    values = [r.get(table.plot, math.nan) for r in rows]
    ax.bar(range(len(rows)), [0 if isinstance(v, float) and math.isnan(v) else v for v in values])
    ax.set_xticks(range(len(rows)), [r["label"] for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(table.plot)
    ax.set_title(table.title, fontsize=9)
    fig.tight_layout()
    return fig


def run_table(cfg: RunConfig, table: Table, episodes: int, out: Path, quiet: bool,
              base: dict[str, dict] | None = None, only: tuple[str, ...] = ()) -> str:
    """Run every row (those whose label holds one of `only`, when given; on top of `base`, the quick mode's
    settings); write its markdown, CSV and PNG; the markdown."""
    rows = []
    folder = out / table.name
    shutil.rmtree(folder, ignore_errors=True)  # a rerun replaces the table's earlier rows (and their bags)
    for i, row in enumerate(table.rows):
        if only and not any(part in row.label for part in only):
            continue
        extra = _merge({table.world: (base or {}).get(table.world, {})}, row.extra,
                       {table.world: {"episodes": episodes}})
        started = time.monotonic()
        row_folder = folder / f"{i:02d}_{row.variant}"
        # the row's processes (its simulator, if it has one) start and stop with it
        records, _bag = run_variant(plan(cfg, row.variant, row_folder, extra, free_ports()), quiet)
        records.variant = row.label
        agents = int(cfg.parameters(row.variant, extra)[table.world].get("num_agents", 4))
        rows.append(row_metrics(row.label, records, agents))
        print(f"  {table.name} row {i + 1}/{len(table.rows)} '{row.label}': {time.monotonic() - started:.0f} s",
              file=sys.stderr)
    text = f"### {table.title}\n\n{markdown(rows, table.columns)}"
    (out / f"{table.name}.md").write_text(text)
    write_csv(rows, out / f"{table.name}.csv")
    save_plot(out / f"{table.name}.png", lambda plt: plot(plt, table, rows), dpi=120)
    return text


def main() -> int:
    """Run the chosen tables."""
    all_tables = tables()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", nargs="+", choices=list(all_tables), help="default: all")
    ap.add_argument("--episodes", type=int, help="seeded episodes per row (seeds 0..N-1; default 3)")
    ap.add_argument("--config", default="variants", help="run configuration: an installed one's name or a file")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--quiet", action="store_true", help="no per-step progress line")
    ap.add_argument("--quick", action="store_true", help="smoke run (see the module docstring)")
    ap.add_argument("--rows", nargs="+", default=(), help="only the rows whose label holds one of these texts")
    args = ap.parse_args()
    args.tables = args.tables or (["table2"] if args.quick else list(all_tables))
    if args.episodes is None:
        args.episodes = 1 if args.quick else 3
    args.out.mkdir(parents=True, exist_ok=True)
    parts = []
    for name in args.tables:
        started = time.monotonic()
        table = all_tables[name]
        cfg = RunConfig.load(table.config or args.config)
        text = run_table(cfg, table, args.episodes, args.out, args.quiet, QUICK if args.quick else None,
                         tuple(args.rows))
        print(f"\n{text}\n({name}: {time.monotonic() - started:.0f} s, {args.episodes} episodes per row)\n", flush=True)
        parts.append(text)
    (args.out / "reproduce.md").write_text("\n".join(parts))
    print(f"tables in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
