"""The stack's vocabulary: every kind, mode, reason, status, block and phase, defined once.

Plain Python enums whose values equal the constants of brace_msgs (a test
checks them against the generated message classes), so converting between a
message field and a core value is a lookup, never a translation table, and no
module spells a status as a literal. Nothing here imports ROS.
"""

from __future__ import annotations

import enum

TEAM_AGENT = "team"
"""Agent id of team-wide triggers and of the team-level controller counters (ControllerState)."""


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
    LOOP = 6
    REFINE = 7
    SUBTASK = 8


class Mode(_LabelledEnum):
    """Replanning mode m_t of Eq. 2 (ReplanDecision.MODE_*)."""

    FULL_REPLAN = 0
    PARTIAL_REPLAN = 1
    REUSE_SUBPLAN = 2
    DEFER_REPLAN = 3


class Reason(str, enum.Enum):
    """Why a trigger was admitted or suppressed (ReplanDecision.REASON_*)."""

    GATE_OPEN = "gate_open"
    OVERRIDE = "override"
    DEFER_GUARD = "defer_guard"
    COOLDOWN = "cooldown"
    COMMIT = "commit"
    TEAM_COOLDOWN = "team_cooldown"
    TEAM_COMMIT = "team_commit"
    IN_FLIGHT = "in_flight"
    SLO_INFEASIBLE = "slo_infeasible"
    RECURSION = "recursion"

    @property
    def admits(self) -> bool:
        """True for the reasons that come with an admitted call."""
        return self in (Reason.GATE_OPEN, Reason.OVERRIDE, Reason.DEFER_GUARD, Reason.RECURSION)


class CallStatus(_LabelledEnum):
    """Outcome of a replanning call (ReplanCall.STATUS_*)."""

    OK = 0
    PLANNER_ERROR = 1
    DEADLINE = 2
    CANCELLED = 3
    UNAVAILABLE = 4


class Block(_LabelledEnum):
    """Block of the replanning context C_t an entry belongs to (ContextEntry.BLOCK_*); all but HISTORY are protected."""

    TASK = 0
    STATE = 1
    CONSTRAINTS = 2
    COORDINATION = 3
    HISTORY = 4


class Failure(_LabelledEnum):
    """Why an executed step failed (ExecutionOutcome.FAILURE_*): BRACE Table 32's categories, collisions, steps the
    visual verifier preempted, and motion the collision monitor stopped."""

    NONE = 0
    GRASP = 1
    DROP_SLIP = 2
    TIMEOUT = 3
    CONTACT_LOSS = 4
    EXECUTOR = 5
    COLLISION = 6
    PREEMPTED = 7
    SAFETY_STOP = 8


class ZoneAction(_LabelledEnum):
    """What the collision monitor did to a commanded motion (CollisionMonitorState.ACTION_*), each zone named by it."""

    NONE = 0
    STOP = 1
    SLOWDOWN = 2
    APPROACH = 3
    RESTORE = 4
    YIELD = 5


class EntryKind(str, enum.Enum):
    """What a context entry reports (ContextEntry.KIND_*)."""

    TASK = "task"
    TASK_DONE = "task_done"
    CONSTRAINT = "constraint"
    OBSERVATION = "observation"
    ACTION_OUTCOME = "action_outcome"
    FAILURE_TRACE = "failure_trace"
    MESSAGE = "message"


class Phase(str, enum.Enum):
    """A phase of the replanning call path (PhaseTiming.PHASE_*, paper Sec. 3.4)."""

    QUEUE = "queue"
    CONTEXT_COMPRESS = "context_compress"
    RETRIEVE = "retrieve"
    PREFILL = "prefill"
    DECODE = "decode"
    PARSE = "parse"
    DISPATCH = "dispatch"
    REQUEST = "request"
    FIRST_TOKEN = "first_token"


class CallState(str, enum.Enum):
    """Where a call accepted by the planner is in its call queue (ROS-free: no message carries it)."""

    WAITING = "waiting"
    RUNNING = "running"
    SUPERSEDED = "superseded"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    DONE = "done"


