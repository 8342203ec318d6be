"""Oracle-labelled decision points of PushT on the arm (planner fine-tuning and evaluation data).

ROS-free. Each seed is an episode of `robot_bridge.pickfruit.pickfruit_rollout`
on a `PushTWorld`: the context the twin world and the executor publish, and a
call for the arm at the start and after every ended step (a push whose part is
spent, a push cut off by a lost contact, a push that ended over the goal short
of it), labelled with the oracle's plan: push the block by the part the
stand-in would press on if free to choose (`pusht_world.oracle_part`). With
`detour` > 0 the arm sometimes pushes by the other part instead, so the data
shows the states a planner's own mistakes lead to (labels stay the oracle's).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

from brace_common.action_schema import Step
from robot_bridge.pickfruit.pickfruit_rollout import PickFruitRollout
from robot_bridge.pusht.pusht_world import BLOCK, GOAL, PushTConfig, PushTWorld, oracle_part
from robot_bridge.pusht.t_block import PARTS

from .pickfruit_data import AGENT, TwinPoint, entries_of

MAX_EPISODE_S = 150.0
"""The twin run's max_episode_s: a rollout episode ends there too."""


def push_step(part: str) -> Step:
    """The plan step that pushes the block to the goal by `part`."""
    return Step("push", {"object": BLOCK, "target": GOAL, "part": part})


def oracle_plan(world: PushTWorld) -> list[Step]:
    """Push by the part the stand-in would choose freely (empty when the block is on the goal or cannot be pushed)."""
    part = oracle_part(world)
    return [] if world.success() or part is None else [push_step(part)]


def decision_points(seeds: Sequence[int], detour: float = 0.0, max_calls: int = 8,
                    contact_loss: tuple[float, float] = (0.1, 0.4)) -> Iterator[TwinPoint]:
    """Decision points of oracle-driven PushT episodes, one episode per seed (see the module docstring)."""
    for seed in seeds:
        rng = random.Random(seed)
        world = PushTWorld(PushTConfig(contact_loss_probability=rng.uniform(*contact_loss)))
        rollout = PickFruitRollout(world)
        rollout.start(seed)
        for _ in range(max_calls):
            oracle = oracle_plan(world)
            if not oracle or rollout.t > MAX_EPISODE_S:
                break
            yield TwinPoint(entries_of(rollout), AGENT, oracle, seed)
            part = oracle[0].parameters["part"]
            if rng.random() < detour:
                part = next(p for p in PARTS if p != part)
            rollout.execute([("push", push_step(part).parameters)])
