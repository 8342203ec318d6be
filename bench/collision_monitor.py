#!/usr/bin/env python3
"""Collision monitor decision cost: one command through the zones (CollisionMonitor.guard), per command.

Eight agents in a 40 m square, each commanded toward a random point at up to 5 m/s (a drone's cruise speed), the
others where they were sensed with their velocities: the intersection's K = 8. Rows: the three zones with the
approach's forward simulation at 0.1 s over 2 s (the stacks' settings), and the stop zone alone; a unicycle (the
Isaac bases) beside the holonomic drones; every zone the AirSim monitor has (the yield zone's right of way on each
command); the restore and yield zones' check of a drone its command does not move (the AirSim monitor runs it for
each such drone at every check). Timed per call with perf_counter_ns.

Target: P99 <= 1 ms per command (a motor command must not wait on the monitor). Writes
<out>/collision_monitor.{csv,png} (--out, default bench/out); exits 1 when the target is missed.
`source scripts/env.sh && python bench/collision_monitor.py [--commands N] [--avx2] [--quick]`.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path

from report import cpu_report, describe_cpu, print_written, reexec_as_avx2, save_plot, write_csv

from brace_audit.metrics import latency_summary
from brace_safety.monitor import CollisionMonitor, MonitorConfig, Sensed

OUT = Path(__file__).resolve().parent / "out"
AGENTS = [f"drone_{i}" for i in range(8)]
P99_TARGET_US = 1000.0
DRONE = dict(yaw_rate=0.0, braking_deceleration_mps2=3.0, reaction_time_s=0.4)   # params/airsim/airsim_monitor.yaml
SHIPPED = ["stop", "slowdown", "approach", "restore", "yield"]                     # its zones
ROWS = {
    "drones, stop + slowdown + approach": dict(zones=["stop", "slowdown", "approach"], **DRONE),
    "drones, stop only": dict(zones=["stop"], **DRONE),
    "bases (unicycle), stop + slowdown + approach": dict(zones=["stop", "slowdown", "approach"], yaw_rate=0.6),
    "drones, every zone (the right of way)": dict(zones=SHIPPED, **DRONE),
    "drones, restore and make way (held drones)": dict(zones=SHIPPED, restore_mps=3.0, **DRONE),
}


def bench(commands: int, zones: list[str], yaw_rate: float, restore_mps: float = 0.0, seed: int = 0,
          **growth: float) -> tuple[list[float], dict[str, int]]:
    """Per-command wall time (us) of `commands` commands (with `restore_mps`: restore checks), and how often each
    zone acted."""
    rng = random.Random(seed)
    monitor = CollisionMonitor(MonitorConfig(agents=AGENTS, zones=zones, hazard_distance_m=5.0,
                                             slowdown_distance_m=7.0, time_before_collision_s=2.0,
                                             simulation_time_step_s=0.1, footprint_radius_m=0.5,
                                             source_timeout_s=3600.0, **growth))
    times, acted = [], {}
    now = time.monotonic()
    for i in range(commands):
        if i % len(AGENTS) == 0:  # a new round of sensed states
            for agent in AGENTS:
                heading = rng.uniform(-math.pi, math.pi)
                speed = rng.uniform(0.0, 5.0)
                monitor.sense(agent, Sensed((rng.uniform(-20, 20), rng.uniform(-20, 20), -10.0), heading,
                                            (speed * math.cos(heading), speed * math.sin(heading), 0.0), now))
        agent = AGENTS[i % len(AGENTS)]
        linear = (rng.uniform(0.0, 5.0), 0.0, 0.0)
        t0 = time.perf_counter_ns()
        guarded = monitor.restore(agent, restore_mps, now) if restore_mps else monitor.guard(agent, linear, yaw_rate,
                                                                                             now)
        times.append((time.perf_counter_ns() - t0) / 1000.0)
        label = guarded.verdict.action.label if guarded is not None else "none"
        acted[label] = acted.get(label, 0) + 1
    return times, acted


def main() -> int:
    """Each row's decision cost, the table, CSV and PNG."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, help="commands per row (default 100,000; --quick 2,000)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2,000 commands per row")
    parser.add_argument("--avx2", action="store_true", help="re-run under the AVX2 dispatch caps (scripts/avx2.sh)")
    parser.add_argument("--out", type=Path, default=OUT, help="folder of the CSV and PNG")
    args = parser.parse_args()
    args.commands = args.commands or (2_000 if args.quick else 100_000)
    if args.avx2:
        reexec_as_avx2()
    args.out.mkdir(parents=True, exist_ok=True)
    cpu = cpu_report()
    print(f"\nCollision monitor decision per command ({args.commands} commands, K = 8; {describe_cpu(cpu)}; float64)")
    print(f"{'row':<46}{'P50 us':>9}{'P99 us':>9}{'max us':>9}{'target':>12}{'':>6}  acted")
    rows, samples = [], {}
    for name, spec in ROWS.items():
        times, acted = bench(args.commands, **spec)
        s = latency_summary(times)
        ok = s.p99 <= P99_TARGET_US
        samples[name] = times
        shares = ", ".join(f"{k} {v / len(times):.0%}" for k, v in sorted(acted.items()))
        print(f"{name:<46}{s.p50:>9.1f}{s.p99:>9.1f}{max(times):>9.1f}{'P99<=1ms':>12}{'ok' if ok else 'MISS':>6}  "
              f"{shares}")
        rows.append({"row": name, "count": s.count, "p50_us": s.p50, "p95_us": s.p95, "p99_us": s.p99,
                     "max_us": max(times), "target_p99_us": P99_TARGET_US, "met": ok, "acted": shares,
                     "cpu": cpu["cpu"], "torch_capability": cpu["torch_capability"],
                     "avx2_emulated": cpu["avx2_emulated"]})
    suffix = "_avx2" if args.avx2 else ""
    print_written(write_csv(rows, args.out / f"collision_monitor{suffix}.csv"),
                  save_plot(args.out / f"collision_monitor{suffix}.png", lambda plt: plot(plt, samples)))
    return 0 if all(r["met"] for r in rows) else 1


def plot(plt, samples: dict[str, list[float]]):
    """CDF of the decision cost per row, the target marked."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, times in samples.items():
        xs = sorted(times)
        ax.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], label=name)
    ax.axvline(P99_TARGET_US, color="k", linestyle="--", label="target P99 1 ms")
    ax.set_xscale("log")
    ax.set_xlabel("decision per command (us)")
    ax.set_ylabel("CDF")
    ax.legend(fontsize=8)
    ax.set_title("Collision monitor: one command through the zones (K = 8)")
    return fig


if __name__ == "__main__":
    sys.exit(main())
