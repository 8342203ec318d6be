"""embedded_sim node: the embedded multi-agent warehouse on ROS 2.

Names are relative (the stack's namespace, /brace by default, comes from launch).

Subscribes  plan (Plan), decisions (ReplanDecision), replan_calls (ReplanCall)
Publishes   context (ContextEntry), agent_states (AgentState), outcomes (ExecutionOutcome),
            episode (Episode), /clock (rosgraph_msgs/Clock), markers (visualization_msgs/MarkerArray),
            /diagnostics

Readiness: the first episode starts only once the nodes in `wait_for_nodes`
are in the graph and the `replan_action` server answers (they may start in
any order, the planner takes seconds to load its model); past
`wait_timeout_s` diagnostics say ERROR and it keeps waiting.

Time: the simulator is the clock. It publishes /clock (simulated time, one
`sim_step_s` per step, monotonic over the run) and stamps everything it
publishes with it when `use_sim_time` is set (the node's clock otherwise);
it paces its own steps on the steady clock.

Runs `episodes` seeded episodes one after another. Every step each agent
executes one step of its plan; the step's context entries, execution outcomes
and agent states are published. With `hold_while_planning` the world does not
step while a call admitted by the controller has not returned (a plan, or a
call record saying it failed): the closed loop is in lockstep and an episode's
course depends on the plans, not on how fast the machine is. Plans are applied
when they arrive; a malformed plan is counted and dropped.
"""

from __future__ import annotations

import sys
import time
from typing import Optional

from brace_msgs.action import Replan
from brace_msgs.msg import AgentState, ContextEntry, Episode, ExecutionOutcome, Plan, ReplanCall, ReplanDecision
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.action import ActionClient
from rclpy.node import Node
from rosgraph_msgs.msg import Clock
from visualization_msgs.msg import MarkerArray

from brace_common import names, qos
from brace_common.clock import stamp_of, steady_timer
from brace_common.diagnostics import diagnostic_array, nonzero
from brace_common.episode import EpisodeResult
from brace_common.params import declare_config, reject_undeclared
from brace_common.readiness import PeerWait
from brace_common.spin import spin_node
from brace_common.validation import InvalidInput, Rejections
from brace_common.vocabulary import CallStatus, EpisodeEvent

from . import feed
from .config import SimConfig
from .markers import CallEvents, world_markers
from .warehouse import Warehouse


