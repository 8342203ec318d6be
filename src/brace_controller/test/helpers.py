"""Builders shared by the core tests (no ROS)."""

from __future__ import annotations

from brace_common.replanning import Trigger
from brace_common.vocabulary import Mode, TriggerKind
from brace_controller.config import BudgetProfile, ControllerConfig, KindScale, ModeBudget
from brace_controller.controller import BraceController


def profile(min_budget: int = 32, max_budget: int = 2048) -> BudgetProfile:
    return BudgetProfile(
        name="test",
        modes={
            Mode.FULL_REPLAN: ModeBudget(1024, 2000.0),
            Mode.PARTIAL_REPLAN: ModeBudget(512, 1000.0),
            Mode.REUSE_SUBPLAN: ModeBudget(128, 400.0),
        },
        kinds={TriggerKind.HAZARD: KindScale(0.5, 0.5)},
        min_token_budget=min_budget,
        max_token_budget=max_budget,
        hard_deadline_factor=2.0,
    )


def controller(**overrides) -> BraceController:
    defaults = dict(adaptive_budget=False, defer_when_infeasible=False, max_consecutive_deferrals=0)
    defaults.update(overrides)
    return BraceController(ControllerConfig(**defaults), profile())


def trig(step: int, agent: str = "a", kind: TriggerKind = TriggerKind.PERIODIC, failures: int = 0,
         severity: float = 1.0, has_goal: bool = True) -> Trigger:
    return Trigger(kind, agent, step, severity=severity, consecutive_failures=failures, has_goal=has_goal)
