#!/usr/bin/env python3
"""A fleet on one planner server: R robots, each its own namespace and control stack, share one llama.cpp server.

For each fleet size R (--fleet-sizes, default 1 2 4 8) and variant (No BRACE, BRACE + E-RECAP): one llama.cpp C++
`llama-server` on the warehouse GGUF (adapter merged, matrices in Q8_0: --weights) with R parallel slots
(continuous batching; each slot keeps its previous prompt for prefix reuse), and R `brace-run fleet --namespace
/robot_<i>` processes started at once. Each robot is make demo's stack: its own warehouse (K = 4 agents, one
seeded episode, a seed per robot), trigger monitor, BRACE controller, planner node (backend openai: the context
rendered and compressed to B_t on the robot, the plan decoded by the server under the action schema's grammar) and
audit bag. Everything shares this
machine's cores; on a real fleet each robot has its own. The robots run at a lower CPU priority (`--robot-nice`, 10)
so that the cores are the server's first: a robot's own work (its world, nodes and compression) takes what the
server leaves, and its time still counts in its calls' latency.

Per cell, from the robots' bags and summaries and the server's /metrics:
- per-robot SLO violation (mean and worst robot), success, deliveries, calls, call latency P50 / P95;
- time to first token P95 (the calls' `request` + `first_token` phases: the server's queue and prefill);
- prompt tokens the server took per call, its prompt and decode throughput (tokens/s over the cell's wall time) and
  its prefix-cache hits (prompt tokens reused from a slot's cache / all prompt tokens it took), from its /metrics.

Target: with 4 robots BRACE + E-RECAP's worst per-robot SLO violation <= 5% where No BRACE's mean
is > 50%. Writes <out>/fleet_load.csv (one row per cell), fleet_load_robots.csv (one row per robot) and
fleet_load.png (per-robot SLO violation and success against R); exits 1 when a target is missed.
Needs llama-server (scripts/build_llama_server.sh; make bench-setup builds it). Run inside the workspace:
`source scripts/env.sh && python bench/fleet_load.py --max-steps 40` (about 40 min on 2 cores).

Quick mode (`--quick`, what `make test` runs): 2 robots on `transformers serve` (in requirements.txt; one request at
a time), episodes of 4 steps; checks that every robot ran its episode through the shared server, not the targets.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
from report import cpu_report, describe_cpu, fill_defaults, print_written, report_checks, save_plot, write_csv

from erecap_planner.gguf_types import WEIGHT_TYPES
from erecap_planner.server_load import samples

OUT = Path(__file__).resolve().parent / "out"
VARIANTS = ("no_brace", "brace_erecap")
LABELS = {"no_brace": "No BRACE", "brace_erecap": "BRACE + E-RECAP"}
ADAPTER = "package://sim_bridges/models/smollm2-135m-instruct-warehouse-lora.safetensors"
ENGINE_SETTINGS = {
    # llama-server: the GGUF's chat template, plans under its JSON-schema grammar
    "llama_server": {},
    # transformers serve: the locally templated prompt, free JSON validated here (demo_server.yaml)
    "transformers": {"endpoint": "completions", "structured_output": "none"},
}
"""erecap_planner parameters each engine needs beyond runs/fleet.yaml."""
TARGET_ROBOTS = 4
TARGET_BRACE_VIOLATION = 0.05
TARGET_NO_BRACE_VIOLATION = 0.50
ROBOT_TIMEOUT_S = 1800.0


def server_metrics(base_url: str) -> dict[str, float]:
    """llama-server's Prometheus counters and gauges (GET /metrics), by name without the `llamacpp:` prefix; {} for
    a server without them."""
    try:
        with urllib.request.urlopen(base_url.removesuffix("/v1") + "/metrics", timeout=10) as reply:
            text = reply.read().decode()
    except OSError:
        return {}
    return {name.removeprefix("llamacpp:"): value for name, value in samples(text).items()
            if name.startswith("llamacpp:")}


def call_records(bag: Path) -> list:
    """The ReplanCall messages of one robot's bag."""
    from brace_msgs.msg import ReplanCall
    from rclpy.serialization import deserialize_message

    from brace_audit.bag import read_bag

    return [deserialize_message(m.data, ReplanCall) for m in read_bag(bag).messages if m.type.endswith("ReplanCall")]


