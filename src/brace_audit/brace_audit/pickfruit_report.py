"""BRACE Table 32's shape for the real-robot tasks: episodes, success, duration, replans, latency tail, SLO, failures.

ROS-free: reads a variant's RunRecords (brace_audit.audit_report), live or
from the bag, and the task's metrics in its episodes (brace_common.episode):
PickFruit's duration_s, slips and failure_<category>; PushT's, with its two
failure columns of Table 32: episodes that ended with the goal error above
the threshold (every episode that did not succeed) and contact losses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from brace_common.episode import CONTACT_LOSSES, DURATION_S, FAILURE_PREFIX, GOAL_ERROR_M, SLIPS
from brace_common.vocabulary import Failure, TriggerKind

from .audit_report import RunRecords, metric_total, summary

FAILURES = [f.label for f in Failure if f != Failure.NONE]
TITLE = "PickFruit on the PiPER CAN twin (BRACE Table 32 shape)"
CSV = "table32.csv"
REAL_TITLE = "Real-robot tasks judged by the operator (BRACE Table 32 shape)"
REAL_CSV = "table32_real.csv"
PUSHT_TITLE = "PushT on the PiPER CAN twin (BRACE Table 32 shape)"
PUSHT_CSV = "table32_pusht.csv"


def _count(value: float) -> int:
    return 0 if math.isnan(value) else int(value)


def _recovered(episodes: Sequence, metric: str) -> int:
    """Faults counted under `metric` in the episodes that succeeded all the same (each one was recovered)."""
    return _count(metric_total([e for e in episodes if e.success], metric))


def row(records: RunRecords) -> dict:
    """One variant's Table 32 row."""
    s = summary(records)
    episodes = records.episodes
    n = len(episodes)
    out = {"variant": records.variant, "episodes": n, "success": s["success"],
           "duration_s": metric_total(episodes, DURATION_S) / n if n else math.nan,
           "calls_per_episode": s["calls"] / n if n else math.nan,
           "latency_p95_ms": s["latency_p95_ms"], "slo_violation": s["slo_violation"],
           "slips": _count(metric_total(episodes, SLIPS)), "slips_recovered": _recovered(episodes, SLIPS)}
    out.update({f"failure_{f}": _count(metric_total(episodes, FAILURE_PREFIX + f)) for f in FAILURES})
    return out


def pusht_row(records: RunRecords) -> dict:
    """One variant's PushT row: Table 32's columns with goal error > threshold (episodes), contact losses, the
    replans drift / contact-offset triggers caused per episode (the paper's PushT motivation subset) and the median
    goal error at the verdict."""
    out = row(records)
    episodes = records.episodes
    drift = sum(d.admitted and d.trigger.kind == TriggerKind.DRIFT for _, d in records.decisions)
    errors = sorted(e.metric(GOAL_ERROR_M) for e in episodes if not math.isnan(e.metric(GOAL_ERROR_M)))
    out.update({"goal_error_over_threshold": sum(not e.success for e in episodes),
                "contact_losses": _count(metric_total(episodes, CONTACT_LOSSES)),
                "contact_losses_recovered": _recovered(episodes, CONTACT_LOSSES),
                "drift_replans_per_episode": drift / len(episodes) if episodes else math.nan,
                "goal_error_m_p50": errors[len(errors) // 2] if errors else math.nan})
    del out["slips"], out["slips_recovered"]
    return out


def _common(rows: Sequence[dict]) -> tuple[str, list[str]]:
    """The columns every Table 32 shares: their header and each row's cells."""
    width = max([14, *(len(r["variant"]) + 1 for r in rows)])
    head = (f"{'variant':<{width}}{'episodes':>9}{'success':>9}{'duration s':>11}{'replans/ep':>11}{'P95 ms':>9}"
            f"{'SLO viol.':>10}")
    cells = []
    for r in rows:
        p95 = f"{r['latency_p95_ms']:.0f}" if not math.isnan(r["latency_p95_ms"]) else "-"
        slo = f"{100 * r['slo_violation']:.1f}%" if not math.isnan(r["slo_violation"]) else "-"
        cells.append(f"{r['variant']:<{width}}{r['episodes']:>9}{100 * r['success']:>8.0f}%{r['duration_s']:>11.1f}"
                     f"{r['calls_per_episode']:>11.1f}{p95:>9}{slo:>10}")
    return head, cells


def pusht_table(rows: Sequence[dict], title: str = PUSHT_TITLE) -> str:
    """PushT rows as a fixed-width text table: Table 32's two PushT failure columns and the median goal error."""
    head, cells = _common(rows)
    lines = [title, f"{head}{'goal err>thr':>13}{'contact loss (recovered)':>25}{'drift/ep':>9}{'goal err m':>11}"]
    for r, start in zip(rows, cells, strict=True):
        err = f"{r['goal_error_m_p50']:.3f}" if not math.isnan(r["goal_error_m_p50"]) else "-"
        drift = f"{r['drift_replans_per_episode']:.1f}" if not math.isnan(r["drift_replans_per_episode"]) else "-"
        losses = f"{r['contact_losses']} ({r['contact_losses_recovered']})"
        lines.append(f"{start}{r['goal_error_over_threshold']:>13}{losses:>25}{drift:>9}{err:>11}")
    return "\n".join(lines)


def table(rows: Sequence[dict], title: str = TITLE) -> str:
    """The rows as a fixed-width text table under `title`."""
    head, cells = _common(rows)
    lines = [title, f"{head}{'slips (recovered)':>18}  failures ({' / '.join(FAILURES)})"]
    for r, start in zip(rows, cells, strict=True):
        slips = f"{r['slips']} ({r['slips_recovered']})"
        lines.append(f"{start}{slips:>18}  {' / '.join(str(r[f'failure_{f}']) for f in FAILURES)}")
    return "\n".join(lines)
