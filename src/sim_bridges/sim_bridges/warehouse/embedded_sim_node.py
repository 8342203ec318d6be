"""embedded_sim node: the embedded multi-agent warehouse on ROS 2 (topics, readiness, time and lockstep:
docs/nodes.md, "embedded_sim")."""

from __future__ import annotations

import sys
from typing import Optional

from brace_msgs.srv import Lookahead
from builtin_interfaces.msg import Time
from rclpy.node import Node

from brace_common import names
from brace_common.clock import spaced_timer, stamp_of, steady_timer
from brace_common.episode import EpisodeResult
from brace_common.params import declare_config, reject_undeclared
from brace_common.spin import spin_node
from brace_common.world_inputs import WorldInputs

from . import warehouse_feed as feed
from .warehouse_config import SimConfig
from .warehouse_markers import world_markers
from .warehouse_world import Warehouse, world_state


class EmbeddedSimNode(WorldInputs, Node):
    """Thin rclpy shell around Warehouse and the feed."""

    world_name = "warehouse"

    def __init__(self, **kwargs) -> None:
        super().__init__("embedded_sim", **kwargs)
        self.config = declare_config(self, SimConfig)
        reject_undeclared(self)
        self.world: Optional[Warehouse] = None
        self.recent = feed.RecentWorlds(self.config.lookahead_states)
        self.lookahead_asked = False  # copies cost 1-2 ms a step: only once some planner uses the service
        self.sim_time = self.get_parameter("use_sim_time").value
        self.init_stepped_world(self.config.episodes, self.config.seed, self.config.hold_timeout_s)
        self.wait_for_peers(self.config)
        self.create_service(Lookahead, names.LOOKAHEAD, self.on_lookahead)
        self.timer = spaced_timer(self, self.config.step_period_s, self.tick)
        steady_timer(self, 1.0, self.publish_diagnostics)

    # ------------------------------------------------------------------ inputs

    def has_agent(self, agent: str) -> bool:
        """The agent is in this episode's warehouse."""
        return agent in self.world.agents

    def agent_xy(self, agent: str) -> tuple[float, float]:
        """The agent's cell."""
        return self.world.agents[agent].pos

    def parse_plan(self, agent: str, raw: list[tuple[str, str]]) -> list:
        """Warehouse steps (names only)."""
        return feed.plan_from_steps(raw)

    def apply_plan(self, agent: str, steps: list) -> bool:
        """Set the agent's plan; True when its first step is the oracle's."""
        agrees = feed.agrees_with_oracle(self.world, agent, steps)
        self.world.set_plan(agent, steps)
        self._publish_world_state()
        return agrees

    def on_lookahead(self, request: Lookahead.Request, response: Lookahead.Response) -> Lookahead.Response:
        """One step of the transition model for a candidate step from the live state or a recent one, on a copy (the
        live world does not change)."""
        self.lookahead_asked = True
        prediction = feed.answer_lookahead(self.world, self.episode, request.episode, request.step, request.agent_id,
                                           request.action, request.parameters_json, self.recent)
        return self.lookahead_response(prediction, response, self.config.frame_id)

    # ------------------------------------------------------------------ stepping

    def progress(self) -> str:
        """Where the run is ('episode e/N step t'): brace-run's progress line."""
        return f"{self.book.progress()} step {self.world.t if self.world is not None else 0:3d}"

    def tick(self) -> None:
        """Wait for the peers, start an episode, step the world, or close the episode."""
        if self.done:
            return
        if self.peers.waiting(self.counts, self.get_logger()):
            self._publish_clock()
            return
        self.advance()

    def start_episode(self) -> None:
        """Reset the world, announce the episode, publish its task and initial states."""
        self.recent.clear()
        self.world = Warehouse(self.config.world(self.episode + 1))
        episode = self.begin_episode()
        self.publish_entries(feed.episode_entries(self.world, episode))
        self.publish_entries(feed.step_entries(self.world, [], 0))
        self._publish_states()

    def step(self) -> None:
        """Keep the state about to pass for late lookahead requests (once any came), then step."""
        if self.lookahead_asked:
            self.recent.record(self.episode, self.world)
        super().step()

    def step_entries(self, events: list) -> list:
        """The warehouse's entries of one step."""
        return feed.step_entries(self.world, events, self.config.observe_every)

    def episode_summary(self, result: EpisodeResult) -> str:
        """The log line of an ended episode."""
        return (f"success={result.success} steps={result.steps} delivered={result.delivered}/{result.tasks} "
                f"plans={self.plans} oracle-agreeing={self.agreeing}")

    # ------------------------------------------------------------------ outputs

    def num_agents(self) -> int:
        """K."""
        return self.config.num_agents

    def world_agents(self) -> list[str]:
        """The episode's robots."""
        return list(self.world.agents)

    def world_schema(self) -> dict:
        """The warehouse skills with every parameter enumerated from this episode's layout (its K robots)."""
        return feed.action_schema(self.world)

    def stamp(self) -> Time:
        """The stamp of what the simulator publishes now: simulated time with use_sim_time, else the node's clock."""
        if self.sim_time:
            return stamp_of(self.sim_steps * self.config.sim_step_s)
        return self.get_clock().now().to_msg()

    def _publish_clock(self) -> None:
        self.out.sim_clock(self.sim_steps * self.config.sim_step_s)

    def _publish_states(self) -> None:
        stamp = self.stamp()
        self.out.agent_states(feed.agent_reports(self.world), stamp, self.config.frame_id)
        self._publish_world_state()
        self._publish_clock()
        if self.config.markers:
            markers = world_markers(self.world, self.config.frame_id, stamp)
            markers.markers.extend(self.calls.markers(self.config.frame_id, stamp, (6.5, 9.0)).markers)
            self.out.markers.publish(markers)

    def _publish_world_state(self) -> None:
        self.publish_state(world_state(self.world, self.episode), self.config.frame_id)

    def publish_diagnostics(self) -> None:
        """Readiness, episode progress, holds and dropped plans on /diagnostics."""
        self.publish_stepped_health("embedded warehouse", self.stepped_health())


def main(args=None) -> int:
    """`ros2 run sim_bridges embedded_sim`; with `shutdown_when_done` it exits after the last episode."""
    return spin_node(EmbeddedSimNode, "embedded_sim", args,
                     until=lambda node: node.done and node.config.shutdown_when_done)


if __name__ == "__main__":
    sys.exit(main())
