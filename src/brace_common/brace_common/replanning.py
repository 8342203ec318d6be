"""The controller core's records: a trigger, a decision, a finished call.

Plain dataclasses over the vocabulary of brace_common; nothing here imports ROS.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from brace_common.vocabulary import CallStatus, Mode, Reason, RecapKind, TriggerKind, meets_slo


@dataclass(frozen=True)
class Trigger:
    """A potential replanning point tau_t for one agent at controller step t."""

    kind: TriggerKind
    agent_id: str
    step: int
    severity: float = 1.0
    consecutive_failures: int = 0
    trigger_id: str = ""
    detail: str = ""
    stamp: float = 0.0
    has_goal: bool = False  # the agent was executing an unfinished plan (false: it waits for one)
    depth: int = 0          # ReCAP: the depth of the agent's frame the trigger concerns

    def validate(self) -> None:
        """Raise ValueError naming the offending field when the trigger is malformed."""
        if not self.agent_id or not self.agent_id.strip():
            raise ValueError("agent_id is empty")
        if not isinstance(self.kind, TriggerKind):
            raise ValueError(f"kind {self.kind!r} is not a trigger kind")
        if self.step < 0:
            raise ValueError(f"step {self.step} is negative")
        if not math.isfinite(self.severity) or not 0.0 <= self.severity <= 1.0:
            raise ValueError(f"severity {self.severity} is not a finite value in [0, 1]")
        if self.consecutive_failures < 0:
            raise ValueError(f"consecutive_failures {self.consecutive_failures} is negative")
        if self.depth < 0:
            raise ValueError(f"depth {self.depth} is negative")


@dataclass(frozen=True)
class Decision:
    """The controller's answer to one trigger: u_t, and (m_t, B_t, SLO_t) when admitted."""

    decision_id: str
    trigger: Trigger
    admitted: bool
    reason: Reason
    mode: Mode
    token_budget: int = 0
    slo_ms: float = 0.0
    hard_deadline_ms: float = 0.0
    override: bool = False
    steps_since_call: Optional[int] = None
    steps_since_change: Optional[int] = None
    consecutive_failures: int = 0
    consecutive_deferrals: int = 0
    predicted_p95_ms: float = math.nan
    memory_off: bool = False  # the call runs without retrieved memory (its SLO cannot afford it)


@dataclass(frozen=True)
class CallRecord:
    """What the controller needs to know about a finished replanning call."""

    agent_id: str
    step: int
    status: CallStatus
    plan_changed: bool
    latency_ms: float
    tokens_after: int
    slo_ms: float = 0.0
    decision_id: str = ""
    tokens_before: int = 0
    mode: Mode = Mode.FULL_REPLAN
    phase_ms: dict[str, float] = field(default_factory=dict)
    fault: str = ""    # a planner error's reason key (action_schema.Fault, 'truncated', ...); '' otherwise
    recap_call: RecapKind = RecapKind.NONE  # what the call was to ReCAP's recursion (REUSE: no model call)

    @property
    def slo_met(self) -> bool:
        """l_t <= SLO_t (Eq. 6 counts the complement)."""
        return meets_slo(self.status, self.latency_ms, self.slo_ms)
