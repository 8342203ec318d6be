"""Core vocabulary shared by the gate, the policy, the detectors and the metrics.

Plain dataclasses and enums; nothing here imports ROS. The enum values equal
the constants of brace_msgs so conversion is a lookup, not a translation table.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Optional

TEAM_AGENT = "team"
"""Agent id of team-wide triggers and of the team-level controller counters."""


class _LabelledEnum(enum.IntEnum):
    """An IntEnum whose members are also known by their lower-case name."""

    @property
    def label(self) -> str:
        """Lower-case name used in logs, CSV columns and YAML keys."""
        return self.name.lower()

    @classmethod
    def from_label(cls, label: str):
        """Parse a lower-case name such as 'hazard' or 'full_replan'; ValueError when unknown."""
        try:
            return cls[label.upper()]
        except KeyError:
            raise ValueError(f"unknown {cls.__name__} '{label}'") from None


class TriggerKind(_LabelledEnum):
    """Why a potential replanning point was raised (TriggerEvent.KIND_*)."""

    PERIODIC = 0
    FAILURE = 1
    DRIFT = 2
    HAZARD = 3
    DEADLOCK = 4
    PREEMPT = 5


class Mode(_LabelledEnum):
    """Replanning mode m_t of Eq. 2 (ReplanDecision.MODE_*)."""

    FULL_REPLAN = 0
    PARTIAL_REPLAN = 1
    REUSE_SUBPLAN = 2
    DEFER_REPLAN = 3


class Reason(str, enum.Enum):
    """Why a trigger was admitted or suppressed (ReplanDecision.REASON_*)."""

    GATE_OPEN = "gate_open"
    OVERRIDE = "failure_override"
    DEFER_GUARD = "defer_guard"
    COOLDOWN = "cooldown"
    COMMIT = "commit"
    TEAM_COOLDOWN = "team_cooldown"
    TEAM_COMMIT = "team_commit"
    IN_FLIGHT = "in_flight"
    SLO_INFEASIBLE = "slo_infeasible"

    @property
    def admits(self) -> bool:
        """True for the reasons that come with an admitted call."""
        return self in (Reason.GATE_OPEN, Reason.OVERRIDE, Reason.DEFER_GUARD)


class CallStatus(enum.IntEnum):
    """Outcome of a replanning call (ReplanCall.STATUS_*)."""

    OK = 0
    PLANNER_ERROR = 1
    DEADLINE = 2
    CANCELLED = 3
    UNAVAILABLE = 4


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

    @property
    def slo_met(self) -> bool:
        """l_t <= SLO_t (Eq. 6 counts the complement)."""
        return meets_slo(self.status, self.latency_ms, self.slo_ms)


def meets_slo(status: int, latency_ms: float, slo_ms: float) -> bool:
    """l_t <= SLO_t; a call past its hard deadline never meets it, whatever was measured."""
    return status != CallStatus.DEADLINE and latency_ms <= slo_ms
