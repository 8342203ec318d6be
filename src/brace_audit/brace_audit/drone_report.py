"""The AirSim drone intersection's table (paper Tables 2, 24 and 26 shape): K, success, drones landed, tokens,
latency tail, SLO violation, calls and the safety proxies (near-misses, collisions, minimum distance).

ROS-free: reads a variant's RunRecords (brace_audit.audit_report), live or
from the bag, and the drone world's metrics in its episodes (near_misses,
collisions, min_distance_m: brace_common.episode).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from brace_common.episode import COLLISIONS, MIN_DISTANCE_M, NEAR_MISSES

from .audit_report import RunRecords, metric_total, summary

TITLE = "AirSim drone intersection (paper Tables 2, 24 and 26 shape)"
CSV = "intersection.csv"


def row(records: RunRecords) -> dict:
    """One variant's row: the summary's columns and the safety proxies summed (minimum distance: the smallest)."""
    s = summary(records)
    episodes = records.episodes
    distances = [e.metrics[MIN_DISTANCE_M] for e in episodes if MIN_DISTANCE_M in e.metrics]
    return {"variant": records.variant, "num_agents": records.num_agents, "episodes": s["episodes"],
            "success": s["success"], "delivered": s["delivered"], "tokens_before": s["tokens_before"],
            "tokens_after": s["tokens_after"], "token_reduction": s["token_reduction"],
            "latency_p50_ms": s["latency_p50_ms"], "latency_p95_ms": s["latency_p95_ms"], "slo_ms": s["slo_ms"],
            "slo_violation": s["slo_violation"], "calls": s["calls"], "oracle_agreement": s["oracle_agreement"],
            "near_misses": metric_total(episodes, NEAR_MISSES), "collisions": metric_total(episodes, COLLISIONS),
            "min_distance_m": min(distances) if distances else math.nan}


def _number(value: float, spec: str, scale: float = 1.0, unit: str = "") -> str:
    return "-" if math.isnan(value) else f"{value * scale:{spec}}{unit}"


def table(rows: Sequence[dict]) -> str:
    """The rows as a fixed-width text table."""
    head = (f"{'K':>3}  {'variant':<14}{'episodes':>9}{'success':>9}{'landed':>8}{'tokens before':>14}"
            f"{'after':>7}{'P50 s':>7}{'P95 s':>7}{'SLO viol.':>10}{'calls':>7}{'near-misses':>12}"
            f"{'collisions':>11}{'min dist m':>11}")
    lines = [TITLE, head]
    for r in rows:
        lines.append(f"{r['num_agents']:>3}  {r['variant']:<14}{r['episodes']:>9}"
                     f"{_number(r['success'], '.0f', 100, '%'):>9}{r['delivered']:>8}"
                     f"{_number(r['tokens_before'], ',.0f'):>14}{_number(r['tokens_after'], ',.0f'):>7}"
                     f"{_number(r['latency_p50_ms'], '.1f', 1e-3):>7}{_number(r['latency_p95_ms'], '.1f', 1e-3):>7}"
                     f"{_number(r['slo_violation'], '.1f', 100, '%'):>10}{r['calls']:>7}"
                     f"{_number(r['near_misses'], '.0f'):>12}{_number(r['collisions'], '.0f'):>11}"
                     f"{_number(r['min_distance_m'], '.1f'):>11}")
    return "\n".join(lines)

