"""The topics a world node publishes and how its reports become messages (context entries, agent states,
outcomes, episodes, world states, world info, /clock, markers, /diagnostics): one set of publishers for every world."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from brace_msgs.msg import AgentState, ContextEntry, Episode, ExecutionOutcome, WorldInfo, WorldState
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray
from rosgraph_msgs.msg import Clock
from visualization_msgs.msg import MarkerArray

from . import names, qos
from .clock import stamp_of
from .world_feed import AgentReport, FeedEntry, outcomes
from .world_state import StatePublication, world_state_msg
from .world_state import WorldState as State

TOPICS = {  # attribute -> (message type, relative name, QoS)
    "context": (ContextEntry, names.CONTEXT, qos.EVENTS),
    "states": (AgentState, names.AGENT_STATES, qos.EVENTS),
    "outcomes": (ExecutionOutcome, names.OUTCOMES, qos.EVENTS),
    "episode": (Episode, names.EPISODE, qos.EVENTS),
    "clock": (Clock, names.CLOCK, qos.CLOCK),
    "markers": (MarkerArray, names.MARKERS, qos.MARKERS),
    "diagnostics": (DiagnosticArray, names.DIAGNOSTICS, qos.DIAGNOSTICS),
    "world_states": (WorldState, names.WORLD_STATE, qos.WORLD_STATE),
    "world_info": (WorldInfo, names.WORLD_INFO, qos.WORLD_INFO),
}
"""Every topic a world may publish, by the WorldPublishers attribute that holds its publisher."""

STEPPED = tuple(TOPICS)
"""A stepped simulator's topics (the warehouse, the drones): all of them."""


class WorldPublishers:
    """A world node's publishers (relative names, the stack's QoS; those of `topics`, the others None) and how its
    reports become messages."""

    def __init__(self, node, topics: Iterable[str] = STEPPED):
        self.node = node
        for attribute in TOPICS:
            setattr(self, attribute, None)
        self.state_publication = StatePublication()
        self.open(topics)

    def open(self, topics: Iterable[str], keep: Callable[[Any], Any] = lambda publisher: publisher) -> None:
        """Create the publishers of `topics` (attributes of TOPICS) that are not open yet; `keep` is given each one
        (a lifecycle world's `configured`: its cleanup destroys them)."""
        for attribute in topics:
            if getattr(self, attribute) is None:
                msg_type, name, profile = TOPICS[attribute]
                setattr(self, attribute, keep(self.node.create_publisher(msg_type, name, profile)))

    def forget(self, topics: Iterable[str]) -> None:
        """Let go of the publishers of `topics` (a lifecycle world's cleanup, whose base destroys what configure
        kept); a later world state is new again."""
        for attribute in topics:
            setattr(self, attribute, None)
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

    def outcome(self, agent_id: str, step: int, action: str, success: bool, detail: str, failure: int,
                stamp: Time) -> None:
        """Publish one execution outcome (`failure`: a Failure category, 0 when none)."""
        msg = ExecutionOutcome(agent_id=agent_id, step=step, action=action, success=success, detail=detail,
                               failure=int(failure))
        msg.header.stamp = stamp
        self.outcomes.publish(msg)

    def outcomes_of(self, events: Iterable, stamp: Time) -> None:
        """Publish the events that are execution outcomes (a world's Event; its `failure` category where it has
        one)."""
        for e in outcomes(list(events)):
            self.outcome(e.agent, e.step, e.action, e.success, e.text, getattr(e, "failure", 0), stamp)

    def sim_clock(self, seconds: float) -> None:
        """Publish /clock at `seconds` of simulated time."""
        clock = Clock()
        clock.clock = stamp_of(seconds)
        self.clock.publish(clock)
