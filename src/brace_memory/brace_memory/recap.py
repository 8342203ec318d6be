"""ReCAP's recursion (ReCAP Alg. 1) as each agent's durable frame stack. ROS-free.

A frame is one level of the recursion: the subtask it decomposes (the root: the agent's task), the thought T and the
subtask list S of the latest π / ρ call at that level, and where it opened. The planner's calls and the executor's
outcomes drive it, one event at a time, because here an LLM call and a step's execution are separate messages:

- `on_plan` takes a call's (T, S) for the top frame: π's when the frame has none yet (line 1), ρ's after an outcome
  (line 10). A composite S[0] opens a child frame whose prompt holds the parent's T and S (line 7), and the next call
  is π for it; an empty S closes the frame.
- `on_outcome` takes the executed primitive S[0] and its observation O (lines 4-5); S becomes S[1:] (line 9) and a
  ρ call is due. When the controller does not admit that call, the frame's S[1:] is reused as it stands (`reuse`).
- A closed frame (empty S) returns to its parent: the parent's composite S[0] is done, the parent's T and S[1:] are
  re-injected (line 9 at the parent) and ρ is due there.

`prompt_lines` renders what a call re-injects: the agent's task, every open frame's T and S (root first), and the
`done` marks of the top frame. The sliding window over the observations is per agent and per frame: `window_since`
gives the step the top frame opened at (memory_phase keeps only that agent's history entries from there, the newest
`recap_window`). Each change is one put to the memory store, so a killed planner resumes every agent's stack.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from brace_common.action_schema import Step, Subtask
from brace_common.counters import Counters, Health
from brace_common.vocabulary import RecapNeed

from .record_index import RecordIndex
from .records import MemoryRecord, RecordKind, check_agent

MAX_DEPTH = 4
"""Frames an agent's stack holds at most (the root included): a composite S[0] at the deepest frame is refused."""
MAX_SUBTASKS = 8
"""The longest S a call answers unless its schema's plans are longer (max_steps): a world that takes one step per
plan (TextWorld) still decomposes its task into several subtasks."""
MAX_THOUGHT_CHARS = 400
"""A thought's text in the prompt is cut to this many characters."""
MAX_DONE_SHOWN = 4
"""Subtasks done at the top frame that the prompt shows (the newest); older ones are counted."""
STACK_KEY = "stack"
"""The key of an agent's frame stack record (RecordKind.FRAME)."""


@dataclass
class Frame:
    """One level of the recursion: what it decomposes, its (T, S), its done subtasks, what it waits for."""

    goal: str                  # the subtask it decomposes (the root: the agent's task)
    opened_at: int             # controller step the frame opened at (its window starts there)
    thought: str = ""
    subtasks: list[Subtask] = field(default_factory=list)
    done: list[str] = field(default_factory=list)   # '<subtask> -> ok' / '-> failed: detail', oldest first
    need: RecapNeed = RecapNeed.DECOMPOSE

    def to_json(self) -> dict[str, Any]:
        """The frame as the store keeps it."""
        return {"goal": self.goal, "opened_at": self.opened_at, "thought": self.thought,
                "subtasks": [s.to_json() for s in self.subtasks], "done": list(self.done), "need": int(self.need)}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Frame:
        """A frame the store kept (ValueError when it is not one)."""
        try:
            return cls(str(raw["goal"]), int(raw["opened_at"]), str(raw["thought"]),
                       [Subtask.from_json(s) for s in raw["subtasks"]], [str(d) for d in raw["done"]],
                       RecapNeed(raw["need"]))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a stored frame: {exc}") from None