def first_token_ms(call) -> float:
    """The server's queue and prefill for one call: its request and first_token phases (ms)."""
    from brace_msgs.msg import PhaseTiming

    return sum(p.duration_ms for p in call.phases if p.phase in (PhaseTiming.PHASE_REQUEST, PhaseTiming.PHASE_FIRST_TOKEN))


def run_robots(args, variant: str, robots: int, url: str, folder: Path) -> list[dict]:
    """Start `robots` brace-runs of runs/fleet.yaml at once, each in its namespace; wait for all; one row per robot."""
    sets = {"erecap_planner.server_url": url, **{f"erecap_planner.{k}": v for k, v in
                                                 ENGINE_SETTINGS[args.engine].items()}}
    if args.max_steps:
        sets["embedded_sim.max_steps"] = args.max_steps
    children = []
    for i in range(robots):
        robot_sets = {**sets, "embedded_sim.seed": args.seed + i}
        command = ["nice", "-n", str(args.robot_nice), sys.executable, "-m", "brace_bringup.runner", "fleet",
                   "--variants", variant, "--quiet", "--namespace", f"/robot_{i}", "--output", str(folder / f"robot_{i}"),
                   *(f"--set={k}={v}" for k, v in robot_sets.items())]
        log = (folder / f"robot_{i}.log").open("wb")
        children.append((i, subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT), log))
    try:
        return [robot_row(variant, robots, folder, i, child) for i, child, _ in children]
    finally:  # a robot that failed stops the cell: the others are not left running
        for _, child, log in children:
            if child.poll() is None:
                child.kill()
                child.wait()
            log.close()


