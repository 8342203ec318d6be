"""ReCAP's context tree (ReCAP Alg. 1, "structured context re-injection"): a goal stack per agent.

Built from the plans the planner returns (decompose, refine, repair after a failed step) and their steps' outcomes;
`goal_stack` renders the lines a `recap` layout places before the request (docs/memory.md, "The modules' code").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from brace_common.action_schema import Step
from brace_common.counters import Counters, Health
from brace_common.vocabulary import Mode

from .records import check_agent

MAX_STEP_TEXT = 120
"""A step's text in the goal stack is cut to this many characters."""
MAX_DONE_SHOWN = 4
"""Done steps of a level shown in the goal stack (the newest); older ones are counted."""
MAX_CONSTRAINTS = 2
"""Constraints kept with an agent's task (the newest)."""
MAX_CONSTRAINT_TEXT = 400
"""A constraint's text in the goal stack is cut to this many characters."""


@dataclass
class PlanLevel:
    """One level of the tree: a plan, where its execution is, and the step that failed (if any)."""

    made_at: int                      # controller step of the call that made it
    mode: Mode
    steps: list[Step]
    done: int = 0                     # steps[:done] succeeded; steps[done] is being executed
    failed: Optional[tuple[int, str]] = None  # (index, detail) of the step that failed, until the repair ends

    def finished(self) -> bool:
        """Every step succeeded."""
        return self.done >= len(self.steps)


@dataclass
class AgentTree:
    """One agent's goal stack: its task and its plan levels (root first)."""

    task: str = ""
    levels: list[PlanLevel] = field(default_factory=list)
    rationale: str = ""
    constraints: list[str] = field(default_factory=list)