class Decoding(str, enum.Enum):
    """How the planner decodes a plan (the erecap_planner parameter `decoding`)."""

    JSON = "json"                  # generate the plan's JSON freely, then validate it
    CANDIDATES = "candidates"      # score every valid skill call on the (pruned) KV cache
    CONSTRAINED = "constrained"    # greedy generation restricted to valid skill calls


class EpisodeEvent(_LabelledEnum):
    """An episode boundary (Episode.EVENT_*)."""

    START = 0
    END = 1


class Activity(_LabelledEnum):
    """What an agent is doing in a world state (AgentActivity.ACTIVITY_*)."""

    IDLE = 0
    EXECUTING = 1
    WAITING = 2
    BLOCKED = 3
    FAILED = 4


class Predicate(str, enum.Enum):
    """A relation of a world state's scene graph (Relation.PREDICATE_*)."""

    AT = "at"
    ON = "on"
    IN = "in"
    HOLDING = "holding"
    NEAR = "near"
    ASSIGNED = "assigned"
    TARGET = "target"
    CONCERNS = "concerns"
    AFTER = "after"
    YIELDS_TO = "yields_to"
    STOPPED_BY = "stopped_by"


class Observability(_LabelledEnum):
    """How much of the world a world state holds (WorldState.OBSERVABILITY_*)."""

    FULL = 0
    PARTIAL = 1


class RecapNeed(_LabelledEnum):
    """What an agent's ReCAP frame stack needs next (Plan.NEED_*)."""

    NONE = 0         # a flat plan (no recursion)
    EXECUTE = 1      # the executor runs the top frame's primitive S[0]
    DECOMPOSE = 2    # π: a frame without (T, S)
    REFINE = 3       # ρ (or reuse): an outcome or a returning child changed the frame's S
    NOTHING = 4      # no open frame: the root closed (or no task)


class RecapKind(_LabelledEnum):
    """What a call was to ReCAP's recursion (ReplanCall.RECAP_*)."""

    NONE = 0        # no recursion (a flat plan)
    DECOMPOSE = 1   # π: the frame had no (T, S)
    REFINE = 2      # ρ: the frame's (T, S) after an outcome or a returning child
    REUSE = 3       # the frame's S reused without the model (BRACE's choice instead of ρ)


MSG_CONSTANTS: dict[type[enum.Enum], tuple[str, str, str]] = {
    TriggerKind: ("brace_msgs.msg", "TriggerEvent", "KIND_"),
    Mode: ("brace_msgs.msg", "ReplanDecision", "MODE_"),
    Reason: ("brace_msgs.msg", "ReplanDecision", "REASON_"),
    CallStatus: ("brace_msgs.msg", "ReplanCall", "STATUS_"),
    Block: ("brace_msgs.msg", "ContextEntry", "BLOCK_"),
    EntryKind: ("brace_msgs.msg", "ContextEntry", "KIND_"),
    Phase: ("brace_msgs.msg", "PhaseTiming", "PHASE_"),
    EpisodeEvent: ("brace_msgs.msg", "Episode", "EVENT_"),
    Failure: ("brace_msgs.msg", "ExecutionOutcome", "FAILURE_"),
    Activity: ("brace_msgs.msg", "AgentActivity", "ACTIVITY_"),
    Predicate: ("brace_msgs.msg", "Relation", "PREDICATE_"),
    Observability: ("brace_msgs.msg", "WorldState", "OBSERVABILITY_"),
    RecapNeed: ("brace_msgs.msg", "Plan", "NEED_"),
    RecapKind: ("brace_msgs.msg", "ReplanCall", "RECAP_"),
    ZoneAction: ("brace_msgs.msg", "CollisionMonitorState", "ACTION_"),
}
"""Which message constants each enum mirrors: (module, message, constant prefix)."""


def meets_slo(status: int, latency_ms: float, slo_ms: float) -> bool:
    """l_t <= SLO_t (Eq. 6 counts the complement); a call past its hard deadline never meets it."""
    return status != CallStatus.DEADLINE and latency_ms <= slo_ms
