"""Metrics: percentiles, Eq. 6, Eq. 13, Table 10 and Table 25 audits."""

from __future__ import annotations

import math

import pytest

from brace_audit.metrics import (
    churn_ratio,
    latency_summary,
    percentile,
    slo_violation_rate,
    suppression_audit,
    trigger_audit,
)
from brace_common.replanning import Decision, Trigger
from brace_common.vocabulary import Mode, Reason, TriggerKind


def test_percentiles():
    values = list(range(1, 101))
    s = latency_summary(values)
    assert (s.count, s.p50, s.mean) == (100, 50.5, 50.5)
    assert s.p95 == pytest.approx(95.05) and s.p99 == pytest.approx(99.01)
    assert math.isnan(percentile([], 50))


def test_slo_violation_rate_eq6():
    assert slo_violation_rate([100, 200, 300, 400], 250) == 0.5
    assert slo_violation_rate([100, 200], [50, 250]) == 0.5
    assert slo_violation_rate([250], 250) == 0.0  # equal to the SLO is met
    assert math.isnan(slo_violation_rate([], 1))
    with pytest.raises(ValueError):
        slo_violation_rate([1, 2], [1])


def test_churn_ratio_eq13():
    assert churn_ratio(10, 9) == 0.9
    assert math.isnan(churn_ratio(0, 0))


def dec(step, admitted, reason, kind=TriggerKind.PERIODIC, agent="a", override=False):
    return Decision(f"d{step}{agent}{kind}", Trigger(kind, agent, step), admitted, reason,
                    Mode.FULL_REPLAN if admitted else Mode.DEFER_REPLAN, override=override)


def test_suppression_audit_classifies_segments():
    decisions = [
        dec(0, True, Reason.GATE_OPEN),
        dec(1, False, Reason.COOLDOWN), dec(2, False, Reason.COOLDOWN),  # one segment, recovered at 3
        dec(3, True, Reason.GATE_OPEN),
        dec(4, False, Reason.COMMIT),                                    # harmful: failure at 5 first
        dec(5, False, Reason.COMMIT, kind=TriggerKind.FAILURE),
        dec(6, True, Reason.OVERRIDE, kind=TriggerKind.FAILURE, override=True),
        dec(20, False, Reason.COOLDOWN),                                 # harmless: nothing within H
    ]
    rows = {r.reason: r for r in suppression_audit(decisions, horizon_steps=5)}
    assert (rows["cooldown"].segments, rows["cooldown"].recovered, rows["cooldown"].harmless) == (2, 1, 1)
    commit = rows["commit"]
    assert (commit.segments, commit.harmful, commit.override_within_h) == (1, 1, 1)


def test_trigger_audit_table25_shape():
    decisions = [dec(0, True, Reason.GATE_OPEN), dec(1, False, Reason.COOLDOWN, kind=TriggerKind.HAZARD),
                 dec(2, False, Reason.COOLDOWN, kind=TriggerKind.FAILURE), dec(5, True, Reason.GATE_OPEN)]
    audit = trigger_audit(decisions, duration_s=30.0)
    assert (audit.triggers, audit.admitted, audit.suppressed) == (4, 2, 2)
    assert audit.suppressed_by_reason == {"cooldown": 2}
    assert audit.share_by_kind["periodic"] == 0.5 and audit.share_by_kind["hazard"] == 0.25
    assert audit.calls_per_min == 4.0