def _cut(text: str, limit: int = MAX_STEP_TEXT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


class ContextTree:
    """Goal stacks of every agent, at most `depth` plan levels each (the root and the deepest stay)."""

    def __init__(self, depth: int = 3) -> None:
        if depth < 1:
            raise ValueError(f"depth {depth} must be at least 1")
        self.depth = depth
        self.trees: dict[str, AgentTree] = {}
        self.counts = Counters(("plans", "backtracks", "repairs_done", "outcomes_unmatched"))

    def health(self, prefix: str = "") -> Health:
        """Plans taken, backtracks, repairs done and outcomes no step matched (each name after `prefix`)."""
        return self.counts.health(prefix)

    def _tree(self, agent_id: str) -> AgentTree:
        return self.trees.setdefault(check_agent(agent_id), AgentTree())

    def on_task(self, agent_id: str, text: str) -> None:
        """The agent's task is now `text` (its latest task entry)."""
        self._tree(agent_id).task = text.strip()

    def on_constraint(self, agent_id: str, text: str) -> None:
        """A constraint stated for the agent: kept with its task (the newest MAX_CONSTRAINTS, a repeat moves up)."""
        text = " ".join(text.split())
        tree = self._tree(agent_id)
        if text in tree.constraints:
            tree.constraints.remove(text)
        tree.constraints = (tree.constraints + [text])[-MAX_CONSTRAINTS:]

    def constraints(self, agent_id: str) -> list[str]:
        """The constraints kept with the agent's task (what its goal stack shows as `must:`)."""
        tree = self.trees.get(check_agent(agent_id))
        return list(tree.constraints) if tree is not None else []

    def on_task_done(self, agent_id: str) -> None:
        """The agent finished a task (or one of its parts, as a game's point): its plan levels close; the task stays
        until the agent's next task entry (a world that scores parts of one task sends no new one)."""
        tree = self._tree(agent_id)
        tree.levels, tree.rationale = [], "the previous goal was achieved"

    def on_plan(self, agent_id: str, made_at: int, mode: Mode, steps: list[Step], rationale: str = "") -> None:
        """A plan the planner returned for the agent in `mode` (Mode.*): decompose, refine or repair."""
        if not steps:
            return
        tree = self._tree(agent_id)
        self.counts["plans"] += 1
        mode = Mode(mode)
        deepest = tree.levels[-1] if tree.levels else None
        if mode == Mode.FULL_REPLAN or deepest is None:
            tree.levels = [PlanLevel(made_at, mode, list(steps))]
            tree.rationale = rationale or "decomposed the task"
        elif mode == Mode.PARTIAL_REPLAN and deepest.failed is not None:
            index, detail = deepest.failed
            self.counts["backtracks"] += 1
            tree.levels.append(PlanLevel(made_at, mode, list(steps)))
            if len(tree.levels) > self.depth:
                del tree.levels[1 if self.depth > 1 else 0]
            tree.rationale = rationale or f"repair after {deepest.steps[index].text()} failed ({detail})"
        else:
            deepest.steps = deepest.steps[:deepest.done] + list(steps)
            deepest.failed = None
            tree.rationale = rationale or "refined the remaining steps"

    def on_outcome(self, agent_id: str, action: str, success: bool, detail: str = "") -> None:
        """A step the agent executed: the deepest level's current (or next matching) step succeeded or failed."""
        tree = self.trees.get(check_agent(agent_id))
        if tree is None or not tree.levels:
            return
        level = tree.levels[-1]
        index = next((i for i in range(level.done, len(level.steps)) if level.steps[i].action == action), None)
        if index is None:
            self.counts["outcomes_unmatched"] += 1
            return
        if not success:
            level.failed = (index, detail.strip() or "failed")
            return
        level.done = index + 1
        level.failed = None
        while len(tree.levels) > 1 and tree.levels[-1].finished():
            tree.levels.pop()  # the repair achieved its parent's failed step
            parent = tree.levels[-1]
            self.counts["repairs_done"] += 1
            if parent.failed is not None:
                parent.done = parent.failed[0] + 1
                parent.failed = None

    def current_step(self, agent_id: str, action: str = "") -> Optional[Step]:
        """The step the agent executes now (with `action`: the first step from there with that action), if any."""
        tree = self.trees.get(check_agent(agent_id))
        if tree is None or not tree.levels:
            return None
        level = tree.levels[-1]
        steps = level.steps[level.done:]
        return next((s for s in steps if not action or s.action == action), None)

    def goal_stack(self, agent_id: str) -> list[str]:
        """The agent's goal stack as prompt lines (empty when it has neither task nor plan)."""
        tree = self.trees.get(check_agent(agent_id))
        if tree is None or (not tree.task and not tree.levels and not tree.constraints):
            return []
        lines = [f"task: {_cut(tree.task)}"] if tree.task else []
        lines += [f"must: {_cut(c, MAX_CONSTRAINT_TEXT)}" for c in tree.constraints]
        for depth, level in enumerate(tree.levels):
            shown = max(0, level.done - MAX_DONE_SHOWN)  # older done steps as a count: the stack stays bounded
            marks = [f"({shown} earlier steps done)"] if shown else []
            for i, step in enumerate(level.steps[shown:], start=shown):
                mark = ""
                if i < level.done:
                    mark = " [done]"
                elif level.failed is not None and level.failed[0] == i:
                    mark = f" [failed: {_cut(level.failed[1])}]"
                marks.append(_cut(step.text()) + mark)
            name = "plan" if depth == 0 else "repair"
            lines.append(f"{' ' * depth}{name} (t={level.made_at}, {Mode(level.mode).label}): {'; '.join(marks)}")
        if tree.levels:
            level = tree.levels[-1]
            if not level.finished():
                lines.append(f"now: {_cut(level.steps[level.done].text())}")
                remaining = level.steps[level.done + 1:]
                if remaining:
                    lines.append(f"remaining: {'; '.join(_cut(s.text()) for s in remaining)}")
        if tree.rationale:
            lines.append(f"last rationale: {_cut(tree.rationale)}")
        return lines

    def forget(self, agent_id: Optional[str] = None) -> None:
        """Forget one agent's tree, or every tree (an episode start)."""
        if agent_id is None:
            self.trees.clear()
        else:
            self.trees.pop(check_agent(agent_id), None)
