#!/usr/bin/env python3
"""The graph fuzz harness at full size: every node its own process, hostile input, then a real run.

    python bench/fuzz_graph.py [--per-topic 10000] [--goals 100] [--seed 0] [--skip topics overlays scenarios]
                               [--quick]

Prints the table of attacks (sent, malformed by the nodes' own checks, counted on /diagnostics) and outcomes
(crashes, hangs, the held episode's plans, calls past their hard deadline by more than 250 ms, goal answers), then
the overlay-parameter attack (every node of the sim and twin stacks started with its files plus one that breaks a
parameter: refused = exit 2 naming it), then the scenario attacks (brace_system_tests.fuzz_scenarios: a protected context
flood against the planner's deadline, an /act server that drips against the executor, a recorder killed mid-episode
against brace-audit, the CAN twin killed under the arm node; fuzz_untrusted: a server's respelled plan, 40,000-entity
world states with a repeated id, hostile and combinatorial world info; fuzz_launch: a run whose world exits and one
a node cannot start); writes bench/out/fuzz_graph.csv; exits 1 when a target is missed.
`source scripts/env.sh` first.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from report import cpu_report, describe_cpu, write_csv

from brace_common.domain_leases import fresh_domain
from brace_system_tests.fuzz import OVERRUN_MS, run
from brace_system_tests.fuzz_parameters import default_cases, run_overlays
from brace_system_tests.fuzz_scenarios import run_scenarios

OUT = Path(__file__).resolve().parent / "out"


def main() -> int:
    """Run the harness, print and write the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-topic", type=int, default=10_000)
    ap.add_argument("--goals", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip", nargs="*", default=[], choices=["topics", "overlays", "scenarios"])
    ap.add_argument("--out", type=Path, default=OUT / "fuzz_graph.csv", help="the CSV table")
    ap.add_argument("--quick", action="store_true", help="200 per topic, 40 goals, one overlay case per node, "
                    "the scenarios with short windows")
    args = ap.parse_args()
    if args.quick:
        args.per_topic, args.goals = 200, 40
    started = time.monotonic()
    rows, ok = [], True
    if "topics" not in args.skip:
        with tempfile.TemporaryDirectory(prefix="fuzz_graph_") as tmp:
            rows, ok = topic_attacks(Path(tmp), args)
    if "overlays" not in args.skip:
        with tempfile.TemporaryDirectory(prefix="fuzz_overlays_") as tmp:
            overlays, refused = overlay_attack(Path(tmp), per_node=1 if args.quick else 2)
        rows += overlays
        ok = ok and refused
    if "scenarios" not in args.skip:
        with tempfile.TemporaryDirectory(prefix="fuzz_scenarios_") as tmp:
            scenarios, held = scenario_attacks(Path(tmp), args.quick)
        rows += scenarios
        ok = ok and held
    print(f"\nCPU: {describe_cpu(cpu_report())}; {time.monotonic() - started:.0f} s; targets met: {'yes' if ok else 'NO'}")
    write_csv(rows, args.out)
    return 0 if ok else 1


def overlay_attack(folder: Path, per_node: int) -> tuple[list[dict], bool]:
    """Every node started with its files plus an overlay breaking one parameter; rows and whether all refused."""
    outcomes = run_overlays(default_cases(per_node), folder, domain=fresh_domain())
    print(f"\n{'overlay parameter file (node: parameter=value)':<60} {'exit':>5} {'named':>6}  outcome")
    rows = []
    for o in outcomes:
        print(f"{o.case.label[:60]:<60} {str(o.returncode):>5} {str(o.named):>6}  {o.note}")
        rows.append({"attack": f"overlay {o.case.parameter}={o.case.value!r}", "node": o.case.node.name, "sent": 1,
                     "malformed": 1, "counted": int(o.refused), "uncounted": int(not o.refused), "note": o.note})
    for o in outcomes:
        for stacks in o.hangs:
            print(f"\n--- {o.case.label}: still running at the limit, its stacks\n{stacks}")
        if not o.refused or o.crashes:
            print(f"\n--- {o.case.label}: the end of its output\n{o.output}")
    return rows, all(o.refused for o in outcomes)


def scenario_attacks(folder: Path, quick: bool) -> tuple[list[dict], bool]:
    """The scenario attacks, each against its node's executable; rows and whether every one held."""
    results = run_scenarios(folder, quick=quick)
    print(f"\n{'scenario attack':<60} {'node':<17} {'sent':>5} {'counted':>8}  ok  outcome")
    for r in results:
        print(f"{r.attack[:60]:<60} {r.node:<17} {r.sent:>5} {f'{r.counted}/{r.expected}':>8}  "
              f"{'yes' if r.ok else 'NO':<3} {r.outcome}")
    return [r.row for r in results], all(r.ok for r in results)


def topic_attacks(folder: Path, args) -> tuple[list[dict], bool]:
    """The sim stack under fuzzed topics and goals, then its held episode; rows and whether the targets held."""
    result = run(folder, args.per_topic, args.goals, args.seed)
    rows = [a.row for a in result.attacks]
    print(f"\n{'attack':<40} {'node':<18} {'sent':>7} {'malformed':>9} {'counted':>8} {'uncounted':>9}  note")
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
    return rows + [{"attack": "outcome", "node": "graph", "note": str({
        "crashed": result.crashed, "hung": result.hung, "goals": result.goals, "episodes": result.episodes,
        "episodes_with_plans": result.episodes_with_plans, "calls_over_deadline": result.calls_over_deadline,
        "over_deadline_under_attack": result.over_deadline_under_attack,
        "worst_overrun_ms": round(result.worst_overrun_ms, 1)})}], result.ok


if __name__ == "__main__":
    sys.exit(main())