def _cut(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


@dataclass
class Transition:
    """What one event did to an agent's stack: frames opened and closed, and what the top frame needs now."""

    opened: int = 0
    closed: int = 0
    need: RecapNeed = RecapNeed.NOTHING
    depth: int = 0
    goal: str = ""       # the top frame's goal ("" without a frame)


def subtask_limit(max_steps: int) -> int:
    """The longest S of an answer under a schema whose plans hold at most `max_steps` steps."""
    return max(max_steps, MAX_SUBTASKS)


class RecapFrames:
    """Every agent's frame stack (ReCAP Alg. 1), kept in `store` (None: in this process only). Not thread-safe: the
    memory system holds its lock around every call."""

    def __init__(self, store: Optional[RecordIndex] = None, max_depth: int = MAX_DEPTH) -> None:
        if max_depth < 1:
            raise ValueError(f"max_depth {max_depth} must be at least 1")
        self.store = store
        self.max_depth = max_depth
        self.stacks: dict[str, list[Frame]] = {}
        self.tasks: dict[str, str] = {}
        self.counts = Counters(("decompositions", "refinements", "reuses", "frames_opened", "frames_closed",
                                "outcomes_unmatched", "stacks_unreadable"))

    def health(self, prefix: str = "") -> Health:
        """The calls taken (π as decompositions, ρ as refinements), reuses, frames and unmatched outcomes."""
        return self.counts.health(prefix)

    # ------------------------------------------------------------------ the stack, durably

    def stack(self, agent_id: str) -> list[Frame]:
        """The agent's frames, root first (loaded from the store the first time it is asked for)."""
        check_agent(agent_id)
        if agent_id not in self.stacks:
            self.stacks[agent_id] = self._load(agent_id)
        return self.stacks[agent_id]

    def _load(self, agent_id: str) -> list[Frame]:
        record = self.store.get(agent_id, RecordKind.FRAME, STACK_KEY) if self.store is not None else None
        if record is None:
            return []
        try:
            self.tasks[agent_id] = str(record.fields.get("task", ""))
            return [Frame.from_json(f) for f in record.fields["frames"]]
        except (ValueError, KeyError, TypeError):
            self.counts["stacks_unreadable"] += 1
            return []

    def _save(self, agent_id: str, step: int) -> None:
        if self.store is None:
            return
        frames = self.stacks.get(agent_id, [])
        self.store.put(MemoryRecord(agent_id, RecordKind.FRAME, STACK_KEY,
                                    {"task": self.tasks.get(agent_id, ""), "frames": [f.to_json() for f in frames]},
                                    first_step=step, last_step=step))

    # ------------------------------------------------------------------ events

    def on_task(self, agent_id: str, text: str, step: int = 0) -> Transition:
        """The agent's task is `text`: a new stack with its root frame, waiting for π (line 1). The same task again
        keeps the stack (a world repeats its task entry)."""
        text = " ".join(text.split())
        frames = self.stack(agent_id)
        if self.tasks.get(agent_id) == text and frames:
            return self._state(agent_id)
        self.tasks[agent_id] = text
        self.stacks[agent_id] = [Frame(text, step)]
        self.counts["frames_opened"] += 1
        self._save(agent_id, step)
        return Transition(opened=1, need=RecapNeed.DECOMPOSE, depth=0)

    def on_plan(self, agent_id: str, step: int, thought: str, subtasks: list[Subtask]) -> Transition:
        """A call's (T, S) for the agent's top frame: π's (line 1, the frame had none) or ρ's (line 10). A composite
        S[0] opens a child frame (line 7); an empty S closes the frame and returns to its parent (line 9).
        ValueError for a composite subtask at the deepest frame (its S[0] could never open a child), or when the
        agent has no open frame."""
        frames = self.stack(agent_id)
        if not frames:
            raise ValueError(f"{agent_id} has no open frame: a task comes first")
        top = frames[-1]
        if len(frames) >= self.max_depth and any(s.composite for s in subtasks):
            raise ValueError(f"a composite subtask at depth {len(frames) - 1}: at most {self.max_depth} frames")
        self.counts["decompositions" if top.need == RecapNeed.DECOMPOSE else "refinements"] += 1
        top.thought, top.subtasks = thought.strip(), list(subtasks)
        return self._settle(agent_id, step)

    def on_outcome(self, agent_id: str, step: int, action: str, success: bool, observation: str = "") -> Transition:
        """The executor ran a primitive (lines 4-5): when it is the top frame's S[0], S becomes S[1:] (line 9) and ρ
        is due; an outcome of anything else is counted and changes nothing."""
        frames = self.stack(agent_id)
        top = frames[-1] if frames else None
        if top is None or not top.subtasks or top.subtasks[0].composite or top.subtasks[0].step.action != action:
            self.counts["outcomes_unmatched"] += 1
            return self._state(agent_id)
        done = top.subtasks.pop(0)
        mark = "ok" if success else f"failed: {_cut(observation, 120) or 'failed'}"
        top.done.append(f"{done.text()} -> {mark}")
        top.need = RecapNeed.REFINE
        self._save(agent_id, step)
        return self._state(agent_id)

    def reuse(self, agent_id: str, step: int) -> Transition:
        """The controller did not admit the due ρ: the top frame's S[1:] stands as the plan (BRACE's reuse)."""
        frames = self.stack(agent_id)
        if not frames or frames[-1].need != RecapNeed.REFINE:
            return self._state(agent_id)
        self.counts["reuses"] += 1
        return self._settle(agent_id, step)

    def _settle(self, agent_id: str, step: int) -> Transition:
        """Act on the top frame's S as it stands (after π / ρ, or reused): a composite S[0] opens a child (line 7), a
        primitive S[0] is executed (line 4), an empty S closes the frame and its parent's S[0] is done, its T and
        S[1:] re-injected and ρ due there (lines 9-10). Saves the stack."""
        frames = self.stacks[agent_id]
        top, out = frames[-1], Transition()
        if not top.subtasks:
            frames.pop()
            out.closed = 1
            self.counts["frames_closed"] += 1
            if frames:
                parent = frames[-1]
                parent.done.append(f"{parent.subtasks.pop(0).text()} -> done")
                parent.need = RecapNeed.REFINE
        else:
            top.need = RecapNeed.EXECUTE
            if top.subtasks[0].composite:
                frames.append(Frame(top.subtasks[0].text(), step))
                out.opened = 1
                self.counts["frames_opened"] += 1
        self._save(agent_id, step)
        state = self._state(agent_id)
        state.opened, state.closed = out.opened, out.closed
        return state

    def _state(self, agent_id: str) -> Transition:
        frames = self.stacks.get(agent_id) or []
        if not frames:
            return Transition(need=RecapNeed.NOTHING)
        return Transition(need=frames[-1].need, depth=len(frames) - 1, goal=frames[-1].goal)

    # ------------------------------------------------------------------ what a call reads

    def reopen(self, agent_id: str, step: int, task: str = "") -> Transition:
        """A call for an agent without an open frame: a root frame for its task again (`task` when it never had one:
        a world that sends no task entry), waiting for π."""
        frames = self.stack(agent_id)
        if frames:
            return self._state(agent_id)
        self.tasks[agent_id] = self.tasks.get(agent_id) or " ".join(task.split())
        self.stacks[agent_id] = [Frame(self.tasks[agent_id], step)]
        self.counts["frames_opened"] += 1
        self._save(agent_id, step)
        return self._state(agent_id)

    def need(self, agent_id: str) -> Transition:
        """What the agent's top frame waits for, and its depth (0: the root)."""
        self.stack(agent_id)
        return self._state(agent_id)

    def goal_step(self, agent_id: str) -> Optional[Step]:
        """The composite subtask the agent's top frame decomposes (its parent's S[0]); None at the root."""
        frames = self.stack(agent_id)
        return frames[-2].subtasks[0].step if len(frames) > 1 and frames[-2].subtasks else None

    def executable(self, agent_id: str) -> list[Step]:
        """The leading primitives of the top frame's S: what the executor may run without another call."""
        frames = self.stack(agent_id)
        if not frames or frames[-1].need != RecapNeed.EXECUTE:
            return []
        out = []
        for subtask in frames[-1].subtasks:
            if subtask.composite:
                break
            out.append(subtask.step)
        return out

    def window_since(self, agent_id: str) -> int:
        """The step the agent's top frame opened at: its sliding window holds the agent's history from there
        (-1: no frame, the whole history)."""
        frames = self.stack(agent_id)
        return frames[-1].opened_at if frames else -1

    def prompt_lines(self, agent_id: str) -> list[str]:
        """What a call re-injects for the agent: its task, each open frame's goal, T and S (root first, the parents'
        S[0] being the child's goal), and the top frame's done subtasks (the newest MAX_DONE_SHOWN)."""
        frames = self.stack(agent_id)
        task = self.tasks.get(agent_id, "")
        if not frames:
            return [f"task: {task}"] if task else []
        lines = [f"task: {task}"] if task else []
        for depth, frame in enumerate(frames):
            pad = " " * depth
            if depth:
                lines.append(f"{pad}subtask {depth}: {frame.goal}")
            if frame.thought:
                lines.append(f"{pad}think: {_cut(frame.thought, MAX_THOUGHT_CHARS)}")
            if frame.subtasks:
                lines.append(f"{pad}subtasks: {'; '.join(s.text() for s in frame.subtasks)}")
        top, pad = frames[-1], " " * (len(frames) - 1)
        shown = top.done[-MAX_DONE_SHOWN:]
        if len(top.done) > len(shown):
            lines.append(f"{pad}({len(top.done) - len(shown)} earlier subtasks done)")
        lines += [f"{pad}done: {d}" for d in shown]
        return lines

    def forget(self, agent_id: Optional[str] = None) -> None:
        """Forget one agent's stack, or every agent's (an episode start), here and in the store."""
        agents = [check_agent(agent_id)] if agent_id is not None else list(self.stacks)
        if self.store is not None:
            agents = sorted(set(agents) | (set(self.store.agents()) if agent_id is None else set()))
        for agent in agents:
            self.stacks.pop(agent, None)
            self.tasks.pop(agent, None)
            if self.store is not None:
                self.store.clear(agent, RecordKind.FRAME)
