"""BRACE Table 32's shape for the real-robot tasks: episodes, success, duration, replans, latency tail, SLO, failures.

ROS-free: reads a variant's call records (brace_audit.audit.RunRecords)
and its world's episode rows (twin_world's RobotEpisode.as_row()).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path

from brace_audit.audit_report import summary
from brace_common.vocabulary import Failure

FAILURES = [f.label for f in Failure if f != Failure.NONE]


def row(records, episodes: Sequence[dict]) -> dict:
    """One variant's Table 32 row."""
    s = summary(records)
    n = len(episodes)
    out = {"variant": records.variant, "episodes": n,
           "success": sum(bool(e["success"]) for e in episodes) / n if n else math.nan,
           "duration_s": sum(e["duration_s"] for e in episodes) / n if n else math.nan,
           "calls_per_episode": s["calls"] / n if n else math.nan,
           "latency_p95_ms": s["latency_p95_ms"], "slo_violation": s["slo_violation"],
           "slips": sum(e["slips"] for e in episodes)}
    out.update({f"failure_{f}": sum(e.get(f"failure_{f}", 0) for e in episodes) for f in FAILURES})
    return out


def table(rows: Sequence[dict]) -> str:
    """The rows as a fixed-width text table."""
    head = (f"{'variant':<14}{'episodes':>9}{'success':>9}{'duration s':>11}{'replans/ep':>11}{'P95 ms':>9}"
            f"{'SLO viol.':>10}  failures (grasp / drop-slip / timeout / contact / executor)")
    lines = ["PickFruit on the PiPER CAN twin (BRACE Table 32 shape)", head]
    for r in rows:
        fails = " / ".join(str(r[f"failure_{f}"]) for f in FAILURES)
        p95 = f"{r['latency_p95_ms']:.0f}" if not math.isnan(r["latency_p95_ms"]) else "-"
        slo = f"{100 * r['slo_violation']:.1f}%" if not math.isnan(r["slo_violation"]) else "-"
        lines.append(f"{r['variant']:<14}{r['episodes']:>9}{100 * r['success']:>8.0f}%{r['duration_s']:>11.1f}"
                     f"{r['calls_per_episode']:>11.1f}{p95:>9}{slo:>10}  {fails}")
    return "\n".join(lines)


def report(runs: Sequence, episodes: Sequence[Sequence[dict]], folder: Path) -> str:
    """Table 32 of a run's variants; writes table32.csv and episodes.csv into `folder`."""
    rows = [row(r, e) for r, e in zip(runs, episodes, strict=True)]
    folder.mkdir(parents=True, exist_ok=True)
    if rows:
        with (folder / "table32.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    flat = [{"variant": r.variant, **e} for r, eps in zip(runs, episodes, strict=True) for e in eps]
    if flat:
        with (folder / "episodes.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(flat[0]))
            writer.writeheader()
            writer.writerows(flat)
    return table(rows)
