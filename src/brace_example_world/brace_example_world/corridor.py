"""The corridor: K agents on a row of cells, each to walk to its goal cell. ROS-free.

The smallest world the stack can plan for, as a template: an action schema (`move_to(target)` a cell, `wait()`),
a step function, the context entries the planner reads, the agents' reports, the scene graph and the episode's
verdict. A step moves every agent one cell toward its plan's current target.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from brace_common.action_schema import ActionSchema, Step
from brace_common.episode import EpisodeMetrics
from brace_common.vocabulary import Activity, Block, EntryKind
from brace_common.world_feed import AgentReport, FeedEntry
from brace_common.world_state import AgentActivity, Entity, Pose, Relation, WorldState

WORLD = "corridor"
"""Episode.world and WorldState.world of this world."""


def cell(index: int) -> str:
    """The id of cell `index`."""
    return f"cell_{index}"


@dataclass(frozen=True)
class Event:
    """What one agent's step did (an execution outcome when `action` is set)."""

    agent: str
    step: int
    action: str
    kind: EntryKind
    text: str
    success: bool = True


class Corridor:
    """One episode: agents `agent_0` ... on cells 0 .. num_cells - 1, goals drawn from `seed`."""

    def __init__(self, num_agents: int, num_cells: int, seed: int, max_steps: int) -> None:
        rng = random.Random(seed)
        self.num_cells, self.max_steps, self.t = num_cells, max_steps, 0
        self.agents = [f"agent_{i}" for i in range(num_agents)]
        self.position = {a: rng.randrange(num_cells) for a in self.agents}
        self.goal = {a: rng.choice([c for c in range(num_cells) if c != self.position[a]]) for a in self.agents}
        self.plan: dict[str, list[Step]] = {a: [] for a in self.agents}
        self.index = {a: 0 for a in self.agents}  # steps of the agent's plan done

    def schema(self, max_plan_steps: int) -> ActionSchema:
        """What an agent may call: move_to one of the cells, or wait."""
        return ActionSchema.from_dict({
            "max_steps": max_plan_steps,
            "entities": {"cell": [cell(c) for c in range(self.num_cells)]},
            "actions": {"move_to": {"target": {"type": "string", "entity": "cell"}}, "wait": {}},
        })

    @property
    def finished(self) -> bool:
        """Every agent is at its goal, or the episode ran out of steps."""
        return self.t >= self.max_steps or all(self.position[a] == self.goal[a] for a in self.agents)

    def set_plan(self, agent: str, steps: list[Step]) -> None:
        """Replace the agent's plan (validated against `schema`)."""
        self.plan[agent], self.index[agent] = list(steps), 0

    def oracle_step(self, agent: str) -> Step:
        """What the oracle plans first: straight to the goal (wait there)."""
        if self.position[agent] == self.goal[agent]:
            return Step("wait")
        return Step("move_to", {"target": cell(self.goal[agent])})

    def agrees(self, agent: str, steps: list[Step]) -> bool:
        """The plan's first step is the oracle's."""
        return bool(steps) and steps[0].call() == self.oracle_step(agent).call()

    def step(self) -> list[Event]:
        """One step of every agent: its current plan step moves it a cell toward the target, or waits."""
        self.t += 1
        events = []
        for agent in self.agents:
            if self.index[agent] >= len(self.plan[agent]):
                continue
            current = self.plan[agent][self.index[agent]]
            if current.action == "wait":
                self.index[agent] += 1
                events.append(Event(agent, self.t, "wait", EntryKind.ACTION_OUTCOME, f"{agent} waited"))
                continue
            target = int(current.parameters["target"].removeprefix("cell_"))
            here = self.position[agent]
            self.position[agent] = here + (target > here) - (target < here)
            if self.position[agent] == target:
                self.index[agent] += 1
                events.append(Event(agent, self.t, "move_to", EntryKind.ACTION_OUTCOME,
                                    f"{agent} reached {cell(target)}"))
        return events

    # ------------------------------------------------------------------ what the stack hears

    def task_entries(self) -> list[FeedEntry]:
        """Each agent's task (protected, at the episode's start)."""
        return [FeedEntry(a, 0, Block.TASK, EntryKind.TASK.value, f"{a}: go to {cell(self.goal[a])}")
                for a in self.agents]

    def step_entries(self, events: list[Event]) -> list[FeedEntry]:
        """What a step told each agent: its outcomes (history) and where it stands (state)."""
        entries = [FeedEntry(e.agent, e.step, Block.HISTORY, e.kind.value, e.text) for e in events]
        entries += [FeedEntry(a, self.t, Block.STATE, EntryKind.OBSERVATION.value,
                              f"{a} is at {cell(self.position[a])}") for a in self.agents]
        return entries

    def reports(self) -> list[AgentReport]:
        """Each agent's state (x: its cell) for the trigger monitor."""
        return [AgentReport(a, self.t, float(self.position[a]), 0.0, 0.0, self.index[a] < len(self.plan[a]))
                for a in self.agents]

    def activity(self, agent: str) -> AgentActivity:
        """What the agent is doing: its current plan step, or idle."""
        steps, index = self.plan[agent], self.index[agent]
        if index >= len(steps):
            return AgentActivity(agent, Activity.IDLE, index=index, plan_steps=len(steps))
        return AgentActivity(agent, Activity.EXECUTING, steps[index].action, steps[index].parameters_json(), index,
                             len(steps))

    def state(self, episode: int) -> WorldState:
        """The scene graph: agents and cells, where each agent is and where it must go."""
        cells = [Entity(cell(c), "place", pose=Pose.planar(c, 0.0)) for c in range(self.num_cells)]
        agents = [Entity(a, "robot", pose=Pose.planar(self.position[a], 0.0)) for a in self.agents]
        relations = [Relation(a, "at", cell(self.position[a])) for a in self.agents]
        relations += [Relation(a, "target", cell(self.goal[a])) for a in self.agents]
        return WorldState(WORLD, episode, self.t, tuple(cells + agents), tuple(relations),
                          tuple(self.activity(a) for a in self.agents))

    def metrics(self) -> EpisodeMetrics:
        """The verdict: success when every agent reached its goal."""
        arrived = sum(self.position[a] == self.goal[a] for a in self.agents)
        return EpisodeMetrics(success=arrived == len(self.agents), steps=self.t, delivered=arrived,
                              tasks=len(self.agents))
