"""The paper's tables from a run's records (ROS-free): summary (Table 2), phases (Table 16), audits (Tables 10, 25).

`RunRecords` holds what a run published — call records, decisions, plans and
episode results, each tagged with its episode — whether it was collected live
or read back from the audit bag; the same functions compute the tables from
either, so a bag's report reproduces the live run's numbers.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Optional

from brace_common.episode import PLANS_AGREEING, EpisodeResult
from brace_common.replanning import Decision
from brace_common.vocabulary import CallStatus, Phase, RecapKind, TriggerKind, ZoneAction

from .metrics import churn_ratio, latency_summary, suppression_audit, trigger_audit

PHASES = tuple(p.value for p in (Phase.QUEUE, Phase.CONTEXT_COMPRESS, Phase.RETRIEVE, Phase.PREFILL, Phase.REQUEST,
                                  Phase.FIRST_TOKEN, Phase.DECODE, Phase.PARSE))
"""The call path's phases in the order they run (prefill in process; request and first_token on a planner server;
dispatch is the executor's, not the planner's)."""
RETRIEVE = Phase.RETRIEVE.value
ANSWERED = (CallStatus.OK, CallStatus.PLANNER_ERROR)
"""Statuses of calls whose call path ran to the end (a plan, or output that was not one)."""


@dataclass
class CallRow:
    """One ReplanCall record."""

    episode: int
    agent_id: str
    status: CallStatus
    latency_ms: float
    slo_ms: float
    slo_met: bool
    tokens_before: int
    tokens_after: int
    compressor: str = ""
    phases: dict[str, tuple[float, int, int]] = field(default_factory=dict)  # phase -> (ms, in, out)
    tokens_reused: int = 0
    decision_id: str = ""     # the ReplanDecision that admitted the call
    recap_call: int = 0       # ReplanCall.RECAP_*: what the call was to ReCAP's recursion (bags before it: none)
    depth: int = 0            # the ReCAP frame the call served
    vetoed: int = 0           # first steps the lookahead veto refused in the call (bags before it: none)


@dataclass
class EpisodeSpan:
    """One episode as a bag shows it: its start and end (None: not in the bag) and the calls recorded in it."""

    episode: int
    start_ns: Optional[int] = None
    end_ns: Optional[int] = None
    calls: int = 0            # calls between its start and its end
    late_calls: int = 0       # calls after its end, before the next start (answers in flight at the end)

    @property
    def complete(self) -> bool:
        """Both its start and its end are in the bag."""
        return self.start_ns is not None and self.end_ns is not None


class EpisodeLedger:
    """Episode starts, ends and calls in arrival order -> one span per episode, and what is incomplete."""

    def __init__(self) -> None:
        self.spans: list[EpisodeSpan] = []
        self.calls_before_start = 0  # calls before the first start in the bag
        self.first_ns: Optional[int] = None

    def _seen(self, time_ns: int) -> None:
        self.first_ns = time_ns if self.first_ns is None else min(self.first_ns, time_ns)

    def start(self, episode: int, time_ns: int) -> None:
        """An episode's start (a span still open before it stays incomplete)."""
        self._seen(time_ns)
        self.spans.append(EpisodeSpan(episode, start_ns=time_ns))

    def end(self, episode: int, time_ns: int) -> None:
        """An episode's end: closes its open span, or makes one without a start."""
        self._seen(time_ns)
        last = self.spans[-1] if self.spans else None
        if last is not None and last.episode == episode and last.end_ns is None:
            last.end_ns = time_ns
        else:
            self.spans.append(EpisodeSpan(episode, end_ns=time_ns))

    def call(self, time_ns: int) -> None:
        """One call record, counted for the episode it arrived in."""
        self._seen(time_ns)
        if not self.spans:
            self.calls_before_start += 1
        elif self.spans[-1].end_ns is None:
            self.spans[-1].calls += 1
        else:
            self.spans[-1].late_calls += 1

    def incomplete(self) -> list[EpisodeSpan]:
        """Spans without a start or without an end."""
        return [s for s in self.spans if not s.complete]

    def problems(self) -> list[str]:
        """One line per incomplete episode and for calls recorded before any episode started."""
        def at(time_ns: Optional[int]) -> str:
            return f"{(time_ns - (self.first_ns or 0)) / 1e9:.1f} s into the bag"

        lines = []
        for s in self.incomplete():
            if s.end_ns is None:
                lines.append(f"episode {s.episode} incomplete: started {at(s.start_ns)}, no end in the bag "
                             f"(its result is missing); {s.calls} calls recorded for it")
            else:
                lines.append(f"episode {s.episode} incomplete: ended {at(s.end_ns)} with no start in the bag; "
                             f"its calls are counted with the episode before it")
        if self.calls_before_start and self.spans:
            lines.append(f"{self.calls_before_start} calls recorded before the first episode start "
                         f"(without their episode)")
        return lines


