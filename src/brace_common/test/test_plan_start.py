"""How a new plan starts on a running executor: continues, restarts (a drift or loop repair) or replaces."""

from __future__ import annotations

import pytest

from brace_common.plan_start import REPAIR_TRIGGERS, PlanStart, plan_start
from brace_common.vocabulary import TriggerKind

PUSH = ("push", '{"object": "t_block", "target": "goal"}')
PICK = ("pick", '{"object": "apple"}')


@pytest.mark.parametrize("kind", list(TriggerKind))
def test_the_same_steps_continue_unless_the_plan_repairs_a_drift_or_a_loop(kind):
    expected = PlanStart.RESTARTS if kind in (TriggerKind.DRIFT, TriggerKind.LOOP) else PlanStart.CONTINUES
    assert plan_start([PUSH], [PUSH], int(kind)) == expected
    assert (kind in REPAIR_TRIGGERS) == (expected == PlanStart.RESTARTS)


def test_another_plan_or_an_idle_executor_begins_the_plan():
    assert plan_start([PUSH], [PUSH, PUSH], int(TriggerKind.PERIODIC)) == PlanStart.REPLACES
    assert plan_start([PICK, PUSH], [PUSH], int(TriggerKind.PERIODIC)) == PlanStart.REPLACES
    assert plan_start([], [PUSH], int(TriggerKind.DRIFT)) == PlanStart.REPLACES
    assert plan_start([], [], int(TriggerKind.PERIODIC)) == PlanStart.REPLACES
