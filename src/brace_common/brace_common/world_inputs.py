"""How a stepped world node (the warehouse, the drones, TextWorld) takes the control stack's messages: decisions hold
it, call records release it, plans are parsed and applied, and a step publishes what happened (docs/nodes.md,
"World nodes", says what the node supplies)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Optional

from brace_msgs.msg import Plan, ReplanCall, ReplanDecision

from . import names
from .counters import Counters, Health
from .episode import PLANS_AGREEING, EpisodeResult
from .holds import CallHolds
from .vocabulary import CallStatus, TriggerKind
from .world_io import STEPPED
from .world_markers import CallEvents
from .world_node import WorldNode

STEPPED_COUNTS = ("steps", "held_ticks", "hold_timeouts", "malformed_plans", "plans_applied", "stale_plans",
                  "early_plans", "ticks_waiting_for_peers")
"""The counters (diagnostics keys) of every stepped world."""
STEPPED_WARNINGS = ("hold_timeouts", "malformed_plans")
"""The stepped world's counters that make its diagnostics WARN when non-zero."""
STACK_TOPICS = tuple(t for t in STEPPED if t != "diagnostics")
"""A stepped world's topics but /diagnostics: those a lifecycle world opens at configure (open_stepped_world)."""


class WorldInputs(WorldNode):
    """on_decision / on_call / on_plan, the lockstep hold and the step, shared by the stepped world nodes."""

    def init_stepped_world(self, episodes: Optional[int], seed: int, hold_timeout_s: float,
                           counts: Iterable[str] = (), warn: Iterable[str] = (), open_now: bool = True) -> None:
        """The world's /diagnostics, episode book, holds, counters (STEPPED_COUNTS and `counts`; those of
        STEPPED_WARNINGS and `warn` WARN when non-zero) and, `open_now` (a plain node), its other topics and inputs;
        a lifecycle world opens those at configure (open_stepped_world)."""
        self.init_world(("diagnostics",), episodes, seed)
        self.holds = CallHolds(hold_timeout_s)
        self.calls = CallEvents()
        self.counts = Counters((*STEPPED_COUNTS, *counts), warn=(*STEPPED_WARNINGS, *warn))
        self.sim_steps = 0  # steps (and episode starts) so far: /clock = sim_steps x sim_step_s
        if open_now:
            self.open_stepped_world()

    def open_stepped_world(self, keep: Callable[[Any], Any] = lambda entity: entity) -> None:
        """The world's publishers (STACK_TOPICS) and inputs (plan, decisions, replan_calls), each given to `keep` (a
        lifecycle world's `configured`: its cleanup destroys them, then close_stepped_world forgets them)."""
        self.out.open(STACK_TOPICS, keep=keep)
        keep(self.subscribe_plans(self.on_plan))
        keep(self.inputs.subscribe(self, ReplanDecision, names.DECISIONS, self.on_decision, "decision"))
        keep(self.inputs.subscribe(self, ReplanCall, names.REPLAN_CALLS, self.on_call, "call_record"))

    def close_stepped_world(self) -> None:
        """Forget what open_stepped_world created (a lifecycle world's cleanup; its base destroys the entities)."""
        self.out.forget(STACK_TOPICS)
        self.inputs.forget()  # subscriptions made again number their publishers' samples afresh

    def has_agent(self, agent: str) -> bool:
        """The agent is in the current episode's world."""
        raise NotImplementedError

    def agent_xy(self, agent: str) -> tuple[float, float]:
        """Where to draw the agent's replanning event (the markers' frame)."""
        raise NotImplementedError

    def parse_plan(self, agent: str, raw: list[tuple[str, str]]) -> list:
        """The world's steps of `agent`'s plan from (action, parameters_json) pairs; ValueError (InvalidInput) naming
        what is wrong."""
        raise NotImplementedError

    def apply_plan(self, agent: str, steps: list) -> bool:
        """Give the agent its plan; True when its first step is the oracle's."""
        raise NotImplementedError

    def step_entries(self, events: list) -> list:
        """The context entries (FeedEntry) of one step's events and the states after it."""
        raise NotImplementedError

    def episode_result(self) -> EpisodeResult:
        """The world's record of the episode that ends: its verdict and metrics (`world.metrics()`), and the oracle
        agreement."""
        return EpisodeResult.of(self.world.metrics(), self.episode, self.book.seed, self.plans,
                                **{PLANS_AGREEING: self.agreeing})

    def episode_summary(self, result: EpisodeResult) -> str:
        """The log line of an ended episode."""
        raise NotImplementedError

    def close_world(self) -> None:
        """What the world does when its episode ended, before it is dropped (nothing by default)."""

    def begin_episode(self) -> int:
        """Announce the book's next episode (its holds and plan counts fresh, after everything the previous one
        said: the planner forgets that); its index."""
        self.holds.new_episode()
        self.sim_steps += 1
        return self.announce_start()

    def end_episode(self) -> None:
        """Publish the episode's record and drop the world; stop stepping after the last episode."""
        result = self.episode_result()
        last = self.announce_end(result)
        self.get_logger().info(f"episode {self.episode}: {self.episode_summary(result)}")
        self.close_world()
        self.world = None
        if last and self.timer is not None:
            self.timer.cancel()

    def step(self) -> None:
        """One world step and everything it produced: outcomes, context entries, states."""
        events = self.world.step()
        self.counts["steps"] += 1
        self.sim_steps += 1
        stamp = self.stamp()
        self.out.outcomes_of(events, stamp)
        self.out.entries(self.step_entries(events), stamp)
        self._publish_states()

    def advance(self) -> None:
        """A tick past readiness: hold while a call is out, else start an episode, step, or close the episode."""
        if self.world is not None and self.held():
            self.counts["held_ticks"] += 1
            return
        if self.world is None:
            self.start_episode()
        elif self.world.finished:
            self.end_episode()
        else:
            self.step()

    def on_decision(self, msg: ReplanDecision) -> None:
        """An admitted call for one of this world's agents holds the world until it returns; a loop trigger of one
        of them is drawn where the agent is (admitted or not)."""
        if self.world is None or not self.has_agent(msg.trigger.agent_id):
            return
        early_plan = self.holds.admit(msg.decision_id) if msg.admitted else None
        if msg.trigger.kind == TriggerKind.LOOP:
            x, y = self.agent_xy(msg.trigger.agent_id)
            self.calls.add_loop(float(x), float(y), msg.trigger.agent_id)
        if early_plan is not None:   # its plan came first (holds.py): applied now
            self.on_plan(early_plan)

    def on_call(self, msg: ReplanCall) -> None:
        """A call that produced no plan releases the hold; every call is drawn as a replanning event."""
        if msg.status != CallStatus.OK:
            self.holds.release(msg.decision_id)
        if self.world is not None and self.has_agent(msg.agent_id):
            x, y = self.agent_xy(msg.agent_id)
            self.calls.add(float(x), float(y), msg.slo_met, msg.agent_id, msg.tokens_before, msg.tokens_after,
                           msg.latency_ms, msg.slo_ms)

    def on_plan(self, msg: Plan) -> None:
        """Apply a plan of this episode to its agent (malformed or for an unknown agent: counted and dropped); one
        that came before its decision waits for it (holds.py)."""
        if self.world is not None and self.has_agent(msg.agent_id) and self.holds.early(msg.decision_id):
            self.holds.release(msg.decision_id, msg)
            self.counts["early_plans"] += 1
            return
        self.holds.release(msg.decision_id)
        steps = self.take_plan(msg, self.world is not None, self.has_agent,
                               lambda: self.holds.of_this_episode(msg.decision_id),
                               self.parse_plan)
        if steps is None:
            return
        self.book.count_plan(self.apply_plan(msg.agent_id, steps))
        self.counts["plans_applied"] += 1

    def held(self) -> bool:
        """True while an admitted call has neither returned nor timed out (with hold_while_planning)."""
        if not self.config.hold_while_planning:
            return False
        for decision_id in self.holds.expired():
            self.counts["hold_timeouts"] += 1
            self.get_logger().warning(f"no answer to call {decision_id} within hold_timeout_s; stepping on")
        return self.holds.held()

    def waiting_for_peers(self) -> bool:
        """The first episode still waits for its peers."""
        return self.peers is not None and not self.peers.done

    def stepped_health(self) -> Health:
        """What every stepped world reports: episode, step, done, readiness, holds, its counters (WARN on the marked
        ones), rejected and lost inputs (WARN on a loss), and an overdue peer wait (ERROR)."""
        state = Health({"episode": self.episode, "step": self.world.t if self.world is not None else 0,
                        "done": self.done, "waiting_for_peers": self.waiting_for_peers(),
                        "calls_waited_on": len(self.holds.waiting)})
        return (state + self.counts.health() + self.rejected_health() + self.inputs.health()
                + Health(errors=tuple(self.peer_errors())))

    def publish_stepped_health(self, title: str, health: Health) -> None:
        """Publish `health` as the world's status, 'waiting for peers' while it waits and nothing is in error."""
        waiting = self.waiting_for_peers() and not health.errors
        self.publish_world_health(title, health, message="waiting for peers" if waiting else "")
