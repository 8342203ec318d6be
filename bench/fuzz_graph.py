#!/usr/bin/env python3
"""The graph fuzz harness at full size (issue 17): every node its own process, hostile input, then a real run.

    python bench/fuzz_graph.py [--per-topic 10000] [--goals 100] [--seed 0]

Prints the table of attacks (sent, malformed by the nodes' own checks, counted on /diagnostics) and outcomes
(crashes, hangs, the held episode's plans, calls past their hard deadline by more than 250 ms, goal answers),
writes bench/out/fuzz_graph.csv; exits 1 when a target is missed. `source scripts/env.sh` first.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from report import cpu_report, describe_cpu, write_csv

from brace_bringup.fuzz import OVERRUN_MS, run

OUT = Path(__file__).resolve().parent / "out"


def main() -> int:
    """Run the harness, print and write the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-topic", type=int, default=10_000)
    ap.add_argument("--goals", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fuzz_graph_") as tmp:
        result = run(Path(tmp), args.per_topic, args.goals, args.seed)
    rows = [a.row for a in result.attacks]
    print(f"\nCPU: {describe_cpu(cpu_report())}; {time.monotonic() - started:.0f} s")
    print(f"{'attack':<40} {'node':<18} {'sent':>7} {'malformed':>9} {'counted':>8} {'uncounted':>9}  note")
    for r in rows:
        print(f"{r['attack']:<40} {r['node']:<18} {r['sent']:>7} {r['malformed']:>9} {r['counted']:>8} "
              f"{r['uncounted']:>9}  {r['note']}")
    print(f"\nReplan goals: {result.goals}")
    print(f"crashed: {result.crashed or 'none'}; hung: {result.hung or 'none'}")
    print(f"under attack: {result.calls_under_attack} calls, {result.over_deadline_under_attack} past their hard "
          f"deadline by > {OVERRUN_MS:.0f} ms (worst {result.worst_overrun_under_attack_ms:.0f} ms)")
    print(f"held episode afterwards: {result.episodes_with_plans}/{result.episodes} episodes with plans, "
          f"{result.calls} calls, {result.calls_over_deadline} past their hard deadline by > {OVERRUN_MS:.0f} ms "
          f"(worst {result.worst_overrun_ms:.0f} ms)")
    print(f"targets met: {'yes' if result.ok else 'NO'}")
    write_csv(rows + [{"attack": "outcome", "node": "graph", "note": str({
        "crashed": result.crashed, "hung": result.hung, "goals": result.goals, "episodes": result.episodes,
        "episodes_with_plans": result.episodes_with_plans, "calls_over_deadline": result.calls_over_deadline,
        "over_deadline_under_attack": result.over_deadline_under_attack,
        "worst_overrun_ms": round(result.worst_overrun_ms, 1)})}], OUT / "fuzz_graph.csv")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
