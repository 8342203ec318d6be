"""trigger_monitor node: turns agent states, execution outcomes, verifier verdicts and world states into triggers
(topics, step source, drift and loops: docs/nodes.md, "trigger_monitor")."""

from __future__ import annotations

import sys
from typing import Optional

from brace_msgs.msg import AgentState, Episode, ExecutionOutcome, TriggerEvent, VerifierVerdict, WorldInfo, WorldState
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node

from brace_common import names, qos
from brace_common.clock import seconds_of, steady_timer
from brace_common.counted_inputs import CountedInputs
from brace_common.counters import Counters, Health
from brace_common.diagnostics import health_array
from brace_common.episode_boundary import before_episode
from brace_common.params import declare_config, reject_undeclared
from brace_common.replanning import Trigger
from brace_common.spin import spin_node
from brace_common.validation import Rejections
from brace_common.vocabulary import EpisodeEvent
from brace_common.world_state import received_world_state

from . import convert
from .config import MonitorConfig, MonitorNodeConfig
from .triggers import TriggerMonitor

COUNTS = ("malformed_states", "malformed_outcomes", "malformed_verdicts", "stale_states", "malformed_world_states",
          "triggers_before_episode")
QUIET = ("stale_states", "triggers_before_episode")
"""The node's counters (diagnostics keys); all but QUIET WARN."""