class EmbeddedSimNode(Node):
    """Thin rclpy shell around Warehouse and the feed."""

    def __init__(self, **kwargs) -> None:
        super().__init__("embedded_sim", **kwargs)
        self.config = declare_config(self, SimConfig)
        reject_undeclared(self)
        self.world: Optional[Warehouse] = None
        self.episode = -1
        self.done = False
        self.sim_steps = 0  # steps (and episode starts) so far: /clock = sim_steps x sim_step_s
        self.results: list[EpisodeResult] = []
        self.waiting: dict[str, float] = {}       # decision_id -> monotonic time the hold gives up
        self.episode_decisions: set[str] = set()
        self.plans = self.agreeing = 0
        self.calls = CallEvents()
        self.counts = {"steps": 0, "held_ticks": 0, "hold_timeouts": 0, "malformed_plans": 0,
                       "plans_applied": 0, "stale_plans": 0, "ticks_waiting_for_peers": 0}
        self.sim_time = self.get_parameter("use_sim_time").value
        self.rejections = Rejections(self.get_logger())

        self.context_pub = self.create_publisher(ContextEntry, names.CONTEXT, qos.EVENTS)
        self.state_pub = self.create_publisher(AgentState, names.AGENT_STATES, qos.EVENTS)
        self.outcome_pub = self.create_publisher(ExecutionOutcome, names.OUTCOMES, qos.EVENTS)
        self.episode_pub = self.create_publisher(Episode, names.EPISODE, qos.EVENTS)
        self.clock_pub = self.create_publisher(Clock, names.CLOCK, qos.CLOCK)
        self.marker_pub = self.create_publisher(MarkerArray, names.MARKERS, qos.MARKERS)
        self.diag_pub = self.create_publisher(DiagnosticArray, names.DIAGNOSTICS, qos.DIAGNOSTICS)
        self.create_subscription(Plan, names.PLAN, self.on_plan, qos.PLANS)
        self.create_subscription(ReplanDecision, names.DECISIONS, self.on_decision, qos.INPUTS)
        self.create_subscription(ReplanCall, names.REPLAN_CALLS, self.on_call, qos.INPUTS)
        actions = {self.config.replan_action: ActionClient(self, Replan, self.config.replan_action)} \
            if self.config.replan_action else {}
        self.peers = PeerWait(self, self.config.wait_for_nodes, actions, self.config.wait_settle_s,
                              self.config.wait_timeout_s)
        self.timer = steady_timer(self, self.config.step_period_s, self.tick)
        steady_timer(self, 1.0, self.publish_diagnostics)

    # ------------------------------------------------------------------ inputs

    def on_decision(self, msg: ReplanDecision) -> None:
        """An admitted call for one of this world's agents holds the world until it returns."""
        if msg.admitted and self.world is not None and msg.trigger.agent_id in self.world.agents:
            self.waiting[msg.decision_id] = time.monotonic() + self.config.hold_timeout_s
            self.episode_decisions.add(msg.decision_id)

    def on_call(self, msg: ReplanCall) -> None:
        """A call that produced no plan releases the hold; every call is drawn as a replanning event."""
        if msg.status != CallStatus.OK:
            self.waiting.pop(msg.decision_id, None)
        if self.world is not None and msg.agent_id in self.world.agents:
            x, y = self.world.agents[msg.agent_id].pos
            self.calls.add(float(x), float(y), msg.slo_met, msg.agent_id, msg.tokens_before, msg.tokens_after,
                           msg.latency_ms, msg.slo_ms)

    def on_plan(self, msg: Plan) -> None:
        """Apply a plan of this episode to its agent (malformed: counted and dropped)."""
        self.waiting.pop(msg.decision_id, None)
        if self.world is None or msg.decision_id not in self.episode_decisions:
            self.counts["stale_plans"] += 1
            return
        if msg.agent_id not in self.world.agents:
            self.counts["malformed_plans"] += 1
            self.rejections.reject("plan", InvalidInput("unknown_agent", "plan for an agent not in this world"),
                                   msg.agent_id)
            return
        try:
            steps = feed.plan_from_steps([(s.action, s.parameters_json) for s in msg.steps])
        except ValueError as exc:
            self.counts["malformed_plans"] += 1
            self.rejections.reject("plan", exc, msg.plan_id)
            return
        self.plans += 1
        self.agreeing += feed.agrees_with_oracle(self.world, msg.agent_id, steps)
        self.world.set_plan(msg.agent_id, steps)
        self.counts["plans_applied"] += 1

    # ------------------------------------------------------------------ stepping

    def progress(self) -> str:
        """Where the run is ('episode e/N step t'): brace-run's progress line."""
        return (f"episode {max(self.episode, 0) + 1}/{self.config.episodes} "
                f"step {self.world.t if self.world is not None else 0:3d}")

    def held(self) -> bool:
        """True while an admitted call has neither returned nor timed out."""
        if not self.config.hold_while_planning or not self.waiting:
            return False
        now = time.monotonic()
        for decision_id, until in list(self.waiting.items()):
            if now >= until:
                self.waiting.pop(decision_id)
                self.counts["hold_timeouts"] += 1
                self.get_logger().warning(f"no answer to call {decision_id} within hold_timeout_s; stepping on")
        return bool(self.waiting)

    def tick(self) -> None:
        """Wait for the peers, start an episode, step the world, or close the episode."""
        if self.done:
            return
        if self.peers.waiting(self.counts, self.get_logger()):
            self._publish_clock()
            return
        if self.held():
            self.counts["held_ticks"] += 1
            return
        if self.world is None:
            self.start_episode()
        elif self.world.finished:
            self.end_episode()
        else:
            self.step()

    def start_episode(self) -> None:
        """Reset the world, announce the episode, publish its task and initial states."""
        self.episode += 1
        self.world = Warehouse(self.config.world(self.episode))
        self.episode_decisions.clear()
        self.plans = self.agreeing = 0
        self.sim_steps += 1  # the episode starts after everything the previous one said (the planner forgets that)
        self.episode_pub.publish(self._episode_msg(EpisodeEvent.START))
        self._publish_entries(feed.episode_entries(self.world, self.episode))
        self._publish_entries(feed.step_entries(self.world, [], 0))
        self._publish_states()

    def step(self) -> None:
        """One world step and everything it produced."""
        events = self.world.step()
        self.counts["steps"] += 1
        self.sim_steps += 1
        stamp = self.stamp()
        for e in feed.outcomes(events):
            msg = ExecutionOutcome(agent_id=e.agent, step=e.step, action=e.action, success=e.success, detail=e.text)
            msg.header.stamp = stamp
            self.outcome_pub.publish(msg)
        self._publish_entries(feed.step_entries(self.world, events, self.config.observe_every))
        self._publish_states()

    def end_episode(self) -> None:
        """Publish the episode's metrics; stop after the last episode."""
        result = EpisodeResult(**vars(self.world.metrics()), episode=self.episode,
                               seed=self.config.seed + self.episode, plans=self.plans, plans_agreeing=self.agreeing)
        self.episode_pub.publish(self._episode_msg(EpisodeEvent.END, result))
        self.results.append(result)
        self.get_logger().info(f"episode {self.episode}: success={result.success} steps={result.steps} "
                               f"delivered={result.delivered}/{result.tasks} plans={self.plans} "
                               f"oracle-agreeing={self.agreeing}")
        self.world = None
        if self.episode + 1 >= self.config.episodes:
            self.done = True
            self.timer.cancel()

    # ------------------------------------------------------------------ outputs

    def stamp(self) -> Time:
        """The stamp of what the simulator publishes now: simulated time with use_sim_time, else the node's clock."""
        if self.sim_time:
            return stamp_of(self.sim_steps * self.config.sim_step_s)
        return self.get_clock().now().to_msg()

    def _episode_msg(self, event: EpisodeEvent, result: Optional[EpisodeResult] = None) -> Episode:
        msg = Episode(event=int(event), episode=self.episode, seed=self.config.seed + self.episode,
                      agents=self.config.agents, world="warehouse", variant=self.config.variant)
        msg.header.stamp = self.stamp()
        if result is not None:
            msg.success, msg.steps, msg.delivered, msg.tasks = (result.success, result.steps, result.delivered,
                                                                result.tasks)
            msg.path_efficiency = float(result.path_efficiency)
            msg.coordination_wait, msg.near_misses, msg.collisions = (
                result.coordination_wait, result.near_misses, result.collisions)
            msg.plans, msg.plans_agreeing = result.plans, result.plans_agreeing
        return msg

    def _publish_entries(self, entries: list[feed.FeedEntry]) -> None:
        stamp = self.stamp()
        for e in entries:
            msg = ContextEntry(agent_id=e.agent_id, step=e.step, block=int(e.block), kind=e.kind, text=e.text)
            msg.header.stamp = stamp
            self.context_pub.publish(msg)

    def _publish_clock(self) -> None:
        clock = Clock()
        clock.clock = stamp_of(self.sim_steps * self.config.sim_step_s)
        self.clock_pub.publish(clock)

    def _publish_states(self) -> None:
        stamp = self.stamp()
        for r in feed.agent_reports(self.world):
            msg = AgentState(agent_id=r.agent_id, step=r.step, tracking_error=r.tracking_error, has_goal=r.has_goal)
            msg.header.stamp, msg.header.frame_id = stamp, self.config.frame_id
            msg.position.x, msg.position.y = r.x, r.y
            self.state_pub.publish(msg)
        self._publish_clock()
        if self.config.markers:
            markers = world_markers(self.world, self.config.frame_id, stamp)
            markers.markers.extend(self.calls.markers(self.config.frame_id, stamp, (6.5, 9.0)).markers)
            self.marker_pub.publish(markers)

    def publish_diagnostics(self) -> None:
        """Readiness, episode progress, holds and dropped plans on /diagnostics."""
        waiting = not self.peers.done
        values = {"episode": self.episode, "step": self.world.t if self.world else 0, "done": self.done,
                  "waiting_for_peers": waiting, "calls_waited_on": len(self.waiting), **self.counts,
                  **{f"rejected.{k}": v for k, v in sorted(self.rejections.counts.items())}}
        errors = self.peers.errors("episodes do not start")
        self.diag_pub.publish(diagnostic_array(
            f"{self.get_name()}: embedded warehouse", values, self.get_clock().now().to_msg(),
            nonzero(self.counts, ("hold_timeouts", "malformed_plans")), errors,
            message="waiting for peers" if waiting and not errors else ""))


def main(args=None) -> int:
    """`ros2 run sim_bridges embedded_sim`; with `shutdown_when_done` it exits after the last episode."""
    return spin_node(EmbeddedSimNode, "embedded_sim", args,
                     until=lambda node: node.done and node.config.shutdown_when_done)


if __name__ == "__main__":
    sys.exit(main())
