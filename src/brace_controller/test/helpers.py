"""Builders shared by the core tests (no ROS)."""

from __future__ import annotations

import random

from brace_common.replanning import CallRecord, Trigger
from brace_common.vocabulary import CallStatus, Mode, TriggerKind
from brace_controller.config import BudgetProfile, ControllerConfig, KindScale, ModeBudget
from brace_controller.controller import BraceController
from brace_controller.latency_model import CallSample

CONTEXT = 2000  # tokens the agents' calls read in the core tests


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


def warm(c, ms_per_kept_token: float, ms_per_token: float = 0.0, base: float = 20.0, context: int = CONTEXT):
    """Calls costing base + ms_per_kept_token A + ms_per_token N (A = tokens after compression); a call of this
    episode read `context` tokens."""
    rng = random.Random(0)
    for _ in range(c.config.adaptive_window):
        tokens = rng.randint(500, 3000)
        kept = rng.randint(64, tokens)
        cost = base + ms_per_kept_token * kept + ms_per_token * tokens
        c.observe_latency(CallSample(tokens, kept, 0, 0.0, cost, 0.0, cost))
    c.record_call(CallRecord("z", 0, CallStatus.OK, False, 10.0, 100, tokens_before=context))