class TriggerMonitorNode(Node):
    """Thin rclpy shell around TriggerMonitor."""

    def __init__(self, **kwargs) -> None:
        super().__init__("trigger_monitor", **kwargs)
        self.config = declare_config(self, MonitorConfig)
        self.node_config = declare_config(self, MonitorNodeConfig)
        reject_undeclared(self)
        self.monitor = TriggerMonitor(self.config)
        self.sequence = 0
        # a stale state at an episode boundary is expected (topics are not ordered): counted, not a warning
        self.counts = Counters(COUNTS, warn=(c for c in COUNTS if c not in QUIET))
        self.episode_start_s = 0.0  # the world's stamp of the latest episode start (0: none, or unstamped)
        self.in_episode = not self.node_config.wait_for_episode  # triggers are published (else counted, dropped)
        self.begun_by_info: Optional[int] = None  # the episode a world_info began, whose START is then no news
        self.raised = Counters(())  # per TriggerKind label, from the first trigger of that kind
        self.rejections = Rejections(self.get_logger())
        self.inputs = CountedInputs()

        self.trigger_pub = self.create_publisher(TriggerEvent, names.TRIGGERS, qos.EVENTS)
        self.diag_pub = self.create_publisher(DiagnosticArray, names.DIAGNOSTICS, qos.DIAGNOSTICS)
        self.create_subscription(AgentState, names.AGENT_STATES, self.on_state, qos.STATE)
        self.inputs.subscribe(self, ExecutionOutcome, names.OUTCOMES, self.on_outcome, "outcome")
        self.inputs.subscribe(self, VerifierVerdict, names.VERDICTS, self.on_verdict, "verdict")
        self.inputs.subscribe(self, Episode, names.EPISODE, self.on_episode, "episode")
        if self.node_config.wait_for_episode:
            self.inputs.subscribe(self, WorldInfo, names.WORLD_INFO, self.on_world_info, "world_info", qos.WORLD_INFO)
        if self.config.loop_detection or self.config.drift_steps:
            self.inputs.subscribe(self, WorldState, names.WORLD_STATE, self.on_world_state, "world_state",
                                  qos.WORLD_STATE)
        if self.config.step_source == "timer":
            # The step is controller time: with use_sim_time it follows /clock.
            self.create_timer(self.config.step_period_s, self.on_tick)
        steady_timer(self, self.node_config.diagnostics_period_s, self.publish_diagnostics)

    def publish(self, triggers: list[Trigger]) -> None:
        """Publish triggers with unique ids (before the first episode: count and drop them)."""
        if not self.in_episode:
            if triggers and not self.counts["triggers_before_episode"]:
                self.get_logger().info("no world has announced an episode yet (episode, world_info): its triggers "
                                       "are counted, not raised (wait_for_episode)")
            self.counts["triggers_before_episode"] += len(triggers)
            return
        stamp = self.get_clock().now().to_msg()
        for trigger in triggers:
            self.sequence += 1
            self.raised.declare(trigger.kind.label)
            self.raised.add(trigger.kind.label)
            self.trigger_pub.publish(convert.trigger_to_msg(trigger, stamp, f"{self.get_name()}/{self.sequence}"))

    def on_episode(self, msg: Episode) -> None:
        """EVENT_START: forget the previous episode (steps restart at 0)."""
        if msg.event != EpisodeEvent.START:
            return
        if msg.episode == self.begun_by_info:  # its world_info came first and began it
            self.begun_by_info = None
            return
        self.begin_episode(msg.header.stamp)

    def on_world_info(self, msg: WorldInfo) -> None:
        """The latched description of a world's running episode: when no START came before it (this node started
        late, or the topics arrived out of order) the episode begins here."""
        if not self.in_episode:
            self.begun_by_info = msg.episode
            self.begin_episode(msg.header.stamp)

    def begin_episode(self, stamp) -> None:
        """An episode began at the world's `stamp`: triggers flow, the monitor starts over (initial plans)."""
        self.in_episode = True
        self.monitor.reset(episode_start=True)
        self.episode_start_s = seconds_of(stamp)

    def is_stale(self, msg: AgentState) -> bool:
        """A state of the previous episode that arrived after this one's start (brace_common.episode_boundary). Such
        a state would set the step ahead of the new episode's and silence every step detector until the episode
        caught up."""
        return before_episode(seconds_of(msg.header.stamp), msg.step, self.episode_start_s)

    def on_tick(self) -> None:
        """Timer step source: advance one step and evaluate the detectors."""
        self.publish(self.monitor.on_step(self.monitor.step + 1))

    def on_state(self, msg: AgentState) -> None:
        """Store an agent's state; in agent_state mode a newer step closes the previous one. A state of the previous
        episode is dropped and counted (stale_states)."""
        if self.is_stale(msg):
            self.counts["stale_states"] += 1
            return
        try:
            agent_id, step, observation = convert.observation_from_msg(msg, self.monitor.step)
        except ValueError as exc:
            self.counts["malformed_states"] += 1
            self.rejections.reject("agent_state", exc, msg.agent_id)
            return
        if self.config.step_source == "agent_state" and step > self.monitor.step:
            # States of step monitor.step are complete: evaluate them, then move on.
            if self.monitor.states:
                self.publish(self.monitor.on_step(self.monitor.step))
            self.monitor.step = step
        self.monitor.on_state(agent_id, observation)

    def on_outcome(self, msg: ExecutionOutcome) -> None:
        """Count an execution outcome; k consecutive failures raise a failure trigger."""
        try:
            agent_id, success, detail = convert.outcome_from_msg(msg)
        except ValueError as exc:
            self.counts["malformed_outcomes"] += 1
            self.rejections.reject("outcome", exc, msg.agent_id)
            return
        preempted = msg.failure == ExecutionOutcome.FAILURE_PREEMPTED
        stopped = msg.failure == ExecutionOutcome.FAILURE_SAFETY_STOP
        self.publish(self.monitor.on_outcome(agent_id, success, detail, preempted, stopped))

    def on_verdict(self, msg: VerifierVerdict) -> None:
        """A confident verifier violation raises a preempt trigger."""
        try:
            agent_id, violation, confidence, detail = convert.verdict_from_msg(msg)
        except ValueError as exc:
            self.counts["malformed_verdicts"] += 1
            self.rejections.reject("verdict", exc, msg.agent_id)
            return
        self.publish(self.monitor.on_verdict(agent_id, violation, confidence, detail))

    def on_world_state(self, msg: WorldState) -> None:
        """A world's state: agents back in a state they held this episode raise loop triggers; the agents' tracking
        errors are kept for drift."""
        state = received_world_state(msg, self.counts, self.rejections)
        if state is not None:
            self.publish(self.monitor.on_world_state(state))

    def publish_diagnostics(self) -> None:
        """Raised triggers per kind and malformed inputs on /diagnostics."""
        health = (Health({"step": self.monitor.step, "num_agents": len(self.monitor.agents())})
                  + self.raised.health("raised.") + self.counts.health() + Health(self.rejections.health().values)
                  + self.inputs.health())
        self.diag_pub.publish(health_array(f"{self.get_name()}: trigger detection", health,
                                           self.get_clock().now().to_msg()))


def main(args=None) -> int:
    """`ros2 run brace_controller trigger_monitor`."""
    return spin_node(TriggerMonitorNode, "trigger_monitor", args)


if __name__ == "__main__":
    sys.exit(main())