@dataclass
class RunRecords:
    """Everything the tables need, in publication order."""

    variant: str = ""
    world: str = ""           # Episode.world of the run's episodes ("" before the first)
    num_agents: int = 0       # K, from the episodes' starts
    calls: list[CallRow] = field(default_factory=list)
    decisions: list[tuple[int, Decision]] = field(default_factory=list)   # (episode, decision)
    plans: list[tuple[int, str, tuple]] = field(default_factory=list)     # (episode, agent, signature)
    episodes: list[EpisodeResult] = field(default_factory=list)
    duration_s: float = 0.0
    ledger: EpisodeLedger = field(default_factory=EpisodeLedger)  # episode starts / ends / calls, for integrity
    interventions: list[tuple[int, str, ZoneAction]] = field(default_factory=list)  # (episode, agent, zone) begun
    monitored: bool = False   # a collision monitor's state was recorded (its counts are 0, not unknown)


def _mean(values) -> float:
    values = list(values)
    return statistics.fmean(values) if values else math.nan


def _min(values) -> float:
    values = [v for v in values if not math.isnan(v)]
    return min(values) if values else math.nan


def metric_names(episodes: list[EpisodeResult]) -> list[str]:
    """The metric names the episodes carry, in the order they first appear."""
    return list(dict.fromkeys(name for e in episodes for name in e.metrics))


def metric_summary(episodes: list[EpisodeResult]) -> dict[str, float]:
    """Each metric over the episodes that measured it: the smallest value for `min_*` metrics, else the mean."""
    out = {}
    for name in metric_names(episodes):
        values = [e.metrics[name] for e in episodes if name in e.metrics]
        out[name] = _min(values) if name.startswith("min_") else _mean(values)
    return out


def metric_total(episodes: list[EpisodeResult], name: str) -> float:
    """Metric `name` summed over the episodes (NaN when none measured it)."""
    values = [e.metrics[name] for e in episodes if name in e.metrics]
    return sum(values) if values else math.nan


def plan_changes(plans: list[tuple[int, str, tuple]]) -> int:
    """Plans that differ from the agent's previous plan in the same episode (the first plan counts)."""
    last: dict[tuple[int, str], tuple] = {}
    changes = 0
    for episode, agent, signature in plans:
        changes += last.get((episode, agent)) != signature
        last[(episode, agent)] = signature
    return changes


