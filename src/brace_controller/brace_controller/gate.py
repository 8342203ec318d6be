"""Stability gate of paper Eq. 1 with per-agent and team counters.

u_t = 1[tau_t and Delta_t >= delta and kappa_t >= omega], where Delta_t counts
steps since the agent's last replanning call and kappa_t steps since its last
plan change. The same test runs on team-level counters with their own
thresholds. Without overrides this gives the anti-churn property of Appendix B:
an agent's calls are at least delta steps apart and a changed plan survives at
least omega steps before another call may replace it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from brace_common.vocabulary import Reason


@dataclass
class AgentCounters:
    """Controller state sigma_t of one agent (or of the team)."""

    last_call_step: Optional[int] = None
    last_change_step: Optional[int] = None
    latest_step: int = 0
    call_in_flight: bool = False
    in_flight_budget: int = 0  # B_t of the call in flight
    in_flight_cost_ms: float = 0.0  # its predicted mean cost: the planner's backlog is the sum over calls in flight
    tokens_before: Optional[int] = None  # N of the agent's last call this episode (the next call's N is predicted from it)
    consecutive_failures: int = 0
    consecutive_deferrals: int = 0
    recursion_chain: int = 0  # ReCAP calls in a row the controller raised itself (no plan with steps between)

    def steps_since_call(self, step: int) -> Optional[int]:
        """Delta_t at `step`; None before the first call."""
        return None if self.last_call_step is None else step - self.last_call_step

    def steps_since_change(self, step: int) -> Optional[int]:
        """kappa_t at `step`; None before the first plan change."""
        return None if self.last_change_step is None else step - self.last_change_step


@dataclass(frozen=True)
class GateVerdict:
    """Result of Eq. 1: whether the gate is open and, if not, the first failing condition."""

    open: bool
    reason: Reason


def _elapsed(since: Optional[int], threshold: int) -> bool:
    # A window of 0 is off, whatever the steps say (a trigger may carry a step earlier than the last call's).
    return threshold <= 0 or since is None or since >= threshold


def _eq1(counters: AgentCounters, step: int, cooldown_steps: int, commit_steps: int, cooldown: Reason,
         commit: Reason) -> GateVerdict:
    """Eq. 1 with these thresholds: closed for `cooldown` inside the cooldown window, else for `commit` inside the
    commit window, else open."""
    if not _elapsed(counters.steps_since_call(step), cooldown_steps):
        return GateVerdict(False, cooldown)
    if not _elapsed(counters.steps_since_change(step), commit_steps):
        return GateVerdict(False, commit)
    return GateVerdict(True, Reason.GATE_OPEN)


class StabilityGate:
    """Eq. 1 over per-agent counters, then over team counters.

    The gate only reads counters; the controller updates them when calls are
    admitted and when plans change.
    """

    def __init__(self, cooldown_steps: int, commit_steps: int, team_cooldown_steps: int = 0, team_commit_steps: int = 0):
        self.cooldown_steps = cooldown_steps
        self.commit_steps = commit_steps
        self.team_cooldown_steps = team_cooldown_steps
        self.team_commit_steps = team_commit_steps

    def agent_verdict(self, counters: AgentCounters, step: int) -> GateVerdict:
        """Eq. 1 on one agent's counters; cooldown is checked before commit."""
        return _eq1(counters, step, self.cooldown_steps, self.commit_steps, Reason.COOLDOWN, Reason.COMMIT)

    def team_verdict(self, team: AgentCounters, step: int) -> GateVerdict:
        """Eq. 1 on the team counters with the team thresholds."""
        return _eq1(team, step, self.team_cooldown_steps, self.team_commit_steps, Reason.TEAM_COOLDOWN, Reason.TEAM_COMMIT)
