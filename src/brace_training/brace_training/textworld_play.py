"""A TextWorld game played one command per call, ROS-free: the planner's context buffer and memory fed as the graph
feeds them (the world's entries, the outcomes of its commands, the plans returned), for fine-tuning data and the
memory benchmark.

The graph's TextWorld stack does the same over DDS (sim_bridges.textworld.textworld_world_node and the planner
node); here the loop is direct, so many games can be played and every call's prompt rendered without a graph.
"""

from __future__ import annotations

from typing import Optional

from brace_common.action_schema import ActionSchema, Step
from brace_common.vocabulary import Mode
from brace_common.world_feed import FeedEntry, outcomes
from brace_memory.lookahead import Projection
from brace_memory.system import MemorySystem
from erecap_planner.context import ContextBuffer, Entry
from sim_bridges.textworld import textworld_feed as feed
from sim_bridges.textworld import textworld_state
from sim_bridges.textworld.textworld_game import PLAYER, TextWorldGame, command_step

from .plan_data import step_outcome


def entry_of(line: FeedEntry) -> Entry:
    """A world's feed entry as the planner's buffer entry."""
    return Entry(line.agent_id, line.step, line.block, line.text, line.kind)


class TextWorldSession:
    """One game, the player's context buffer and (optionally) the planner's memory system; GiG's modules get the
    game's world state after every step and project candidates with the game's own transition model."""

    def __init__(self, game: TextWorldGame, episode: int, seed: int, memory: Optional[MemorySystem] = None) -> None:
        self.game = game
        self.episode = episode
        self.seed = seed
        self.memory = memory
        self.buffer = ContextBuffer()
        self.calls = 0
        if memory is not None:
            memory.start_episode()
            memory.predict = self.project
        self.feed(feed.episode_entries(game, episode, seed) + feed.step_entries(game, []))
        self.observe()

    def observe(self) -> None:
        """The game's world state into memory's session graphs (when a composed module reads them)."""
        if self.memory is not None and self.memory.reads_world_states():
            self.memory.on_world_state(textworld_state.world_state(self.game, self.episode))

    def project(self, agent: str, step: Step) -> Optional[Projection]:
        """s' = T(s, step) for the lookahead module: the game's own step on a copy."""
        p = textworld_state.lookahead(self.game, self.episode, agent, step)
        return Projection(p.valid, p.reason, p.state)

    def end(self) -> int:
        """The game is over: a won game joins the experience bank (GiG Alg. 1 line 18); experiences kept."""
        if self.memory is None:
            return 0
        return self.memory.end_episode(f"textworld/{self.seed}/{self.episode}", self.game.won, self.game.t)

    @property
    def step(self) -> int:
        """The game's world step (AgentState.step)."""
        return self.game.t

    def feed(self, lines: list[FeedEntry]) -> None:
        """Entries into the buffer and memory, as the planner node takes them off `context`."""
        for line in lines:
            entry = entry_of(line)
            self.buffer.add(entry)
            if self.memory is not None:
                self.memory.on_context_entry(entry, frozenset(self.buffer.state))

    def schema(self) -> ActionSchema:
        """The planner's schema now: one command among the admissible ones."""
        return ActionSchema.from_dict(feed.action_schema(self.game))

    def mode(self) -> Mode:
        """The request mode of the next call: the first decomposes the task, later ones refine what remains (the
        previous one-command plan ran)."""
        return Mode.FULL_REPLAN if self.calls == 0 else Mode.REUSE_SUBPLAN

    def play(self, command: str, mode: Optional[Mode] = None) -> None:
        """The planner returned `command` in `mode` (None: `self.mode()`): memory takes the plan, the game runs it
        and its entries and outcomes are fed."""
        mode = self.mode() if mode is None else mode
        plan: list[Step] = [command_step(command)]
        if self.memory is not None:
            self.memory.on_plan(PLAYER, self.game.t, mode, plan)
        self.calls += 1
        self.game.set_plan(plan)
        events = self.game.step()
        self.feed(feed.step_entries(self.game, events))
        self.observe()
        if self.memory is not None:
            for event in outcomes(events):
                self.memory.on_outcome(step_outcome(event))

    def idle(self) -> None:
        """A step without a command (the call returned no plan): the player waits."""
        self.game.set_plan([])
        self.feed(feed.step_entries(self.game, self.game.step()))
        self.observe()
