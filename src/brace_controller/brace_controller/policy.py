"""Budget policy of paper Eq. 2: (m_t, B_t, SLO_t) = f(tau_t, sigma_t).

Mode selection is a first-match rule list, checked top to bottom:

  1. failure-aware override active (k consecutive failures) -> full_replan
  2. hazard, deadlock or preempt trigger (plan unsafe or blocked) -> full_replan; a ReCAP subtask trigger (a frame
     to decompose, π) -> full_replan
  3. failure, drift or loop trigger (repair from the failing step on) -> partial_replan; a ReCAP refine trigger
     (ρ after a subtask ran) -> partial_replan
  4. periodic trigger of an agent without an unfinished plan (nothing to repair or reuse) -> full_replan
  5. periodic trigger with severity < reuse_severity (plan on track) -> reuse_subplan
  6. any other periodic trigger -> partial_replan

defer_replan is never chosen here: it is the mode of every suppressed trigger.
B_t and SLO_t come from the budget profile: the mode's (B, SLO) scaled by the
trigger kind, B clamped to the profile's [min, max]. An override raises both,
B by override_budget_scale per failure at or past k, bounded by
override_max_token_budget. A ReCAP call for a frame at depth d gets B x
recap_depth_budget_ratio^d (its prompt re-injects the parents' thoughts and
subtasks but holds only the frame's own window).
"""

from __future__ import annotations

from dataclasses import dataclass

from brace_common.replanning import Trigger
from brace_common.vocabulary import Mode, TriggerKind

from .config import BudgetProfile, ControllerConfig, KindScale

_FULL_REPLAN_KINDS = (TriggerKind.HAZARD, TriggerKind.DEADLOCK, TriggerKind.PREEMPT, TriggerKind.SUBTASK)
_PARTIAL_REPLAN_KINDS = (TriggerKind.FAILURE, TriggerKind.DRIFT, TriggerKind.LOOP, TriggerKind.REFINE)
MAX_OVERRIDE_EXPONENT = 64  # failures past k beyond this raise the budget no further (it is clamped long before)


@dataclass(frozen=True)
class Budget:
    """The per-call budget of an admitted trigger."""

    mode: Mode
    token_budget: int
    slo_ms: float
    hard_deadline_ms: float


def select_mode(trigger: Trigger, override: bool, reuse_severity: float) -> Mode:
    """First-match mode rule of the module docstring."""
    if override or trigger.kind in _FULL_REPLAN_KINDS:
        return Mode.FULL_REPLAN
    if trigger.kind in _PARTIAL_REPLAN_KINDS:
        return Mode.PARTIAL_REPLAN
    if not trigger.has_goal:
        return Mode.FULL_REPLAN
    if trigger.severity < reuse_severity:
        return Mode.REUSE_SUBPLAN
    return Mode.PARTIAL_REPLAN


class BudgetPolicy:
    """Maps an admitted trigger and the failure counter to a mode and its budgets."""

    def __init__(self, profile: BudgetProfile, config: ControllerConfig):
        self.profile = profile
        self.config = config

    def budget(self, trigger: Trigger, override: bool, consecutive_failures: int) -> Budget:
        """(m_t, B_t, SLO_t) and the hard deadline for an admitted trigger."""
        mode = select_mode(trigger, override, self.config.reuse_severity)
        base = self.profile.modes[mode]
        scale = self.profile.kinds.get(trigger.kind, KindScale())
        tokens = base.token_budget * scale.budget_scale * self.config.recap_depth_budget_ratio ** trigger.depth
        slo_ms = base.slo_ms * scale.slo_scale
        upper = self.profile.max_token_budget
        if override:
            excess = max(0, consecutive_failures - self.config.override_after_failures)
            # The raised budget is clamped below anyway: a bounded exponent keeps the float finite for any count.
            tokens *= self.config.override_budget_scale ** min(excess + 1, MAX_OVERRIDE_EXPONENT)
            slo_ms *= self.config.override_slo_scale
            upper = max(upper, self.config.override_max_token_budget)
            tokens = min(tokens, self.config.override_max_token_budget)
        token_budget = int(max(self.profile.min_token_budget, min(upper, round(tokens))))
        return Budget(mode, token_budget, slo_ms, slo_ms * self.profile.hard_deadline_factor)

    def reuse(self, trigger: Trigger) -> Budget:
        """The budget of a ReCAP reuse (the frame's S served without the model): reuse_subplan at the smallest B."""
        base = self.profile.modes[Mode.REUSE_SUBPLAN]
        return Budget(Mode.REUSE_SUBPLAN, self.profile.min_token_budget, base.slo_ms,
                      base.slo_ms * self.profile.hard_deadline_factor)

    @property
    def min_token_budget(self) -> int:
        """Smallest budget the profile allows."""
        return self.profile.min_token_budget
