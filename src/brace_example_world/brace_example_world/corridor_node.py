"""corridor_world node: the corridor on the world-node base, the template for a bridge to your own robot
(docs/integrate.md says what each hook is for)."""

from __future__ import annotations

import sys
from typing import Optional

from rclpy.node import Node

from brace_common.clock import spaced_timer, steady_timer
from brace_common.episode import EpisodeResult
from brace_common.params import declare_config, reject_undeclared
from brace_common.spin import spin_node
from brace_common.world_inputs import WorldInputs

from .corridor import WORLD, Corridor
from .corridor_config import CorridorConfig

FRAME_ID = "corridor"
"""Frame of the agents' states and of the world state (x: the cell)."""


class CorridorWorldNode(WorldInputs, Node):
    """Thin rclpy shell around Corridor: the base publishes, holds, takes plans and runs the episodes."""

    world_name = WORLD

    def __init__(self, **kwargs) -> None:
        super().__init__("corridor_world", **kwargs)
        self.config = declare_config(self, CorridorConfig)
        reject_undeclared(self)
        self.world: Optional[Corridor] = None
        self.init_stepped_world(self.config.episodes, self.config.seed, self.config.hold_timeout_s)
        self.wait_for_peers(self.config)
        self.timer = spaced_timer(self, self.config.step_period_s, self.tick)
        steady_timer(self, 1.0, self.publish_diagnostics)

    # ------------------------------------------------------------------ the hooks the base calls

    def has_agent(self, agent: str) -> bool:
        """The agent is in this episode."""
        return self.world is not None and agent in self.world.agents

    def agent_xy(self, agent: str) -> tuple[float, float]:
        """Where the agent is drawn: its cell."""
        return float(self.world.position[agent]), 0.0

    def parse_plan(self, agent: str, raw: list[tuple[str, str]]) -> list:
        """The plan's steps, checked against this episode's schema (InvalidInput names what is wrong)."""
        return self.world.schema(self.config.max_plan_steps).plan_from_pairs(raw, agent=agent)

    def apply_plan(self, agent: str, steps: list) -> bool:
        """Give the agent its plan; True when its first step is the oracle's."""
        agrees = self.world.agrees(agent, steps)
        self.world.set_plan(agent, steps)
        self._publish_world_state()
        return agrees

    def step_entries(self, events: list) -> list:
        """What one step told the planner."""
        return self.world.step_entries(events)

    def episode_summary(self, result: EpisodeResult) -> str:
        """The log line of an ended episode."""
        return f"success={result.success} steps={result.steps} arrived={result.delivered}/{result.tasks} " \
               f"plans={self.plans} oracle-agreeing={self.agreeing}"

    def num_agents(self) -> int:
        """K."""
        return self.config.num_agents

    def world_agents(self) -> list[str]:
        """This episode's agent ids."""
        return list(self.world.agents) if self.world is not None else []

    def world_schema(self) -> dict:
        """What the planner may call this episode (world_info)."""
        return self.world.schema(self.config.max_plan_steps).to_dict()

    # ------------------------------------------------------------------ stepping

    def tick(self) -> None:
        """Wait for the peers, then start an episode, step it, or close it (WorldInputs.advance)."""
        if self.done or self.peers.waiting(self.counts, self.get_logger()):
            return
        self.advance()

    def start_episode(self) -> None:
        """A new corridor; announce it (world_info, START), then its tasks and first state."""
        seed = self.config.seed + self.episode + 1
        self.world = Corridor(self.config.num_agents, self.config.num_cells, seed, self.config.max_steps)
        self.begin_episode()
        self.publish_entries(self.world.task_entries())
        self.publish_entries(self.world.step_entries([]))
        self._publish_states()

    def _publish_states(self) -> None:
        self.out.agent_states(self.world.reports(), self.stamp(), FRAME_ID)
        self._publish_world_state()

    def _publish_world_state(self) -> None:
        self.publish_state(self.world.state(self.episode), FRAME_ID)

    def publish_diagnostics(self) -> None:
        """Readiness, episode progress, holds and dropped plans on /diagnostics."""
        self.publish_stepped_health("corridor world", self.stepped_health())


def main(args=None) -> int:
    """`ros2 run brace_example_world corridor_world`; with `shutdown_when_done` it exits after the last episode."""
    return spin_node(CorridorWorldNode, "corridor_world", args,
                     until=lambda node: node.done and node.config.shutdown_when_done)


if __name__ == "__main__":
    sys.exit(main())
