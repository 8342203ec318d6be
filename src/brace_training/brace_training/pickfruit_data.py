"""Oracle-labelled decision points of PickFruit on the arm (planner fine-tuning and evaluation data).

ROS-free. Each seed is an episode of `robot_bridge.pickfruit.pickfruit_rollout`: the
context the twin world and the executor publish, a call for the arm at the
start, after every failed step, when a plan ended without finishing the task,
and now and then in the middle of a plan (the trigger monitor's periodic and
idle triggers), labelled with the oracle's plan: pick the first fruit of the
task that is not in the bowl, then place it in the bowl. With `detour` > 0 the
arm sometimes executes a plausible mistake (another fruit) instead, so the
data shows the states a planner's own mistakes lead to (labels stay the
oracle's).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from brace_common.action_schema import Step
from erecap_planner.context import Entry
from robot_bridge.pickfruit.pickfruit_rollout import PickFruitRollout
from robot_bridge.pickfruit.pickfruit_world import PickFruitConfig, PickFruitWorld

AGENT = "arm_0"
TARGET = "bowl"


@dataclass
class TwinPoint:
    """The context entries so far, the agent asked about, and the oracle's plan (a decision point on the twin's
    table)."""

    entries: list[Entry]
    agent_id: str
    oracle: list[Step]
    seed: int


def oracle_plan(world: PickFruitWorld) -> list[Step]:
    """Pick the first fruit of the task not yet in the bowl, and place it in the bowl (empty when done)."""
    fruits = world.snapshot()
    todo = [name for name in world.task if not fruits[name].in_bowl]
    if not todo:
        return []
    return [Step("pick", {"object": todo[0]}), Step("place", {"object": todo[0], "target": TARGET})]


def detour_plan(world: PickFruitWorld, rng: random.Random) -> list[Step]:
    """A plausible wrong plan: the same skills on a fruit the task does not ask for."""
    others = [name for name in world.config.fruits if name not in world.task] or list(world.config.fruits)
    fruit = rng.choice(others)
    return [Step("pick", {"object": fruit}), Step("place", {"object": fruit, "target": TARGET})]


def entries_of(rollout: PickFruitRollout, agent_id: str = AGENT) -> list[Entry]:
    """The rollout's context lines as the planner's buffer entries."""
    return [Entry(agent_id, line.step, line.block, line.text, line.kind.value) for line in rollout.lines]


def decision_points(seeds: Sequence[int], detour: float = 0.0, mid_plan: float = 0.25, max_calls: int = 8,
                    tasks: Sequence[int] = (1, 1, 1, 2)) -> Iterator[TwinPoint]:
    """Decision points of oracle-driven PickFruit episodes, one episode per seed (see the module docstring)."""
    for seed in seeds:
        rng = random.Random(seed)
        world = PickFruitWorld(PickFruitConfig(tasks=rng.choice(list(tasks)), slip_probability=rng.uniform(0.2, 0.6)))
        rollout = PickFruitRollout(world)
        rollout.start(seed)
        for _ in range(max_calls):
            oracle = oracle_plan(world)
            if not oracle:
                break
            yield TwinPoint(entries_of(rollout), AGENT, oracle, seed)
            plan = detour_plan(world, rng) if rng.random() < detour else oracle
            rollout.execute([(s.action, s.parameters) for s in plan], max_steps=1 if rng.random() < mid_plan else None)
