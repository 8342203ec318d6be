"""Trigger detectors: periodic (and plan finished), failure, drift, hazard, deadlock (Eq. 12), preempt, loop.

Each detector is a small stateful object fed with observations and returning
the Triggers it raises. `TriggerMonitor` composes them behind two entry points:
`on_outcome` / `on_verdict` for events, and `on_step` for per-step evaluation
of the latest agent states; `on_world_state` for the scene graphs loop detection reads.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Optional

from brace_common.replanning import Trigger
from brace_common.session_graph import Loop, SessionGraphs
from brace_common.vocabulary import TriggerKind
from brace_common.world_state import WorldState

from .config import MonitorConfig


@dataclass
class AgentObservation:
    """Latest kinematic state of one agent as the monitor sees it."""

    position: tuple[float, float, float]
    tracking_error: float = math.nan
    has_goal: bool = False


PERIODIC_SEVERITY = 1.0
"""The severity of every periodic trigger (the interval, an initial or a finished plan): at or above the controller's
`reuse_severity` the check of a running plan is a partial replan."""


def _clip01(x: float) -> float:
    return 0.0 if not math.isfinite(x) else max(0.0, min(1.0, x))


class PeriodicDetector:
    """Raises a periodic trigger for every agent once every `interval` steps.

    With `stagger` > 0 the i-th agent's triggers come `i * stagger` steps after
    the first agent's, so a team's periodic calls do not all queue for the
    planner at the same step.
    """

    def __init__(self, interval: int, stagger: int = 0):
        self.interval = interval
        self.stagger = stagger

    def check(self, step: int, agents: Iterable[str]) -> list[Trigger]:
        """Triggers for `step` (none when interval is 0 or no agent's phase is due)."""
        if self.interval <= 0:
            return []
        return [Trigger(TriggerKind.PERIODIC, a, step, severity=PERIODIC_SEVERITY, detail=f"every {self.interval} steps")
                for i, a in enumerate(agents) if step - i * self.stagger > 0 and (step - i * self.stagger) % self.interval == 0]


class PlanDoneDetector:
    """Raises a periodic trigger when an agent's plan has run out after the agent moved.

    An agent without a goal for `idle_steps` steps, that moved more than
    `progress_m` since the episode started or since its previous such trigger,
    finished a plan and waits for the next one; asking now spares it the wait for
    its periodic trigger. An agent that idles where it was (a handoff carrier
    waiting, a parked agent) raises nothing again until it moves.
    """

    def __init__(self, idle_steps: int, progress_m: float, kind: TriggerKind = TriggerKind.PERIODIC):
        self.idle_steps = idle_steps
        self.progress_m = progress_m
        self.kind = kind
        self.idle: dict[str, int] = {}
        self.anchor: dict[str, tuple[float, float, float]] = {}

    def update(self, agent: str, step: int, state: AgentObservation) -> Optional[Trigger]:
        """One step of one agent's state."""
        anchor = self.anchor.setdefault(agent, state.position)
        if self.idle_steps <= 0:
            return None
        self.idle[agent] = 0 if state.has_goal else self.idle.get(agent, 0) + 1
        moved = math.dist(anchor, state.position)
        if self.idle[agent] != self.idle_steps or moved <= self.progress_m:
            return None
        self.anchor[agent] = state.position
        return Trigger(self.kind, agent, step, severity=PERIODIC_SEVERITY,
                       detail=f"plan finished: idle {self.idle_steps} steps after moving {moved:.2f} m")


class FailureDetector:
    """Counts consecutive failed outcomes per agent; raises at k and on every failure after."""

    def __init__(self, threshold: int):
        self.threshold = threshold
        self.consecutive: dict[str, int] = {}

    def update(self, agent: str, step: int, success: bool, detail: str = "") -> Optional[Trigger]:
        """Record one outcome; return a failure trigger when the count reaches k."""
        count = 0 if success else self.consecutive.get(agent, 0) + 1
        self.consecutive[agent] = count
        if self.threshold <= 0 or count < self.threshold:
            return None
        return Trigger(
            TriggerKind.FAILURE, agent, step, severity=_clip01(count / (2.0 * self.threshold)),
            consecutive_failures=count, detail=detail or f"{count} consecutive failures",
        )


class DriftDetector:
    """Raises a drift trigger after m consecutive steps with tracking error above a threshold."""

    def __init__(self, threshold_m: float, steps: int):
        self.threshold_m = threshold_m
        self.steps = steps
        self.run: dict[str, int] = {}

    def update(self, agent: str, step: int, tracking_error: float) -> Optional[Trigger]:
        """One step of tracking error; NaN (unknown) resets the run."""
        drifting = math.isfinite(tracking_error) and tracking_error > self.threshold_m
        run = self.run.get(agent, 0) + 1 if drifting else 0
        self.run[agent] = run
        if self.steps <= 0 or run == 0 or run % self.steps:
            return None
        excess = (tracking_error - self.threshold_m) / max(self.threshold_m, 1e-6)
        return Trigger(
            TriggerKind.DRIFT, agent, step, severity=_clip01(excess),
            detail=f"tracking error {tracking_error:.2f} m > {self.threshold_m:.2f} m for {run} steps",
        )


class HazardDetector:
    """Raises a hazard trigger for each agent closer than d_min to another agent.

    Raised when the hazard starts and again every `repeat_steps` while it lasts.
    """

    def __init__(self, distance_m: float, repeat_steps: int):
        self.distance_m = distance_m
        self.repeat_steps = repeat_steps
        self.since: dict[str, int] = {}

    def check(self, step: int, states: dict[str, AgentObservation]) -> list[Trigger]:
        """Triggers for the agents in hazard at `step`."""
        if self.distance_m <= 0:
            return []
        nearest: dict[str, tuple[float, str]] = {}
        names = sorted(states)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                d = math.dist(states[a].position, states[b].position)
                if d < self.distance_m:
                    if d < nearest.get(a, (math.inf, ""))[0]:
                        nearest[a] = (d, b)
                    if d < nearest.get(b, (math.inf, ""))[0]:
                        nearest[b] = (d, a)
        triggers = []
        for agent in names:
            if agent not in nearest:
                self.since.pop(agent, None)
                continue
            start = self.since.setdefault(agent, step)
            if (step - start) % self.repeat_steps == 0:
                d, other = nearest[agent]
                triggers.append(Trigger(
                    TriggerKind.HAZARD, agent, step, severity=_clip01(1.0 - d / self.distance_m),
                    detail=f"min distance {d:.2f} m to {other} < d_min {self.distance_m:.2f} m",
                ))
        return triggers


class DeadlockDetector:
    """Deadlock evidence Z_t = sum of stall indicators z_i over the last w steps (Eq. 12).

    z_i = 1 when an agent with a goal moved less than `progress_m` in step i.
    A trigger is raised when Z_t reaches the threshold; the window is then
    cleared so the next trigger needs fresh evidence.
    """

    def __init__(self, window: int, threshold: int, progress_m: float):
        self.window = window
        self.threshold = threshold
        self.progress_m = progress_m
        self.evidence: dict[str, deque[int]] = {}
        self.last_position: dict[str, tuple[float, float, float]] = {}

    def update(self, agent: str, step: int, state: AgentObservation) -> Optional[Trigger]:
        """One step of one agent's state."""
        previous = self.last_position.get(agent)
        self.last_position[agent] = state.position
        if self.window <= 0 or previous is None:
            return None
        stalled = int(state.has_goal and math.dist(previous, state.position) < self.progress_m)
        z = self.evidence.setdefault(agent, deque(maxlen=self.window))
        z.append(stalled)
        z_t = sum(z)
        if z_t < self.threshold:
            return None
        z.clear()
        return Trigger(
            TriggerKind.DEADLOCK, agent, step, severity=_clip01(z_t / self.window),
            detail=f"Z_t = {z_t} stalled steps in window w = {self.window}",
        )


class PreemptDetector:
    """Turns an external verifier's violation verdict into a preempt trigger."""

    def __init__(self, min_confidence: float):
        self.min_confidence = min_confidence

    def update(self, agent: str, step: int, violation: bool, confidence: float, detail: str = "") -> Optional[Trigger]:
        """A trigger when the verdict is a confident violation."""
        if not violation or not math.isfinite(confidence) or confidence < self.min_confidence:
            return None
        return Trigger(TriggerKind.PREEMPT, agent, step, severity=_clip01(confidence), detail=detail or "verifier violation")


class LoopDetector:
    """GiG's loop detection per agent: a loop trigger when an agent's state revisits its session graph.

    Raised at a revisit unless the agent's previous loop trigger is fewer than `repeat_steps` steps old.
    `loops(agent)` counts the agent's loop triggers since it last reached a state it had not held this episode;
    the failure-aware override counts them with the agent's failures (a loop is a failure to progress).
    """

    def __init__(self, enabled: bool, hops: int, cell_m: float, repeat_steps: int):
        self.enabled = enabled
        self.repeat_steps = repeat_steps
        self.graphs = SessionGraphs(hops, cell_m)
        self.last: dict[str, int] = {}
        self.count: dict[str, int] = {}

    def loops(self, agent: str) -> int:
        """Loop triggers of the agent since it last reached a new state."""
        return self.count.get(agent, 0)

    def update(self, step: int, state: WorldState) -> list[Trigger]:
        """One world state; the loop triggers it raises (at controller step `step`)."""
        if not self.enabled:
            return []
        episode = self.graphs.episode
        loops = {loop.agent_id: loop for loop in self.graphs.observe(state)}
        if self.graphs.episode != episode:
            self.last, self.count = {}, {}
        for agent, graph in self.graphs.graphs.items():
            if graph.first_time:
                self.count[agent] = 0   # a state it had not held: progress
        return [self._trigger(step, loop) for agent, loop in sorted(loops.items()) if self._due(agent, step)]

    def _due(self, agent: str, step: int) -> bool:
        last = self.last.get(agent)
        return last is None or step - last >= self.repeat_steps or step < last

    def _trigger(self, step: int, loop: Loop) -> Trigger:
        self.last[loop.agent_id] = step
        self.count[loop.agent_id] = self.loops(loop.agent_id) + 1
        return Trigger(TriggerKind.LOOP, loop.agent_id, step, severity=_clip01(1.0 / max(1, loop.length - 1)),
                       detail=loop.detail())


@dataclass
class TriggerMonitor:
    """All detectors of one monitor, with the latest state of every agent."""

    config: MonitorConfig
    step: int = 0
    states: dict[str, AgentObservation] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.config.validate()
        self.reset(episode_start=False)

    def reset(self, episode_start: bool = True) -> None:
        """Forget every agent's state and counters; at an episode start the first step asks for initial plans."""
        c = self.config
        self.step = 0
        self.states = {}
        self.world_errors: dict[str, float] = {}  # the latest world state's tracking error of each agent
        self.initial_plans = episode_start and c.initial_plan
        self.initial_pending: set[str] = set(self.agents()) if self.initial_plans else set()
        self.joined: set[str] = set(self.agents())
        self.first_step: Optional[int] = None
        self.periodic = PeriodicDetector(c.periodic_interval_steps, c.periodic_stagger_steps)
        # With ReCAP a finished plan is a frame waiting for ρ: a refine trigger, which the controller serves by reuse
        # when its gates refuse the call (the agent has nothing else to do).
        self.plan_done = PlanDoneDetector(c.plan_done_idle_steps, c.deadlock_progress_m,
                                          TriggerKind.REFINE if c.recap_refine else TriggerKind.PERIODIC)
        self.failure = FailureDetector(c.failure_threshold)
        self.drift = DriftDetector(c.drift_threshold_m, c.drift_steps)
        self.hazard = HazardDetector(c.hazard_distance_m, c.hazard_repeat_steps)
        self.deadlock = DeadlockDetector(c.deadlock_window, c.deadlock_threshold, c.deadlock_progress_m)
        self.preempt = PreemptDetector(c.preempt_min_confidence)
        self.loop = LoopDetector(c.loop_detection, c.loop_view_hops, c.loop_cell_m, c.loop_repeat_steps)

    def agents(self) -> list[str]:
        """Configured agents plus any agent seen since."""
        return sorted(set(self.config.agents) | set(self.states))

    def failures(self, agent: str) -> int:
        """The agent's count for the failure-aware override: consecutive failed outcomes, plus loop triggers since
        it last reached a new state."""
        return self.failure.consecutive.get(agent, 0) + self.loop.loops(agent)

    def on_state(self, agent: str, state: AgentObservation) -> None:
        """Store the latest state of an agent (evaluated at the next step); an agent new in the episode joins it,
        with an initial plan pending when the episode asks for them."""
        if agent not in self.joined:
            self.joined.add(agent)
            if self.initial_plans:
                self.initial_pending.add(agent)
        self.states[agent] = state

    def on_outcome(self, agent: str, success: bool, detail: str = "", preempted: bool = False,
                   safety_stop: bool = False) -> list[Trigger]:
        """An execution outcome; may raise a failure trigger, and with recap_refine a refine trigger for a step that
        succeeded. A step the visual verifier preempted counts as a failure but raises none: its verdict raised the
        preempt trigger already. A collision monitor's stop is a hazard, not a failed step: it raises a hazard
        trigger and leaves the failure count alone."""
        if safety_stop:
            return [self._with_failures(Trigger(TriggerKind.HAZARD, agent, self.step, severity=1.0, detail=detail))]
        trigger = self.failure.update(agent, self.step, success, detail)
        raised = [self._with_failures(trigger)] if trigger and not preempted else []
        if success and self.config.recap_refine:  # ReCAP: a primitive ran, ρ may refine its frame (line 10)
            raised.append(self._with_failures(Trigger(TriggerKind.REFINE, agent, self.step, severity=PERIODIC_SEVERITY,
                                                       detail=f"step done: {detail}" if detail else "step done")))
        return raised

    def on_verdict(self, agent: str, violation: bool, confidence: float, detail: str = "") -> list[Trigger]:
        """A verifier verdict; may raise a preempt trigger."""
        trigger = self.preempt.update(agent, self.step, violation, confidence, detail)
        return [self._with_failures(trigger)] if trigger else []

    def on_world_state(self, state: WorldState) -> list[Trigger]:
        """A world state: the loop triggers of the agents back in a state they held (at the current step); its
        agents' tracking errors are kept for the drift detector."""
        self.world_errors.update({a.agent_id: a.tracking_error for a in state.agents})
        return [self._with_failures(t) for t in self.loop.update(self.step, state)]

    def tracking_error(self, agent: str, state: AgentObservation) -> float:
        """The agent's tracking error: its AgentState's, or where that is unknown (NaN) the latest world state's
        (PushT's contact offset: the arm knows its own pose, the world where the block is)."""
        if math.isfinite(state.tracking_error):
            return state.tracking_error
        return self.world_errors.get(agent, math.nan)

    def on_step(self, step: int) -> list[Trigger]:
        """Advance to `step` and evaluate the per-step detectors on the latest states."""
        self.step = step
        agents = self.agents()
        raised = self.periodic.check(step, agents)
        if self.first_step is None:
            self.first_step = step
        due = {a for i, a in enumerate(agents)
               if a in self.initial_pending and step >= self.first_step + i * self.config.periodic_stagger_steps}
        due -= {t.agent_id for t in raised}  # a periodic trigger at this step asks for the plan already
        raised += [Trigger(TriggerKind.PERIODIC, a, step, severity=PERIODIC_SEVERITY, detail="initial plan") for a in sorted(due)]
        self.initial_pending -= due | {t.agent_id for t in raised}
        periodic_now = {t.agent_id for t in raised}
        for agent, state in sorted(self.states.items()):
            done = self.plan_done.update(agent, step, state)
            for trigger in (None if agent in periodic_now else done,
                            self.drift.update(agent, step, self.tracking_error(agent, state)),
                            self.deadlock.update(agent, step, state)):
                if trigger:
                    raised.append(trigger)
        raised.extend(self.hazard.check(step, self.states))
        return [self._with_failures(t) for t in raised]

    def _with_failures(self, trigger: Trigger) -> Trigger:
        # Every trigger carries the agent's failure count (the controller's override rule reads it) and whether
        # the agent still has an unfinished plan (an agent waiting for one is never deferred).
        state = self.states.get(trigger.agent_id)
        return replace(trigger, consecutive_failures=self.failures(trigger.agent_id),
                       has_goal=bool(state is not None and state.has_goal))