def summary(run: RunRecords) -> dict:
    """Table 2 / 15 row: success, tokens, latency tail, SLO violation, calls, churn, oracle agreement, and the world's
    metrics (metric_summary) under their own names.

    Oracle agreement counts only the episodes of a world with an oracle (NaN without one)."""
    n_ep = len(run.episodes)
    calls = run.calls
    answered = [c for c in calls if c.status in ANSWERED]
    lat = latency_summary([c.latency_ms for c in calls]) if calls else None
    before = _mean(c.tokens_before for c in answered)
    after = _mean(c.tokens_after for c in answered)
    judged = [e for e in run.episodes if PLANS_AGREEING in e.metrics]  # episodes of a world with an oracle
    plans = sum(e.plans for e in judged)
    changes = plan_changes(run.plans)
    return {
        "variant": run.variant,
        "episodes": n_ep,
        "success": _mean(float(e.success) for e in run.episodes),
        "delivered": f"{sum(e.delivered for e in run.episodes)}/{sum(e.tasks for e in run.episodes)}",
        "calls": len(calls),
        "calls_per_episode": len(calls) / n_ep if n_ep else math.nan,
        "tokens_before": before,
        "tokens_after": after,
        "token_reduction": (1.0 - after / before) if answered and before > 0 else math.nan,
        "prefix_reused": (_mean(c.tokens_reused for c in answered) / before) if answered and before > 0 else math.nan,
        "latency_p50_ms": lat.p50 if lat else math.nan,
        "latency_p95_ms": lat.p95 if lat else math.nan,
        "latency_p99_ms": lat.p99 if lat else math.nan,
        "slo_ms": _mean(c.slo_ms for c in calls),
        "slo_violation": (sum(not c.slo_met for c in calls) / len(calls)) if calls else math.nan,
        "planner_errors": sum(c.status == CallStatus.PLANNER_ERROR for c in calls),
        "steps_vetoed": sum(c.vetoed for c in calls),
        "deadline_misses": sum(c.status in (CallStatus.DEADLINE, CallStatus.CANCELLED) for c in calls),
        "unanswered": sum(c.status == CallStatus.UNAVAILABLE for c in calls),
        "changes_per_episode": changes / n_ep if n_ep else math.nan,
        "churn": churn_ratio(len(calls), changes),
        "oracle_agreement": (metric_total(judged, PLANS_AGREEING) / plans) if plans else math.nan,
        "retrieved_tokens": _mean(c.phases[RETRIEVE][2] for c in answered if RETRIEVE in c.phases),
        "retrieve_ms": _mean(c.phases[RETRIEVE][0] for c in answered if RETRIEVE in c.phases),
        "triggers": len(run.decisions),
        "suppressed": sum(not d.admitted for _, d in run.decisions),
        "steps": _mean(e.steps for e in run.episodes),
        **intervention_counts(run),
        **metric_summary(run.episodes),
    }


INTERVENTION_COLUMNS = {ZoneAction.STOP: "safety_stops", ZoneAction.SLOWDOWN: "slowdowns",
                        ZoneAction.APPROACH: "approaches", ZoneAction.RESTORE: "restores", ZoneAction.YIELD: "yields"}
"""The report's column of each collision monitor zone: interventions begun (an agent held for many commands is one)."""


def intervention_counts(run: RunRecords) -> dict[str, float]:
    """The collision monitor's interventions per zone over the run (NaN for a run without a monitor)."""
    counts = Counter(zone for _, _, zone in run.interventions)
    return {column: counts[zone] if run.monitored else math.nan for zone, column in INTERVENTION_COLUMNS.items()}


def phase_breakdown(run: RunRecords) -> list[dict]:
    """Table 16 columns: per phase mean / P95 ms, share of the call latency, mean tokens in / out."""
    rows = []
    total = sum(c.latency_ms for c in run.calls if c.phases)
    for phase in PHASES:
        samples = [c.phases[phase] for c in run.calls if phase in c.phases]
        if not samples:
            continue
        ms = [s[0] for s in samples]
        rows.append({"phase": phase, "calls": len(samples), "mean_ms": _mean(ms),
                     "p95_ms": latency_summary(ms).p95, "share": (sum(ms) / total) if total else math.nan,
                     "tokens_in": _mean(s[1] for s in samples), "tokens_out": _mean(s[2] for s in samples)})
    return rows


