"""Replanning metrics: tail percentiles, SLO violation (Eq. 6), churn (Eq. 13),
and the suppressed-trigger audits shaped like paper Tables 10 and 25."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from brace_common.replanning import Decision
from brace_common.vocabulary import Reason, TriggerKind


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100, linear interpolation); NaN for no values."""
    if len(values) == 0:
        return math.nan
    return float(np.percentile(np.asarray(values, dtype=float), q))


@dataclass(frozen=True)
class LatencySummary:
    """P50 / P95 / P99 / mean of a set of latencies (same unit as the input)."""

    count: int
    p50: float
    p95: float
    p99: float
    mean: float


def latency_summary(values: Sequence[float]) -> LatencySummary:
    """Summarise latencies with the tail percentiles the paper reports."""
    mean = float(np.mean(values)) if len(values) else math.nan
    return LatencySummary(len(values), percentile(values, 50), percentile(values, 95), percentile(values, 99), mean)


def slo_violation_rate(latencies_ms: Sequence[float], slo_ms: Sequence[float] | float) -> float:
    """Eq. 6: fraction of calls with l_t > SLO_t; NaN for no calls. `slo_ms` is per call or one value."""
    if len(latencies_ms) == 0:
        return math.nan
    slos = [slo_ms] * len(latencies_ms) if isinstance(slo_ms, (int, float)) else list(slo_ms)
    if len(slos) != len(latencies_ms):
        raise ValueError("one SLO per call, or a single SLO")
    return sum(lat > slo for lat, slo in zip(latencies_ms, slos, strict=True)) / len(latencies_ms)


def churn_ratio(calls: int | float, changes: int | float) -> float:
    """Eq. 13: chi = changes per episode / calls per episode; NaN without calls."""
    return math.nan if calls <= 0 else changes / calls


@dataclass(frozen=True)
class SuppressionOutcome:
    """One row of the Table 10 audit: suppressed segments of one gate reason and what followed."""

    reason: str
    segments: int
    recovered: int
    harmless: int
    harmful: int
    override_within_h: int


_HARM_KINDS = (TriggerKind.FAILURE, TriggerKind.HAZARD, TriggerKind.DEADLOCK)


def suppression_audit(decisions: Iterable[Decision], horizon_steps: int) -> list[SuppressionOutcome]:
    """Table 10: classify each suppressed segment by what happened within H steps of its start.

    A segment is a maximal run of one agent's consecutive suppressed decisions
    with the same reason. Within H steps of its first trigger it is *harmful*
    when a failure, hazard or deadlock trigger of that agent arrives (inside
    the segment or after it) before any admitted call; *recovered* when an admitted call comes first; and
    *harmless* otherwise. 'Override within H' counts segments followed by a
    failure-aware override within H.
    """
    per_agent: dict[str, list[Decision]] = {}
    for d in decisions:
        per_agent.setdefault(d.trigger.agent_id, []).append(d)

    rows: dict[str, list[int]] = {}
    for stream in per_agent.values():
        stream.sort(key=lambda d: d.trigger.step)
        i = 0
        while i < len(stream):
            d = stream[i]
            if d.admitted:
                i += 1
                continue
            j = i
            while j + 1 < len(stream) and not stream[j + 1].admitted and stream[j + 1].reason == d.reason:
                j += 1
            start = d.trigger.step
            # What follows the segment's first trigger, including the rest of the segment itself.
            window = [e for e in stream[i + 1:] if e.trigger.step <= start + horizon_steps]
            outcome = 1  # harmless
            for e in window:
                if e.admitted:
                    outcome = 0  # recovered
                    break
                if e.trigger.kind in _HARM_KINDS:
                    outcome = 2  # harmful
                    break
            row = rows.setdefault(d.reason.value, [0, 0, 0, 0, 0])
            row[0] += 1
            row[1 + outcome] += 1
            row[4] += int(any(e.admitted and e.reason == Reason.OVERRIDE for e in window))
            i = j + 1
    return [SuppressionOutcome(reason, *counts) for reason, counts in sorted(rows.items())]


@dataclass(frozen=True)
class TriggerAudit:
    """Table 25 shape: how many triggers, how many suppressed, which kinds they were."""

    triggers: int
    admitted: int
    suppressed: int
    suppressed_by_reason: dict[str, int]
    share_by_kind: dict[str, float]
    calls_per_min: float


def trigger_audit(decisions: Sequence[Decision], duration_s: float) -> TriggerAudit:
    """Count triggers, admissions and suppressions; share of each trigger kind; calls per minute."""
    admitted = sum(d.admitted for d in decisions)
    kinds = Counter(d.trigger.kind.label for d in decisions)
    total = len(decisions)
    return TriggerAudit(
        triggers=total,
        admitted=admitted,
        suppressed=total - admitted,
        suppressed_by_reason=dict(Counter(d.reason.value for d in decisions if not d.admitted)),
        share_by_kind={k.label: (kinds.get(k.label, 0) / total if total else 0.0) for k in TriggerKind},
        calls_per_min=(admitted / duration_s * 60.0) if duration_s > 0 else math.nan,
    )
