"""The topics a world node publishes and the plumbing that fills them (context entries, agent states,
outcomes, episodes, world states, /clock, markers, /diagnostics), shared by the embedded warehouse and the AirSim bridge."""

from __future__ import annotations

from collections.abc import Iterable

from brace_msgs.msg import AgentState, ContextEntry, Episode, ExecutionOutcome, WorldState
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray
from rosgraph_msgs.msg import Clock
from visualization_msgs.msg import MarkerArray

from brace_common import names, qos
from brace_common.clock import stamp_of
from brace_common.world_state import StatePublication, world_state_msg
from brace_common.world_state import WorldState as State

from .warehouse.warehouse_feed import AgentReport, FeedEntry, outcomes


class WorldPublishers:
    """A world node's publishers (relative names, the stack's QoS) and how its reports become messages."""

    def __init__(self, node):
        self.context = node.create_publisher(ContextEntry, names.CONTEXT, qos.EVENTS)
        self.states = node.create_publisher(AgentState, names.AGENT_STATES, qos.EVENTS)
        self.outcomes = node.create_publisher(ExecutionOutcome, names.OUTCOMES, qos.EVENTS)
        self.episode = node.create_publisher(Episode, names.EPISODE, qos.EVENTS)
        self.clock = node.create_publisher(Clock, names.CLOCK, qos.CLOCK)
        self.markers = node.create_publisher(MarkerArray, names.MARKERS, qos.MARKERS)
        self.diagnostics = node.create_publisher(DiagnosticArray, names.DIAGNOSTICS, qos.DIAGNOSTICS)
        self.world_states = node.create_publisher(WorldState, names.WORLD_STATE, qos.WORLD_STATE)
        self.state_publication = StatePublication()

    def world_state(self, state: State, stamp: Time, frame_id: str) -> None:
        """Publish the world's state when it is of a new step or changed since the last one published."""
        if self.state_publication.due(state):
            self.world_states.publish(world_state_msg(state, stamp, frame_id))

    def entries(self, entries: Iterable[FeedEntry], stamp: Time) -> None:
        """Publish context entries."""
        for e in entries:
            msg = ContextEntry(agent_id=e.agent_id, step=e.step, block=int(e.block), kind=e.kind, text=e.text)
            msg.header.stamp = stamp
            self.context.publish(msg)

    def agent_states(self, reports: Iterable[AgentReport], stamp: Time, frame_id: str) -> None:
        """Publish agent states (positions in `frame_id`)."""
        for r in reports:
            msg = AgentState(agent_id=r.agent_id, step=r.step, tracking_error=r.tracking_error, has_goal=r.has_goal)
            msg.header.stamp, msg.header.frame_id = stamp, frame_id
            msg.position.x, msg.position.y, msg.position.z = float(r.x), float(r.y), float(r.z)
            self.states.publish(msg)

    def outcomes_of(self, events: Iterable, stamp: Time) -> None:
        """Publish the events that are execution outcomes (a world's Event; its `failure` category where it has
        one)."""
        for e in outcomes(list(events)):
            msg = ExecutionOutcome(agent_id=e.agent, step=e.step, action=e.action, success=e.success, detail=e.text,
                                   failure=int(getattr(e, "failure", 0)))
            msg.header.stamp = stamp
            self.outcomes.publish(msg)

    def sim_clock(self, seconds: float) -> None:
        """Publish /clock at `seconds` of simulated time."""
        clock = Clock()
        clock.clock = stamp_of(seconds)
        self.clock.publish(clock)
