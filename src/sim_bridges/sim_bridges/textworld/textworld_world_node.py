"""textworld_world node: TextWorld cooking games on ROS 2, one agent (the player) per game (topics, games and the
schema that changes with the state: docs/textworld.md)."""

from __future__ import annotations

import json
import sys
from typing import Optional

from brace_msgs.srv import Lookahead
from rclpy.node import Node

from brace_common import names
from brace_common.clock import spaced_timer, steady_timer
from brace_common.counters import Health
from brace_common.episode import EpisodeResult
from brace_common.params import declare_config, reject_undeclared
from brace_common.spin import spin_node
from brace_common.world_inputs import WorldInputs

from . import textworld_feed as feed
from .textworld_config import TextWorldConfig
from .textworld_game import PLAYER, WORLD, TextWorldGame
from .textworld_games import GameSupply
from .textworld_state import world_state

FRAME_ID = "textworld"
"""Frame of the player's AgentState (x: commands executed, y: score) and of the world state (nothing has a pose)."""


class TextWorldWorldNode(WorldInputs, Node):
    """Thin rclpy shell around TextWorldGame, its feed and the game supply."""

    world_name = WORLD

    def __init__(self, **kwargs) -> None:
        super().__init__("textworld_world", **kwargs)
        self.config = declare_config(self, TextWorldConfig)
        reject_undeclared(self)
        self.world: Optional[TextWorldGame] = None
        self.games = GameSupply(self.config.game_folder())
        self.schema_json = ""  # the action schema last published on world_info
        self.init_stepped_world(self.config.episodes, self.config.seed, self.config.hold_timeout_s,
                                ("ticks_waiting_for_game", "schema_updates"))
        self.wait_for_peers(self.config)
        self.create_service(Lookahead, names.LOOKAHEAD, self.on_lookahead)
        self.games.request(self.config.game(0))  # made while the peers come up
        self.timer = spaced_timer(self, self.config.step_period_s, self.tick)
        steady_timer(self, 1.0, self.publish_diagnostics)

    # ------------------------------------------------------------------ inputs

    def has_agent(self, agent: str) -> bool:
        """The agent is this episode's player."""
        return self.world is not None and agent == PLAYER

    def agent_xy(self, agent: str) -> tuple[float, float]:
        """The player's AgentState position: commands executed, score."""
        return float(self.world.commands), float(self.world.score)

    def parse_plan(self, agent: str, raw: list[tuple[str, str]]) -> list:
        """Command steps, checked against the world's intake schema."""
        return feed.plan_from_steps(raw)

    def apply_plan(self, agent: str, steps: list) -> bool:
        """Give the player its plan; True when its first command is the oracle's."""
        agrees = self.world.agrees(steps)
        self.world.set_plan(steps)
        self._publish_world_state()
        return agrees

    def on_lookahead(self, request: Lookahead.Request, response: Lookahead.Response) -> Lookahead.Response:
        """One command on a copy of the live game (the game itself does not change)."""
        prediction = feed.answer_lookahead(self.world, self.episode, request.episode, request.step, request.agent_id,
                                           request.action, request.parameters_json)
        return self.lookahead_response(prediction, response, FRAME_ID)

    # ------------------------------------------------------------------ stepping

    def progress(self) -> str:
        """Where the run is ('episode e/N step t'): brace-run's progress line."""
        return f"{self.book.progress()} step {self.world.t if self.world is not None else 0:3d}"

    def tick(self) -> None:
        """Wait for the peers and the episode's game, start an episode, step the game, or close the episode."""
        if self.done:
            return
        if self.peers.waiting(self.counts, self.get_logger()):
            return
        if self.world is None:
            spec = self.config.game(self.episode + 1)
            self.games.request(spec)
            if self.games.ready(spec) is None:  # GameError (the child's log) when it could not be made
                self.counts["ticks_waiting_for_game"] += 1
                return
        self.advance()

    def start_episode(self) -> None:
        """Load the episode's game, announce the episode, publish its task and initial state; start making the next
        episode's game."""
        self.world = TextWorldGame(self.games.ready(self.config.game(self.episode + 1)), self.config.max_steps)
        episode = self.begin_episode()
        self.schema_json = json.dumps(self.world_schema())
        self.publish_entries(feed.episode_entries(self.world, episode, self.book.seed))
        self.publish_entries(feed.step_entries(self.world, []))
        self._publish_states()
        if episode + 1 < self.config.episodes:
            self.games.request(self.config.game(episode + 1))

    def step_entries(self, events: list) -> list:
        """The game's entries of one step."""
        return feed.step_entries(self.world, events)

    def close_world(self) -> None:
        """Stop the ended episode's game."""
        self.world.close()

    def episode_summary(self, result: EpisodeResult) -> str:
        """The log line of an ended episode."""
        return (f"won={result.success} steps={result.steps} score={result.delivered}/{result.tasks} "
                f"commands={result.metric('commands'):.0f} failed={result.metric('failed_commands'):.0f} "
                f"plans={self.plans} oracle-agreeing={self.agreeing}")

    # ------------------------------------------------------------------ outputs

    def num_agents(self) -> int:
        """K: the player."""
        return 1

    def world_agents(self) -> list[str]:
        """The player."""
        return [PLAYER]

    def world_schema(self) -> dict:
        """`command(text)` with the admissible commands of the latest state as the text's choices."""
        return feed.action_schema(self.world, self.config.max_plan_steps)

    def _publish_states(self) -> None:
        schema = json.dumps(self.world_schema())
        if schema != self.schema_json:  # first: a trigger the states raise finds the new schema at the planner
            self.schema_json = schema
            self.out.world_info.publish(self.world_info_msg())
            self.counts["schema_updates"] += 1
        self.out.agent_states(feed.agent_reports(self.world), self.stamp(), FRAME_ID)
        self._publish_world_state()

    def _publish_world_state(self) -> None:
        self.publish_state(world_state(self.world, self.episode), FRAME_ID)

    def publish_diagnostics(self) -> None:
        """Readiness, episode progress, the game, holds and dropped plans on /diagnostics."""
        game = (Health({"game": self.world.path.stem, "score": self.world.score, "max_score": self.world.max_score})
                if self.world is not None else Health())
        self.publish_stepped_health("textworld game", self.stepped_health() + game + self.games.health())

    def close_games(self) -> None:
        """Stop the game being played and the children still making games (also for a node whose constructor a
        signal stopped half way: rclpy's shutdown destroys it too)."""
        if getattr(self, "games", None) is not None:
            self.games.close()
        if getattr(self, "world", None) is not None:
            self.world.close()
            self.world = None

    def destroy_node(self) -> None:
        """Stop the games, then destroy the node."""
        self.close_games()
        super().destroy_node()


def main(args=None) -> int:
    """`ros2 run sim_bridges textworld_world`; with `shutdown_when_done` it exits after the last episode."""
    return spin_node(TextWorldWorldNode, "textworld_world", args,
                     until=lambda node: node.done and node.config.shutdown_when_done,
                     on_exit=lambda node: node.close_games())


if __name__ == "__main__":
    sys.exit(main())
