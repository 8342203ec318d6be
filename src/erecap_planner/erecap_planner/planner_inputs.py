"""What the planner hears between calls: context entries, step outcomes, world states and episode boundaries.

ROS-free: the node hands in each message with its conversion (`take`); entries go to the context buffer (an episode's
start forgets what came before it), and every input reaches the memory modules. Each refusal is counted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Optional, TypeVar

from brace_common.counters import Counters, Health
from brace_common.episode_boundary import before_episode
from brace_common.validation import Rejections
from brace_common.vocabulary import EpisodeEvent
from brace_common.world_state import WorldState
from brace_memory.system import MemorySystem, StepOutcome

from .context import ContextBuffer, ContextLimits, Entry
from .convert import EpisodeMark

WARNED = ("malformed_context", "malformed_world_states")
"""The counters whose non-zero value makes the planner's status WARN."""
MALFORMED = {"context_entry": "context", "world_state": "world_states"}
"""The refusals (Rejections' `what`) counted here too, as malformed_<value>."""
T = TypeVar("T")


class PlannerInputs:
    """The context buffer (under `lock`) and the inputs memory learns from; `memory()` is the call path's; refused
    inputs are counted by reason in `rejections`."""

    def __init__(self, memory: Callable[[], Optional[MemorySystem]] = lambda: None,
                 rejections: Optional[Rejections] = None) -> None:
        self.rejections = rejections if rejections is not None else Rejections()
        self.buffer = ContextBuffer()
        self.lock = threading.Lock()
        self.memory = memory
        self.episode_start_s = 0.0  # the world's stamp of the latest episode start (0: none, or unstamped)
        self.state_at: dict[str, tuple[int, int]] = {}  # agent -> (episode, step) of the latest state holding it
        self.counts = Counters(("context_entries", "malformed_context", "stale_context", "stale_outcomes",
                                "entries_forgotten", "malformed_world_states"), warn=WARNED)

    def reset(self, limits: ContextLimits) -> None:
        """An empty buffer holding at most `limits` (at configure); the counts go on."""
        with self.lock:
            self.buffer = ContextBuffer(limits=limits)

    def snapshot(self) -> ContextBuffer:
        """The context now (a call plans from it while entries keep arriving)."""
        with self.lock:
            return self.buffer.snapshot()

    def take(self, convert: Callable[[], T], use: Callable[[T], None], what: str, where: str) -> None:
        """`use` the input `convert` makes of a message, or, when `convert` refuses it (ValueError), count it by
        reason as a refused `what` (e.g. context_entry) from `where` (its agent, its world)."""
        try:
            value = convert()
        except ValueError as exc:
            if what in MALFORMED:
                self.counts.add(f"malformed_{MALFORMED[what]}")
            self.rejections.reject(what, exc, where)
            return
        use(value)

    def entry(self, entry: Entry) -> None:
        """A context entry: held for the calls (one of the previous episode's arriving late is dropped, counted)."""
        with self.lock:
            if before_episode(entry.stamp, entry.step, self.episode_start_s):
                self.counts["stale_context"] += 1  # the previous episode's, arrived after this one's start
                return
            self.buffer.add(entry)
            teammates = frozenset(self.buffer.state)
        self.counts.add("context_entries")
        memory = self.memory()
        if memory is not None:
            memory.on_context_entry(entry, teammates)

    def outcome(self, outcome: StepOutcome) -> None:
        """An executed step: memory's goal stacks advance, a failure writes a reflection."""
        if before_episode(outcome.stamp, outcome.step, self.episode_start_s):
            self.counts.add("stale_outcomes")
            return
        memory = self.memory()
        if memory is not None:
            memory.on_outcome(outcome)

    def world_state(self, state: WorldState) -> None:
        """A world's state: where each agent in it is now (`where`), and each agent's scene graph joins its session
        graph."""
        with self.lock:
            self.state_at.update({a.agent_id: (state.episode, state.step) for a in state.agents})
        memory = self.memory()
        if memory is not None:
            memory.on_world_state(state)

    def where(self, agent_id: str) -> Optional[tuple[int, int]]:
        """The (episode, step) of the latest world state holding the agent's activity (None before one): the state a
        lookahead request names."""
        with self.lock:
            return self.state_at.get(agent_id)

    def episode(self, mark: EpisodeMark) -> None:
        """An episode's start (`episode_started`) or end (`episode_ended`); another event changes nothing."""
        if mark.event == EpisodeEvent.END:
            self.episode_ended(mark.key, mark.success, mark.steps, mark.stamp_s, mark.episode)
        elif mark.event == EpisodeEvent.START:
            self.episode_started(mark.stamp_s)

    def episode_started(self, stamp_s: float) -> None:
        """A new episode: forget what was said before it began (entries of the new one may already be in)."""
        with self.lock:
            self.episode_start_s = stamp_s
            self.counts["entries_forgotten"] += self.buffer.forget_before(stamp_s)
        memory = self.memory()
        if memory is not None:
            memory.start_episode()

    def episode_ended(self, key: str, success: bool, steps: int, stamp_s: float, episode: tuple[str, int]) -> None:
        """An episode's end: a successful one keeps its agents' trajectories in the experience bank."""
        memory = self.memory()
        if memory is not None:
            memory.end_episode(key, success, steps, stamp_s, episode)

    def health(self) -> Health:
        """These counts, and what the buffer holds and dropped."""
        with self.lock:
            held = {"context.held_entries": len(self.buffer), "context.held_chars": self.buffer.chars,
                    **{f"dropped.context.{k}": v for k, v in self.buffer.dropped_by.items()}}
        return self.counts.health() + Health(held)
