"""How a world node (the embedded warehouse, the AirSim bridge) takes the control stack's messages.

A mixin for rclpy nodes that run episodes: an admitted decision for one of the world's agents holds the world
(lockstep), a call record releases it when the call produced no plan and is drawn as a replanning event, a plan
of this episode is checked by the world's own parser and applied (malformed or foreign: counted and dropped,
nothing moves); and one step of the world publishes its outcomes, context entries and states. The node supplies
`world` (None between episodes), `holds`, `calls`, `counts`, `rejections`, `plans`, `agreeing`, `out`
(WorldPublishers), `sim_steps`, `stamp()`, `_publish_states()`, `config.hold_while_planning`, and the
world-specific hooks below.
"""

from __future__ import annotations

from brace_msgs.msg import Plan, ReplanCall, ReplanDecision

from brace_common.validation import InvalidInput
from brace_common.vocabulary import CallStatus


class WorldInputs:
    """on_decision / on_call / on_plan, the lockstep hold and the step, shared by the world nodes."""

    def has_agent(self, agent: str) -> bool:
        """The agent is in the current episode's world."""
        raise NotImplementedError

    def agent_xy(self, agent: str) -> tuple[float, float]:
        """Where to draw the agent's replanning event (the markers' frame)."""
        raise NotImplementedError

    def parse_plan(self, raw: list[tuple[str, str]]) -> list:
        """The world's steps from (action, parameters_json) pairs; ValueError (InvalidInput) naming what is wrong."""
        raise NotImplementedError

    def apply_plan(self, agent: str, steps: list) -> bool:
        """Give the agent its plan; True when its first step is the oracle's."""
        raise NotImplementedError

    def step_entries(self, events: list) -> list:
        """The context entries (FeedEntry) of one step's events and the states after it."""
        raise NotImplementedError

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
        """An admitted call for one of this world's agents holds the world until it returns."""
        if msg.admitted and self.world is not None and self.has_agent(msg.trigger.agent_id):
            self.holds.admit(msg.decision_id)

    def on_call(self, msg: ReplanCall) -> None:
        """A call that produced no plan releases the hold; every call is drawn as a replanning event."""
        if msg.status != CallStatus.OK:
            self.holds.release(msg.decision_id)
        if self.world is not None and self.has_agent(msg.agent_id):
            x, y = self.agent_xy(msg.agent_id)
            self.calls.add(float(x), float(y), msg.slo_met, msg.agent_id, msg.tokens_before, msg.tokens_after,
                           msg.latency_ms, msg.slo_ms)

    def on_plan(self, msg: Plan) -> None:
        """Apply a plan of this episode to its agent (malformed or for an unknown agent: counted and dropped)."""
        self.holds.release(msg.decision_id)
        if self.world is not None and not self.has_agent(msg.agent_id):
            self.counts["malformed_plans"] += 1
            self.rejections.reject("plan", InvalidInput("unknown_agent", "plan for an agent not in this world"),
                                   msg.agent_id)
            return
        if self.world is None or not self.holds.of_this_episode(msg.decision_id):
            self.counts["stale_plans"] += 1
            return
        try:
            steps = self.parse_plan([(s.action, s.parameters_json) for s in msg.steps])
        except ValueError as exc:
            self.counts["malformed_plans"] += 1
            self.rejections.reject("plan", exc, msg.plan_id)
            return
        self.plans += 1
        self.agreeing += self.apply_plan(msg.agent_id, steps)
        self.counts["plans_applied"] += 1

    def held(self) -> bool:
        """True while an admitted call has neither returned nor timed out (with hold_while_planning)."""
        if not self.config.hold_while_planning:
            return False
        for decision_id in self.holds.expired():
            self.counts["hold_timeouts"] += 1
            self.get_logger().warning(f"no answer to call {decision_id} within hold_timeout_s; stepping on")
        return self.holds.held()
