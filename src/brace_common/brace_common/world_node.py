"""The base of every world node (a mixin for a Node or a ReleasingLifecycleNode): its publishers, readiness, plan
intake, episode lifecycle, world state and diagnostics. What stays in the node: docs/nodes.md, "World nodes"."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Optional

from brace_msgs.action import Replan
from brace_msgs.msg import CollisionMonitorState, Episode, Plan, WorldInfo
from builtin_interfaces.msg import Time
from rclpy.action import ActionClient

from . import names, qos
from .acks import ACK_WAIT_S, wait_for_all_acked
from .counted_inputs import CountedInputs
from .counters import Health
from .diagnostics import diagnostic_array, health_array
from .episode import EpisodeResult, episode_msg
from .monitor_relations import MonitorRelations
from .readiness import PeerWait
from .validation import InvalidInput, Rejections, check_agent_id
from .vocabulary import Block, EntryKind, EpisodeEvent
from .world_episodes import EpisodeBook
from .world_feed import FeedEntry
from .world_io import STEPPED, WorldPublishers
from .world_state import WorldState, world_state_msg

PEERS_MISSING = "episodes do not start"
"""What a world's overdue peer wait means, in its diagnostics ERROR line."""


def _book_view(name: str, doc: str) -> property:
    """A read-only attribute of the node that is the book's `name`."""
    return property(lambda self: getattr(self.book, name), doc=doc)


