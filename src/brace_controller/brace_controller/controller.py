"""The BRACE controller core: one `decide` per trigger, one `record_call` per finished call.

The order of checks, the held triggers, the adaptive budget and the quality floor: docs/nodes.md, "brace_controller".
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from typing import Optional

from brace_common.counters import Health
from brace_common.replanning import CallRecord, Decision, Trigger
from brace_common.vocabulary import TEAM_AGENT, CallStatus, Mode, Reason, RecapNeed, TriggerKind

from .config import BudgetProfile, ControllerConfig
from .gate import AgentCounters, StabilityGate
from .latency_model import CallSample, LatencyModel
from .policy import BudgetPolicy
from .quality_floor import QualityFloor

# Triggers that are never deferred for predicted SLO infeasibility: they signal
# failure, danger, a blocked team or an agent going round in circles, where a late plan beats no plan.
_CRITICAL_KINDS = (TriggerKind.FAILURE, TriggerKind.HAZARD, TriggerKind.DEADLOCK, TriggerKind.PREEMPT,
                   TriggerKind.LOOP)


@dataclass
class AgentTally:
    """Running counts for one agent, for diagnostics and ControllerState."""

    triggers: int = 0
    admitted: int = 0
    suppressed: int = 0
    overrides: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)


class BraceController:
    """Stability gate + budget policy + adaptive latency model, per agent and for the team."""

    def __init__(self, config: ControllerConfig, profile: BudgetProfile, id_prefix: str = "decision"):
        config.validate()
        self.config = config
        self.profile = profile
        self.gate = StabilityGate(
            config.cooldown_steps, config.commit_steps, config.team_cooldown_steps, config.team_commit_steps
        )
        self.policy = BudgetPolicy(profile, config)
        self.latency_model = LatencyModel(
            config.adaptive_window, config.adaptive_min_samples, config.adaptive_tail_quantile
        )
        self.quality = QualityFloor(max(profile.min_token_budget, config.quality_floor_tokens),
                                    config.quality_floor_step, profile.max_token_budget, config.quality_floor_window,
                                    config.quality_floor_max_error_rate)
        self.agents: dict[str, AgentCounters] = {}
        self.team = AgentCounters()
        self.tally: dict[str, AgentTally] = {}
        self._plans: dict[str, tuple] = {}
        self.held: dict[str, Trigger] = {}  # per agent: its latest trigger held for the planner's backlog
        self.server_calls = 0  # requests other clients hold at a shared planner server (a fleet's other robots)
        self.recursion_cut = 0  # ReCAP follow-ups not raised: recap_max_follow_ups in a row reached
        self._ids = itertools.count(1)
        self._id_prefix = id_prefix

    def reset(self) -> None:
        """A new episode: per-agent and team counters and plans restart; tallies, the latency model and the quality
        floor persist."""
        self.agents = {}
        self.team = AgentCounters()
        self._plans = {}
        self.held = {}

    # ------------------------------------------------------------------ queries

    def health(self) -> Health:
        """Triggers, admissions and suppressions (by reason) of every agent, the latency model's and the quality
        floor's state and the shared server's other calls, as diagnostics values."""
        tallies = list(self.tally.values())
        reasons: dict[str, int] = {}
        for tally in tallies:
            for reason, n in tally.by_reason.items():
                reasons[reason] = reasons.get(reason, 0) + n
        model = self.latency_model
        return Health({"triggers": sum(t.triggers for t in tallies), "admitted": sum(t.admitted for t in tallies),
                       "suppressed": sum(t.suppressed for t in tallies), "latency_model_samples": model.samples,
                       "latency_model_ready": model.ready, "quality_floor_tokens": self.quality.floor,
                       "quality_floor_raised": self.quality.raised, "server_calls": self.server_calls,
                       "recap_follow_ups_cut": self.recursion_cut,
                       **{f"latency_model_{k}": v for k, v in model.describe().items()},
                       **{f"reason.{k}": v for k, v in sorted(reasons.items())}})

    def counters(self, agent_id: str) -> AgentCounters:
        """The agent's counters, created on first use (the team's for agent 'team')."""
        if agent_id == TEAM_AGENT:
            return self.team
        if agent_id not in self.agents:
            self.agents[agent_id] = AgentCounters()
            self.tally[agent_id] = AgentTally()
        return self.agents[agent_id]

    # ------------------------------------------------------------------ decide

    def decide(self, trigger: Trigger) -> Decision:
        """Gate one trigger and, if admitted, budget it. Raises ValueError on a malformed trigger."""
        trigger.validate()
        self.held.pop(trigger.agent_id, None)  # a newer trigger of the agent supersedes its held one
        agent = self.counters(trigger.agent_id)
        tally = self.tally.setdefault(trigger.agent_id, AgentTally())
        step = trigger.step
        agent.latest_step = max(agent.latest_step, step)
        self.team.latest_step = max(self.team.latest_step, step)
        agent.consecutive_failures = trigger.consecutive_failures

        k = self.config.override_after_failures
        override = k > 0 and trigger.consecutive_failures >= k
        reason = self._admission_reason(trigger, agent, override)
        if self._recursion(trigger, reason):
            return self._recursion_decision(trigger, agent, tally)

        budget = None
        predicted = math.nan
        cost_ms = 0.0
        hold = infeasible = False
        n = self.expected_tokens(agent)
        if reason == Reason.GATE_OPEN and self._cold_holdable(trigger, n):
            reason, hold = Reason.SLO_INFEASIBLE, True
        if reason.admits:
            budget = self.policy.budget(trigger, override, trigger.consecutive_failures)
            token_budget = budget.token_budget
            model = self.latency_model
            if model.ready and n is not None and (self.config.adaptive_budget or self.config.defer_when_infeasible):
                mode = int(budget.mode)
                server_call_ms = model.predict_mean(n, min(n, token_budget), mode) if self.server_calls else 0.0
                backlog = self.backlog_ms(server_call_ms)
                target = budget.slo_ms * self.config.adaptive_guard_ratio - backlog
                low = min(self.quality.floor, token_budget)
                if self.config.adaptive_budget:
                    fitted = model.budget_for(target, n, mode, low, token_budget)
                else:
                    fitted = token_budget if model.predict_p95(n, min(n, token_budget), mode) <= target else None
                infeasible = fitted is None
                hold = infeasible and reason == Reason.GATE_OPEN and not self._deferrable(trigger) \
                    and self._holdable(trigger, backlog)
                if infeasible and reason == Reason.GATE_OPEN and (hold or self._deferrable(trigger)):
                    reason = Reason.SLO_INFEASIBLE
                elif self.config.adaptive_budget:
                    token_budget = low if infeasible else fitted
                predicted = backlog + model.predict_p95(n, min(n, token_budget), mode)
                cost_ms = model.predict_mean(n, min(n, token_budget), mode)
            budget = dataclasses.replace(budget, token_budget=token_budget)

        decision = self._make_decision(trigger, agent, reason, override, budget, predicted)
        if decision.admitted and infeasible and self.config.memory_off_when_infeasible:
            decision = dataclasses.replace(decision, memory_off=True)
        self._apply(decision, agent, tally)
        if decision.admitted:
            agent.in_flight_cost_ms = cost_ms
        if hold:
            self.held[trigger.agent_id] = trigger
        return decision

    @staticmethod
    def _recursion(trigger: Trigger, reason: Reason) -> bool:
        """ReCAP's rule: an agent whose frame stack left it nothing to execute is served whatever the gates say (a
        frame to decompose, or ρ due with no plan left), unless its call is in flight."""
        if reason == Reason.IN_FLIGHT:
            return False
        if trigger.kind == TriggerKind.SUBTASK:
            return True
        return trigger.kind == TriggerKind.REFINE and not reason.admits and not trigger.has_goal

    def _recursion_decision(self, trigger: Trigger, agent: AgentCounters, tally: AgentTally) -> Decision:
        """Admitted for the recursion: π for a SUBTASK (its B_t the depth's); for a REFINE the gates refused, the
        frame's S reused (reuse_subplan at the smallest B_t: no model call, so the cooldown does not restart)."""
        reuse = trigger.kind == TriggerKind.REFINE
        budget = self.policy.reuse(trigger) if reuse else self.policy.budget(trigger, False,
                                                                             trigger.consecutive_failures)
        decision = self._make_decision(trigger, agent, Reason.RECURSION, False, budget, math.nan)
        self._apply(decision, agent, tally, model_call=not reuse)
        return decision

    def follow_up(self, agent_id: str, step: int, need: RecapNeed, depth: int, has_steps: bool) -> Optional[Trigger]:
        """ReCAP: the trigger a finished call's plan asks for (`need` of its agent's frame stack at `depth`): a
        SUBTASK for a frame to decompose, a REFINE for a parent whose child closed, when the plan left the agent
        nothing to execute; None otherwise, and None (counted) past recap_max_follow_ups in a row (a planner that
        opens and closes frames without ever acting)."""
        agent = self.counters(agent_id)
        if has_steps or need not in (RecapNeed.DECOMPOSE, RecapNeed.REFINE):
            agent.recursion_chain = 0
            return None
        if agent.recursion_chain >= self.config.recap_max_follow_ups:
            self.recursion_cut += 1
            agent.recursion_chain = 0
            return None
        agent.recursion_chain += 1
        kind = TriggerKind.SUBTASK if need == RecapNeed.DECOMPOSE else TriggerKind.REFINE
        what = "a frame to decompose" if need == RecapNeed.DECOMPOSE else "a child frame closed"
        return Trigger(kind, agent_id, max(step, self.team.latest_step), trigger_id=f"{self._id_prefix}/recap/"
                       f"{next(self._ids)}", detail=f"{what} at depth {depth}", has_goal=False, depth=depth)

    def release_held(self) -> list[Trigger]:
        """The triggers held for the planner's backlog, oldest step first, to decide again now (a call finished)."""
        held = sorted(self.held.values(), key=lambda t: t.step)
        self.held = {}
        return held

    def expected_tokens(self, agent: AgentCounters) -> Optional[int]:
        """N the agent's next call will read: the largest context any call of this episode read (contexts grow)."""
        seen = [c.tokens_before for c in (agent, *self.agents.values()) if c.tokens_before is not None]
        return max(seen) if seen else None

    def _admission_reason(self, trigger: Trigger, agent: AgentCounters, override: bool) -> Reason:
        if agent.call_in_flight:
            return Reason.IN_FLIGHT
        if override:
            return Reason.OVERRIDE
        verdict = self.gate.agent_verdict(agent, trigger.step)
        if not verdict.open:
            return verdict.reason
        guard = self.config.max_consecutive_deferrals
        if guard > 0 and agent.consecutive_deferrals >= guard and not self._calls_in_flight():
            return Reason.DEFER_GUARD  # only once the planner is free: admitted behind a backlog it would wait anyway
        if trigger.agent_id != TEAM_AGENT:
            verdict = self.gate.team_verdict(self.team, trigger.step)
            if not verdict.open:
                return verdict.reason
        return Reason.GATE_OPEN

    def _calls_in_flight(self) -> list[AgentCounters]:
        return [c for c in (*self.agents.values(), self.team) if c.call_in_flight]

    def set_server_calls(self, calls: int) -> bool:
        """The requests other clients hold at the planner server now (0: none, or no shared server); True when
        that fell, so held triggers may be decided again (`release_held`)."""
        if calls < 0:
            raise ValueError(f"server calls {calls} < 0")
        fell = calls < self.server_calls
        self.server_calls = calls
        return fell

    def backlog_ms(self, server_call_ms: float = 0.0) -> float:
        """Predicted wait for the planner: the mean cost of every call in flight (one planner serves them in turn),
        and `server_call_ms` for each request other clients hold at a shared planner server."""
        return sum(c.in_flight_cost_ms for c in self._calls_in_flight()) + self.server_calls * server_call_ms

    def _deferrable(self, trigger: Trigger) -> bool:
        # An agent without an unfinished plan is never deferred for good: a late plan beats an idle agent.
        return self.config.defer_when_infeasible and trigger.kind not in _CRITICAL_KINDS \
            and trigger.agent_id in self._plans and trigger.has_goal

    def _cold_holdable(self, trigger: Trigger, n: Optional[int]) -> bool:
        # No latency fit yet, or no context read yet this episode (N unknown): no backlog can be predicted, so do
        # not build one. One call at a time until both are known; the others are held and decided again when a
        # call finishes (rule 6's hold). Other robots' requests at a shared server do not hold it: nothing here
        # could predict when their load would let it through, and a robot that never calls never learns.
        return self.config.defer_when_infeasible and (not self.latency_model.ready or n is None) \
            and trigger.kind not in _CRITICAL_KINDS and bool(self._calls_in_flight())

    def _holdable(self, trigger: Trigger, backlog_ms: float) -> bool:
        # Its call would miss because of the calls ahead of it: make it when they are done instead.
        return self.config.defer_when_infeasible and trigger.kind not in _CRITICAL_KINDS and backlog_ms > 0.0 \
            and (bool(self._calls_in_flight()) or self.server_calls > 0)

    def _make_decision(self, trigger, agent, reason, override, budget, predicted) -> Decision:
        admitted = reason.admits
        return Decision(
            decision_id=f"{self._id_prefix}/{next(self._ids)}",
            trigger=trigger,
            admitted=admitted,
            reason=reason,
            mode=budget.mode if admitted else Mode.DEFER_REPLAN,
            token_budget=budget.token_budget if admitted else 0,
            slo_ms=budget.slo_ms if admitted else 0.0,
            hard_deadline_ms=budget.hard_deadline_ms if admitted else 0.0,
            override=admitted and override,
            steps_since_call=agent.steps_since_call(trigger.step),
            steps_since_change=agent.steps_since_change(trigger.step),
            consecutive_failures=trigger.consecutive_failures,
            consecutive_deferrals=agent.consecutive_deferrals,
            predicted_p95_ms=predicted if admitted else math.nan,
        )

    def _apply(self, decision: Decision, agent: AgentCounters, tally: AgentTally, model_call: bool = True) -> None:
        tally.triggers += 1
        tally.by_reason[decision.reason.value] = tally.by_reason.get(decision.reason.value, 0) + 1
        if not decision.admitted:
            tally.suppressed += 1
            agent.consecutive_deferrals += 1
            return
        tally.admitted += 1
        tally.overrides += int(decision.override)
        agent.call_in_flight = True
        agent.in_flight_budget = decision.token_budget
        agent.consecutive_deferrals = 0
        if not model_call:
            return  # the call answers from the planner's own state: the cooldown (delta) runs on
        step = decision.trigger.step
        agent.last_call_step = step
        if agent is not self.team:
            self.team.last_call_step = step

    # ------------------------------------------------------------------ results

    def record_call(self, record: CallRecord) -> None:
        """Close the agent's in-flight call; a changed plan restarts the commit window.

        The change is dated at the latest step the controller has seen (from
        any agent), never earlier than the call's own step: the commit window
        runs from when the new plan could start executing, not from when the
        call was admitted.
        """
        agent = self.counters(record.agent_id)
        agent.call_in_flight = False
        agent.in_flight_cost_ms = 0.0
        if record.tokens_before > 0:
            agent.tokens_before = record.tokens_before
        if record.status in (CallStatus.OK, CallStatus.PLANNER_ERROR):
            self.quality.observe(record.tokens_after, record.fault)
        if record.status == CallStatus.OK and record.plan_changed:
            changed_at = max(record.step, self.team.latest_step)
            agent.last_change_step = changed_at
            if agent is not self.team:
                self.team.last_change_step = max(self.team.last_change_step or 0, changed_at)

    def accept_plan(self, agent_id: str, signature: tuple) -> bool:
        """Remember an agent's newly returned plan; True when it differs from its current one."""
        changed = self._plans.get(agent_id) != signature
        self._plans[agent_id] = signature
        return changed

    def observe_latency(self, sample: CallSample) -> None:
        """Feed one finished call's phase timings to the latency model."""
        self.latency_model.observe(sample)
