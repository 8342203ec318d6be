"""The planner's own plan at a decision point: the policy of on-policy (DAgger-style) training episodes.

ROS-free. A PlannerPolicy asks an in-process planner call path for the plan,
as a closed-loop call with budget B_t would, and counts how often its first
step agrees with the oracle's: the agreement at the states the planner's own
plans lead to, which oracle-driven evaluation does not see.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

from brace_common.action_schema import ActionSchema, Step
from brace_common.config import resolve_path
from brace_common.vocabulary import CallStatus, Mode
from erecap_planner.adapter import merge_adapter
from erecap_planner.call_path import CallOptions, CallPath, CallRequest, LocalModel, PlannerCallPath
from erecap_planner.models import SMOLLM2, load_model
from erecap_planner.predictor import PredictorBank
from erecap_planner.pruning import PruneSchedule, table8_layers
from sim_bridges.warehouse.warehouse_feed import effective_steps, same_first_step

from .plan_data import DecisionPoint, context_buffer

SLO_MS = 60_000.0
"""A training rollout's call has no deadline that matters (the world waits for it)."""


class PlannerPolicy:
    """Plans from `path` at B_t = `token_budget`, counting as it goes: `calls`, `errors`, `first_step_agreement`,
    and per call its latency and tokens before / after compression (`scores`) and what it chose where the oracle
    chose what (`records`)."""

    def __init__(self, path: CallPath, token_budget: int) -> None:
        if token_budget <= 0:
            raise ValueError(f"token_budget must be positive, got {token_budget}")
        self.path = path
        self.token_budget = token_budget
        self.calls = 0
        self.errors = 0
        self.agreed = 0
        self.plans_agreed = 0
        self.latencies_ms: list[float] = []
        self.tokens: list[tuple[int, int]] = []
        self.full_replans = [0, 0]  # [agreed, calls] at full_replan points (no running plan: an initial or finished one)
        self.records: list[dict] = []

    def __call__(self, point: DecisionPoint) -> list[Step]:
        """The planner's plan at `point` ([] after a planner error: the caller runs the oracle's)."""
        out = self.path.run(context_buffer(point.entries), CallRequest(point.agent_id, self.token_budget, SLO_MS,
                                                                      2 * SLO_MS, int(point.mode), point.step))
        self.calls += 1
        self.latencies_ms.append(out.latency_ms)
        self.tokens.append((out.tokens_before, out.tokens_after))
        if out.status != CallStatus.OK:
            self.errors += 1
            self.records.append(point_record(point, None, False))
            return []
        plan = [Step(s.action, dict(s.parameters)) for s in out.steps]
        agreed = same_first_step(plan, point.oracle, point.here)
        self.records.append(point_record(point, plan, agreed))
        self.agreed += agreed
        if point.mode == Mode.FULL_REPLAN:
            self.full_replans[0] += agreed
            self.full_replans[1] += 1
        self.plans_agreed += plan == list(point.oracle)  # Steps compare by action and parameters
        return plan

    @property
    def first_step_agreement(self) -> float:
        """The share of calls whose plan's first step is the oracle's (0 before any call)."""
        return self.agreed / self.calls if self.calls else 0.0

    def scores(self) -> dict:
        """What the calls so far measured: points, the share that returned a valid plan, first-step and whole-plan
        agreement with the oracle (and first-step agreement at the full_replan points alone, where a planner that
        waits for a running plan to copy shows; NaN without one), latency P50 and mean tokens before / after
        compression (needs a call)."""
        if not self.calls:
            raise ValueError("no call to score")
        return {"points": self.calls, "valid_plans": round(1 - self.errors / self.calls, 3),
                "first_step_agreement": round(self.first_step_agreement, 3),
                "plan_agreement": round(self.plans_agreed / self.calls, 3),
                "full_replan_agreement": round(self.full_replans[0] / self.full_replans[1], 3) if self.full_replans[1]
                else math.nan,
                "latency_p50_ms": round(statistics.median(self.latencies_ms), 1),
                "tokens_before": round(statistics.mean(t[0] for t in self.tokens)),
                "tokens_after": round(statistics.mean(t[1] for t in self.tokens))}


def point_record(point: DecisionPoint, plan: list[Step] | None, agreed: bool) -> dict:
    """One call's line: the point (seed, step, agent, mode), the oracle's first step, the plan's first effective one
    (`effective_steps`; `error` when the call failed, '' for an empty plan) and whether they agree."""
    steps = [] if plan is None else effective_steps(plan, point.here)
    return {"seed": point.seed, "step": point.step, "agent_id": point.agent_id, "mode": Mode(point.mode).label,
            "here": point.here, "oracle_first": point.oracle[0].text() if point.oracle else "",
            "chosen_first": "error" if plan is None else (steps[0].text() if steps else ""),
            "chosen_steps": 0 if plan is None else len(plan), "agreed": int(agreed)}


def load_policy(adapter: str, predictor: str, token_budget: int, dtype: str = "bfloat16", model_path: str = SMOLLM2,
                device: str = "cpu") -> Callable[[ActionSchema], PlannerPolicy]:
    """Load a planner like the sim planner once: `model_path` with `adapter` merged ('' = none), E-RECAP with the
    `predictor` bank (Table 8 layers, keep ratio 0.7; '' = no compression) and constrained decoding. Returns the
    PlannerPolicy of an action schema (one call path per schema, on the one model). The call path's defaults stand
    for the sim parameters' first cut, layout and plan-step caps."""
    model, tokenizer = load_model(model_path, device, dtype)
    if adapter:
        merge_adapter(model, resolve_path(adapter))
    layers = table8_layers(model.config.num_hidden_layers)
    bank = PredictorBank.load(resolve_path(predictor), model.config) if predictor else None

    def policy(schema: ActionSchema) -> PlannerPolicy:
        path = PlannerCallPath(LocalModel(model, tokenizer, PruneSchedule(tuple(layers), 0.7), bank),
                               CallOptions(compressor="erecap" if bank else "none", decoding="constrained"), schema)
        return PlannerPolicy(path, token_budget)

    return policy