def robot_row(variant: str, robots: int, folder: Path, i: int, child: subprocess.Popen) -> dict:
    """Wait for robot `i`'s brace-run; its row from its summary and bag (RuntimeError with its log when it failed)."""
    try:
        code = child.wait(ROBOT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        code = child.wait()
    runs = sorted((folder / f"robot_{i}").glob("*/summary.csv"))
    if code != 0 or not runs:
        tail = (folder / f"robot_{i}.log").read_text(errors="replace")[-1500:]
        raise RuntimeError(f"robot_{i} ({variant}, {robots} robots) exited with {code}:\n{tail}")
    with runs[-1].open() as f:
        summary = next(csv.DictReader(f))
    calls = call_records(runs[-1].parent / variant / "bag")
    return {"variant": variant, "fleet_size": robots, "namespace": f"/robot_{i}", "success": float(summary["success"]),
            "delivered": summary["delivered"], "calls": len(calls),
            "slo_violation": float(summary["slo_violation"]) if calls else math.nan,
            "latency_p50_ms": float(summary["latency_p50_ms"]), "latency_p95_ms": float(summary["latency_p95_ms"]),
            "first_token_p95_ms": float(np.percentile([first_token_ms(c) for c in calls], 95)) if calls else math.nan,
            "tokens_after": float(summary["tokens_after"]),
            "server_prompt_tokens": sum(c.server_prompt_tokens for c in calls),
            "server_completion_tokens": sum(c.server_completion_tokens for c in calls),
            "unanswered": int(summary["unanswered"]), "deadline_misses": int(summary["deadline_misses"]),
            "run_folder": str(runs[-1].parent)}


def cell(args, variant: str, robots: int, gguf_or_folder: Path) -> tuple[dict, list[dict]]:
    """One (variant, R) cell: a fresh server with R slots, R robots at once; its row and its robots' rows."""
    from erecap_planner.local_server import LocalServer

    folder = args.out / "fleet_load" / f"{variant}_{robots}"
    folder.mkdir(parents=True, exist_ok=True)
    parallel = (args.slots or robots) if args.engine == "llama_server" else 1
    with LocalServer(gguf_or_folder, engine=args.engine, parallel=parallel, threads=args.server_threads,
                     log_path=folder / "server.log") as server:
        started = time.monotonic()
        robot_rows = run_robots(args, variant, robots, server.base_url, folder)
        wall_s = time.monotonic() - started
        metrics = server_metrics(server.base_url)
    # the server's own counts: every prompt it took (a call cancelled at its hard deadline too), computed or reused
    computed, cached = metrics.get("prompt_tokens_total", math.nan), metrics.get("prompt_tokens_cached_total", math.nan)
    calls = sum(r["calls"] for r in robot_rows)
    violations = [r["slo_violation"] for r in robot_rows if r["calls"]]
    row = {"variant": variant, "fleet_size": robots, "engine": args.engine, "slots": parallel,
           "slo_violation_mean": float(np.mean(violations)) if violations else math.nan,
           "slo_violation_worst": max(violations, default=math.nan),
           "success_mean": float(np.mean([r["success"] for r in robot_rows])),
           "calls": calls, "latency_p95_ms_worst": max(r["latency_p95_ms"] for r in robot_rows),
           "first_token_p95_ms_worst": max(r["first_token_p95_ms"] for r in robot_rows),
           "prompt_tokens_per_call": (computed + cached) / calls if calls else math.nan,
           "unanswered": sum(r["unanswered"] for r in robot_rows), "wall_s": round(wall_s, 1),
           "server_prompt_tok_s": computed / wall_s,
           "server_decode_tok_s": metrics.get("tokens_predicted_total", math.nan) / wall_s,
           "prefix_cache_hits": cached / (computed + cached) if computed + cached > 0 else math.nan,
           "busy_slots_per_decode": metrics.get("n_busy_slots_per_decode", math.nan)}
    return row, robot_rows


def draw(rows: list[dict], caption: str):
    """Per-robot SLO violation (mean and worst robot) and success against the fleet size, per variant."""
    def figure(plt):
        fig, (ax_v, ax_s) = plt.subplots(1, 2, figsize=(10, 3.8))
        for variant in VARIANTS:
            mine = sorted((r for r in rows if r["variant"] == variant), key=lambda r: r["fleet_size"])
            if not mine:
                continue
            sizes = [r["fleet_size"] for r in mine]
            line = ax_v.plot(sizes, [100 * r["slo_violation_mean"] for r in mine], marker="o",
                             label=f"{LABELS[variant]} (mean)")[0]
            ax_v.plot(sizes, [100 * r["slo_violation_worst"] for r in mine], marker="v", linestyle=":",
                      color=line.get_color(), label=f"{LABELS[variant]} (worst robot)")
            ax_s.plot(sizes, [100 * r["success_mean"] for r in mine], marker="o", label=LABELS[variant])
        ax_v.axhline(100 * TARGET_BRACE_VIOLATION, color="k", linestyle="--", linewidth=1, label="5% target")
        for ax, label in ((ax_v, "SLO violation per robot (%)"), (ax_s, "success per robot (%)")):
            ax.set_xlabel("robots sharing one server")
            ax.set_ylabel(label)
            ax.set_xscale("log", base=2)
            ax.set_ylim(-3, 103)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        fig.suptitle(caption, fontsize=8)
        fig.tight_layout()
        return fig
    return figure


def main() -> int:
    """Measure every cell, print the tables, write the CSVs and PNG; the exit status of the targets."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fleet-sizes", type=int, nargs="+", help="robots sharing the server (default 1 2 4 8; --quick 2)")
    ap.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    ap.add_argument("--engine", choices=tuple(ENGINE_SETTINGS), help="default llama_server (--quick transformers)")
    ap.add_argument("--weights", default="q8_0", choices=tuple(WEIGHT_TYPES),
                    help="the GGUF's matrices (llama_server): q8_0 decodes ~1.5x faster than f16 on a CPU")
    ap.add_argument("--max-steps", type=int, help="steps per episode (default the demo's 60; --quick 4)")
    ap.add_argument("--slots", type=int, default=0,
                    help="llama-server's parallel slots (0 = one per robot; fewer queue the rest, first come first served)")
    ap.add_argument("--server-threads", type=int, default=0, help="the server's CPU threads (0 = its default)")
    ap.add_argument("--seed", type=int, default=0, help="robot i's warehouse seed is seed + i")
    ap.add_argument("--robot-nice", type=int, default=10, help="the robots' CPU priority below the server's (nice)")
    ap.add_argument("--quick", action="store_true", help="2 robots on transformers serve, 4 steps")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    fill_defaults(args, {"fleet_sizes": [2], "engine": "transformers", "max_steps": 4},
                  {"fleet_sizes": [1, 2, 4, 8], "engine": "llama_server", "max_steps": 0})
    from brace_common.domain_leases import fresh_domain
    from erecap_planner.local_server import served_model

    os.environ.setdefault("ROS_DOMAIN_ID", str(fresh_domain()))  # the robots' DDS domain: this run's own
    cpu = cpu_report()
    caption = f"{describe_cpu(cpu)}; server {args.engine}" + (f" ({args.weights})" if args.engine != "transformers" else "")
    print(f"CPU: {caption}", flush=True)
    model = served_model(args.engine, "smollm2-135m-instruct", ADAPTER, args.weights)
    rows, robot_rows = [], []
    for robots in args.fleet_sizes:
        for variant in args.variants:
            row, mine = cell(args, variant, robots, model)
            rows.append(row)
            robot_rows += mine
            print(f"{LABELS[variant]}, {robots} robots: SLO violation mean {row['slo_violation_mean']:.1%} worst "
                  f"{row['slo_violation_worst']:.1%}, success {row['success_mean']:.0%}, {row['wall_s']:.0f} s",
                  flush=True)
    slots = f"{args.slots} slots" if args.slots else "a slot per robot"
    print(f"\n## One {args.engine} server, R robots, {slots} ({caption})\n")
    print("| variant | R | SLO violation mean / worst | success | calls | P95 (s, worst robot) | "
          "first token P95 (s) | prompt tokens / call | server prompt / decode tok/s | prefix-cache hits |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {LABELS[r['variant']]} | {r['fleet_size']} | {r['slo_violation_mean']:.1%} / "
              f"{r['slo_violation_worst']:.1%} | {r['success_mean']:.0%} | {r['calls']} | "
              f"{r['latency_p95_ms_worst'] / 1000:.1f} | {r['first_token_p95_ms_worst'] / 1000:.1f} | "
              f"{r['prompt_tokens_per_call']:.0f} | {r['server_prompt_tok_s']:.0f} / {r['server_decode_tok_s']:.1f} | "
              f"{r['prefix_cache_hits']:.0%} |")
    print_written(write_csv(rows, args.out / "fleet_load.csv"), write_csv(robot_rows, args.out / "fleet_load_robots.csv"),
                  save_plot(args.out / "fleet_load.png", draw(rows, caption)))
    checks = [("every robot's episode ran through the shared server",
               all(r["calls"] > 0 for r in robot_rows),
               f"{sum(r['calls'] > 0 for r in robot_rows)}/{len(robot_rows)} robots made calls")]
    at = {r["variant"]: r for r in rows if r["fleet_size"] == TARGET_ROBOTS}
    if not args.quick and len(at) == len(VARIANTS):
        checks += [(f"{TARGET_ROBOTS} robots: BRACE + E-RECAP's worst per-robot SLO violation <= "
                    f"{TARGET_BRACE_VIOLATION:.0%}", at["brace_erecap"]["slo_violation_worst"] <= TARGET_BRACE_VIOLATION,
                    f"{at['brace_erecap']['slo_violation_worst']:.1%}"),
                   (f"{TARGET_ROBOTS} robots: No BRACE's SLO violation > {TARGET_NO_BRACE_VIOLATION:.0%}",
                    at["no_brace"]["slo_violation_mean"] > TARGET_NO_BRACE_VIOLATION,
                    f"{at['no_brace']['slo_violation_mean']:.1%}")]
    return report_checks(checks)


if __name__ == "__main__":
    sys.exit(main())