def suppression_rows(run: RunRecords, horizon_steps: int = 10) -> list[dict]:
    """Table 10, summed over episodes (steps restart every episode)."""
    per_episode: dict[int, list[Decision]] = defaultdict(list)
    for episode, d in run.decisions:
        per_episode[episode].append(d)
    totals: dict[str, list[int]] = {}
    for decisions in per_episode.values():
        for row in suppression_audit(decisions, horizon_steps):
            acc = totals.setdefault(row.reason, [0, 0, 0, 0, 0])
            for i, v in enumerate((row.segments, row.recovered, row.harmless, row.harmful, row.override_within_h)):
                acc[i] += v
    return [{"reason": r, "segments": v[0], "recovered": v[1], "harmless": v[2], "harmful": v[3],
             "override_within_h": v[4]} for r, v in sorted(totals.items())]


def trigger_rows(run: RunRecords) -> dict:
    """Table 25: triggers, admitted, suppressed by reason, share by kind, replans per minute; and ReCAP's recursion:
    its calls by kind (π decompositions, ρ refinements, reuses of a frame's subtasks without the model), the
    refinements BRACE suppressed while the frame's subtasks ran on, and the deepest frame a call served."""
    audit = trigger_audit([d for _, d in run.decisions], run.duration_s)
    recap = Counter(c.recap_call for c in run.calls)
    ran_on = sum(not d.admitted and d.trigger.kind == TriggerKind.REFINE for _, d in run.decisions)
    return {"triggers": audit.triggers, "admitted": audit.admitted, "suppressed": audit.suppressed,
            **{f"suppressed_{k}": v for k, v in sorted(audit.suppressed_by_reason.items())},
            **{f"share_{k}": v for k, v in audit.share_by_kind.items()},
            "calls_per_min": audit.calls_per_min,
            "decompositions": recap[RecapKind.DECOMPOSE], "refinements": recap[RecapKind.REFINE],
            "reuses": recap[RecapKind.REUSE], "refinements_suppressed": ran_on,
            "max_depth": max((c.depth for c in run.calls), default=0)}


def _fmt(value, percent: bool = False) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        if percent:
            return f"{value:.1%}"
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def markdown(rows: list[dict], columns: list[str] | None = None, percent: Collection[str] = ()) -> str:
    """A markdown table of `rows` (the `percent` columns' shares as percentages)."""
    if not rows:
        return "(none)\n"
    columns = columns or list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_fmt(r.get(c, ""), c in percent) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


TABLE2_COLUMNS = ["variant", "episodes", "success", "tokens_before", "tokens_after", "token_reduction",
                  "latency_p50_ms", "latency_p95_ms", "slo_ms", "slo_violation", "calls_per_episode",
                  "oracle_agreement"]


def report(runs: list[RunRecords]) -> str:
    """Every table of one or more runs as markdown."""
    rows = [summary(r) for r in runs]
    measured = metric_names([e for r in runs for e in r.episodes])  # the worlds' own metrics (per-episode means)
    parts = ["## Summary (paper Table 2 shape)\n", markdown(rows, TABLE2_COLUMNS),
             "\n## Episodes and churn\n",
             markdown(rows, ["variant", "delivered", "steps", *measured, "calls", "planner_errors", "steps_vetoed",
                             "deadline_misses", "unanswered", "changes_per_episode", "churn"])]
    if any(r.monitored for r in runs):
        parts += ["\n## Collision monitor\n", markdown(rows, ["variant", *INTERVENTION_COLUMNS.values()])]
    for r in runs:
        parts += [f"\n## Phase breakdown, {r.variant or 'run'} (paper Table 16 columns)\n", markdown(phase_breakdown(r)),
                  f"\n## Suppressed triggers, {r.variant or 'run'} (paper Table 10)\n", markdown(suppression_rows(r)),
                  f"\n## Trigger audit, {r.variant or 'run'} (paper Table 25)\n", markdown([trigger_rows(r)])]
    return "".join(parts)