class WorldNode:
    """Mixin for a world's rclpy node: `out` (WorldPublishers), `book` (EpisodeBook), `inputs` (CountedInputs),
    `rejections`, `peers` (PeerWait or None) and the steps every world takes with them.

    The node sets `world_name` (Episode.world) and provides `config` (with `variant`), `num_agents()`,
    `world_agents()` and, when it has an action schema of its own, `world_schema()`: at each episode's start it
    publishes them on world_info (latched), the only place a planner learns K and the schema from.
    """

    world_name = ""
    peers: Optional[PeerWait] = None

    def init_world(self, topics: Iterable[str] = STEPPED, episodes: Optional[int] = None,
                   seed: Optional[int] = 0) -> None:
        """Create the world's publishers of `topics` and its episode book (`episodes` None: no limit)."""
        self.book: EpisodeBook[EpisodeResult] = EpisodeBook(episodes, seed)
        self.rejections = Rejections(self.get_logger())
        self.inputs = CountedInputs()
        self.out = WorldPublishers(self, topics)
        self.monitor_relations = MonitorRelations()

    # the run's episodes, as the book keeps them (read-only)
    episode = _book_view("episode", "Index of the current (or last) episode; -1 before the first.")
    done = _book_view("done", "The run's last episode has ended.")
    plans = _book_view("plans", "Plans this episode's agents received.")
    agreeing = _book_view("agreeing", "Of this episode's plans, those whose first step was the oracle's.")
    results = _book_view("results", "The results (EpisodeResult) of the episodes that ended.")

    # ------------------------------------------------------------------ readiness and inputs

    def wait_for_peers(self, cfg: Any) -> PeerWait:
        """Readiness from a world's parameters `wait_for_nodes`, `replan_action` ('' = none), `wait_settle_s` and
        `wait_timeout_s`: the first episode waits for those nodes and the Replan server (`peers`)."""
        actions = {cfg.replan_action: ActionClient(self, Replan, cfg.replan_action)} if cfg.replan_action else {}
        self.peers = PeerWait(self, cfg.wait_for_nodes, actions, cfg.wait_settle_s, cfg.wait_timeout_s)
        return self.peers

    def release_peers(self) -> None:
        """Destroy the readiness action clients (a lifecycle world's cleanup)."""
        for client in (self.peers.action_clients.values() if self.peers is not None else ()):
            client.destroy()
        self.peers = None

    def subscribe_plans(self, callback: Callable[[Plan], None], **kwargs: Any):
        """The plan subscription (latched per agent, qos.PLANS); `kwargs` pass to create_subscription."""
        return self.create_subscription(Plan, names.PLAN, callback, qos.PLANS, **kwargs)

    def subscribe_monitor_states(self, **kwargs: Any):
        """The collision monitor's states (a world whose agents move through one): its stops, restores and yields
        become `stopped_by` relations of the world states published after them (`kwargs` pass to create_subscription)."""
        return self.inputs.subscribe(self, CollisionMonitorState, names.COLLISION_MONITOR_STATE,
                                     self.on_monitor_state, "collision_monitor_state", qos.EVENTS, **kwargs)

    def on_monitor_state(self, msg: CollisionMonitorState) -> None:
        """One monitor state: the agent is held by its obstacle, or free again (malformed: counted and dropped)."""
        try:
            self.monitor_relations.update(check_agent_id("agent_id", msg.agent_id), msg.action, msg.obstacle)
        except ValueError as exc:
            self.rejections.reject("collision_monitor_state", exc, msg.agent_id)

    def take_plan(self, msg: Plan, live: bool, known: Callable[[str], bool], current: Callable[[], bool],
                  parse: Callable[[str, list[tuple[str, str]]], list]) -> Optional[list]:
        """A plan's steps when it is for a known agent of the running episode and valid (`parse`: the world's
        steps of (action, parameters_json) pairs, ValueError naming what is wrong); else None, counted in `counts`
        as `stale_plans` (no episode running: not `live`, or not `current`) or `malformed_plans` (rejected)."""
        if not live:
            self.counts["stale_plans"] += 1
            return None
        try:
            agent = check_agent_id("agent_id", msg.agent_id)
            if not known(agent):
                raise InvalidInput("unknown_agent", f"plan for '{agent}', an agent not in this world")
            if not current():
                self.counts["stale_plans"] += 1
                return None
            return parse(agent, [(s.action, s.parameters_json) for s in msg.steps])
        except ValueError as exc:
            self.counts["malformed_plans"] += 1
            self.rejections.reject("plan", exc, msg.plan_id)
            return None

    # ------------------------------------------------------------------ outputs

    def stamp(self) -> Time:
        """The stamp of what the world publishes now (the node's clock; a simulator may give its own time)."""
        return self.get_clock().now().to_msg()

    def num_agents(self) -> int:
        """K: the agents of this world's episodes (Episode.num_agents)."""
        raise NotImplementedError

    def world_agents(self) -> list[str]:
        """The ids of this episode's agents (WorldInfo.agents; num_agents() of them)."""
        raise NotImplementedError

    def world_schema(self) -> Optional[dict]:
        """What this episode's agents may call: an ActionSchema's to_dict() with the values the planner enumerates
        for constrained decoding (WorldInfo.action_schema_json); None: the world has no schema of its own."""
        return None

    def world_info_msg(self) -> WorldInfo:
        """The WorldInfo of the book's episode: its agents and action schema (in the world's order: the planner
        describes the actions to the model in it)."""
        schema = self.world_schema()
        msg = WorldInfo(world=self.world_name, episode=max(0, self.book.episode), agents=list(self.world_agents()),
                        action_schema_json=json.dumps(schema) if schema is not None else "")
        msg.header.stamp = self.stamp()
        return msg

    def episode_msg(self, event: EpisodeEvent, result: Optional[EpisodeResult] = None) -> Episode:
        """The Episode message of `event` for the book's episode (on END, `result`'s metrics)."""
        return episode_msg(event, self.book.episode, self.book.seed, self.num_agents(), self.world_name,
                           self.config.variant, self.stamp(), result)

    def announce_start(self) -> int:
        """Begin the book's next episode and publish its WorldInfo (latched: before any trigger of the episode, and
        for a planner that starts late) and its START; its index."""
        episode = self.book.start()
        self.monitor_relations.clear()
        if self.out.world_info is not None:
            self.out.world_info.publish(self.world_info_msg())
        self.out.episode.publish(self.episode_msg(EpisodeEvent.START))
        return episode

    def announce_end(self, result: EpisodeResult) -> bool:
        """Close the running episode with `result` and publish its END; True when it was the run's last."""
        last = self.book.end(result)
        self.out.episode.publish(self.episode_msg(EpisodeEvent.END, result))
        # a world that exits after its last episode (`shutdown_when_done`) ends the run: its END must be in the bag
        # before the recorder is stopped
        if last and not wait_for_all_acked(self.out.episode):
            self.get_logger().warning(f"the last END was not acknowledged within {ACK_WAIT_S:.0f} s")
        return last

    def publish_entries(self, entries: Iterable[FeedEntry]) -> None:
        """Publish context entries, stamped now."""
        self.out.entries(entries, self.stamp())

    def publish_entry(self, agent_id: str, block: Block, kind: EntryKind, text: str, step: int = 0) -> None:
        """Publish one context entry, stamped now."""
        self.out.entries([FeedEntry(agent_id, step, block, kind.value, text)], self.stamp())

    def publish_state(self, state: WorldState, frame_id: str) -> None:
        """Publish the world's state, with the collision monitor's holds among its entities, when it is of a new step
        or changed since the last one published."""
        self.out.world_state(self.monitor_relations.add_to(state), self.stamp(), frame_id)

    def lookahead_response(self, prediction: Any, response: Any, frame_id: str) -> Any:
        """`response` (Lookahead.Response) filled from a world's one-step prediction (valid, reason, state)."""
        response.valid, response.reason = prediction.valid, prediction.reason
        if prediction.state is not None:
            response.state = world_state_msg(prediction.state, self.stamp(), frame_id)
        return response

    def rejected_health(self) -> Health:
        """Rejected inputs by reason ('rejected.<what>.<reason>') as values; a world warns on its own counters."""
        return Health(self.rejections.health().values)

    def peer_errors(self) -> list[str]:
        """The diagnostics ERROR line of an overdue peer wait; [] while waiting is not overdue (or none)."""
        return self.peers.errors(PEERS_MISSING) if self.peers is not None else []

    def publish_world_health(self, title: str, health: Health, message: str = "") -> None:
        """One status '<node>: <title>' on /diagnostics from the owners' merged `health`."""
        self.out.diagnostics.publish(health_array(f"{self.get_name()}: {title}", health,
                                                  self.get_clock().now().to_msg(), message))

    def publish_world_diagnostics(self, title: str, values: Mapping[str, Any], warnings: Iterable[str] = (),
                                  errors: Iterable[str] = (), message: str = "") -> None:
        """One status '<node>: <title>' on /diagnostics (ERROR with `errors`, WARN with `warnings`)."""
        self.out.diagnostics.publish(diagnostic_array(f"{self.get_name()}: {title}", values,
                                                      self.get_clock().now().to_msg(), warnings, errors, message))
