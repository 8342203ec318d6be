"""Eq. 2 budget policy: first-match mode order, per-kind scaling, bounded override raise."""

from __future__ import annotations

from helpers import profile, trig

from brace_common.vocabulary import Mode, TriggerKind
from brace_controller.config import ControllerConfig
from brace_controller.policy import BudgetPolicy, select_mode


def test_mode_first_match_order():
    assert select_mode(trig(1, kind=TriggerKind.PERIODIC), override=True, reuse_severity=0.5) == Mode.FULL_REPLAN
    for kind in (TriggerKind.HAZARD, TriggerKind.DEADLOCK, TriggerKind.PREEMPT):
        assert select_mode(trig(1, kind=kind), False, 0.5) == Mode.FULL_REPLAN
    for kind in (TriggerKind.FAILURE, TriggerKind.DRIFT, TriggerKind.LOOP):
        assert select_mode(trig(1, kind=kind), False, 0.5) == Mode.PARTIAL_REPLAN
    assert select_mode(trig(1, severity=0.2), False, 0.5) == Mode.REUSE_SUBPLAN
    assert select_mode(trig(1, severity=0.8), False, 0.5) == Mode.PARTIAL_REPLAN


def test_a_periodic_trigger_of_an_agent_without_a_plan_asks_for_a_full_plan():
    # an initial plan or a finished one: there is nothing to repair or reuse, whatever the severity
    for severity in (0.2, 1.0):
        assert select_mode(trig(1, severity=severity, has_goal=False), False, 0.5) == Mode.FULL_REPLAN
    # a failure of an agent whose plan ended with the failed step is still repaired from it
    assert select_mode(trig(1, kind=TriggerKind.FAILURE, has_goal=False), False, 0.5) == Mode.PARTIAL_REPLAN


def test_budget_per_mode_and_kind_scale():
    policy = BudgetPolicy(profile(), ControllerConfig())
    b = policy.budget(trig(1, kind=TriggerKind.DEADLOCK), False, 0)
    assert (b.mode, b.token_budget, b.slo_ms, b.hard_deadline_ms) == (Mode.FULL_REPLAN, 1024, 2000.0, 4000.0)
    h = policy.budget(trig(1, kind=TriggerKind.HAZARD), False, 0)
    assert (h.token_budget, h.slo_ms) == (512, 1000.0)


def test_budget_clamped_to_profile_minimum():
    policy = BudgetPolicy(profile(min_budget=300), ControllerConfig())
    assert policy.budget(trig(1, severity=0.0), False, 0).token_budget == 300


def test_override_raises_budget_per_failure_and_is_bounded():
    cfg = ControllerConfig(override_after_failures=3, override_budget_scale=2.0, override_slo_scale=1.5,
                           override_max_token_budget=3000)
    policy = BudgetPolicy(profile(), cfg)
    at_k = policy.budget(trig(1, kind=TriggerKind.FAILURE), True, 3)
    assert at_k.mode == Mode.FULL_REPLAN and at_k.token_budget == 2048 and at_k.slo_ms == 3000.0
    way_past = policy.budget(trig(1, kind=TriggerKind.FAILURE), True, 30)
    assert way_past.token_budget == 3000


def test_any_number_of_consecutive_failures_gives_a_bounded_budget():
    policy = BudgetPolicy(profile(), ControllerConfig(override_after_failures=3, override_budget_scale=100.0))
    for failures in (3, 64, 1754, 2**32 - 1):  # 1,754 raised OverflowError before
        budget = policy.budget(trig(1, kind=TriggerKind.FAILURE, failures=failures), True, failures)
        assert budget.token_budget == policy.config.override_max_token_budget
