"""Oracle-labelled decision points of the AirSim drone intersection (planner fine-tuning and evaluation data).

ROS-free. Episodes are flown through AirSim's real client against brace-airsim-peer (in this process), driven
by the oracle: each drone is asked for its plan as in the closed loop (drone i at step 1 + i, then when its plan
ends, a step fails, or every `every` steps), and each such moment — the feed's entries so far, the drone, the
oracle's plan from the true state — is one decision point. With `detour` > 0 some plans the world flies are
plausible mistakes instead of the oracle's (the labels stay the oracle's), so the data also holds the states a
planner's own mistakes lead to.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

from brace_common.action_schema import Step
from brace_common.vocabulary import Block
from brace_common.world_feed import FeedEntry
from erecap_planner.context import Entry
from sim_bridges.airsim import drone_feed
from sim_bridges.airsim.airsim_link import AirSimLink, continue_for
from sim_bridges.airsim.airsim_peer import AirSimPeer
from sim_bridges.airsim.drone_world import DroneWorld, read_settings
from sim_bridges.airsim.intersection import IntersectionConfig, fly_to, routes, settings


@dataclass
class IntersectionPoint:
    """The context entries so far, the drone asked about, and the oracle's plan (as the planner writes steps)."""

    entries: list[Entry]
    agent_id: str
    oracle: list[Step]
    step: int
    seed: int


def to_entry(e: FeedEntry) -> Entry:
    """A feed entry as the planner's context buffer holds it."""
    return Entry(e.agent_id, e.step, Block(e.block), e.text, e.kind)


def detour_plan(world: DroneWorld, name: str, rng: random.Random) -> list[Step]:
    """A plausible wrong plan: cross without yielding, fly to another drone's goal, or hover."""
    kind = rng.randrange(3)
    if kind == 0:
        return [s for s in world.oracle_plan(name) if s.action != "yield_to"]
    if kind == 1:
        other = rng.choice([r for n, r in routes(world.cfg).items() if n != name] or list(routes(world.cfg).values()))
        return [fly_to(world.cfg, other.goal), Step("land")]
    return [Step("hover", {"seconds": 5.0})]


def _plan_steps(plan: list[Step]) -> list[Step]:
    return [Step(s.action, dict(s.parameters)) for s in plan]


def decision_points(seeds: range, num_agents: int, every: int = 10, observe_every: int = 10, detour: float = 0.0,
                    max_steps: int = 150, gust_probability: float = 0.05) -> Iterator[IntersectionPoint]:
    """Decision points of oracle-driven intersection episodes, one episode per seed."""
    for seed in seeds:
        rng = random.Random(seed)
        cfg = IntersectionConfig(num_agents=num_agents, seed=seed, max_steps=max_steps, gust_probability=gust_probability)
        with AirSimPeer(settings(cfg), port=0) as peer:
            link = AirSimLink("127.0.0.1", peer.port, 10.0)
            try:
                link.connect()
                client = link.client()
                origins, _ = read_settings(client.getSettingsString())
                client.simPause(True)
                world = DroneWorld(cfg, client, origins, 1.0, partial(continue_for, client, limit_s=10.0),
                                   link.vector)
                world.start()
                entries = [to_entry(e) for e in drone_feed.episode_entries(world, seed)]
                entries += [to_entry(e) for e in drone_feed.step_entries(world, [], 0)]
                names = world.order()
                asked: set[str] = set()
                while not world.finished:
                    events = world.step()
                    entries.extend(to_entry(e) for e in drone_feed.step_entries(world, events, observe_every))
                    failed = {e.agent for e in events if not e.success}
                    for i, name in enumerate(names):
                        d = world.drones[name]
                        if d.done:
                            continue
                        first = name not in asked and world.t >= 1 + i
                        if not first and (name not in asked or not (
                                d.current is None or name in failed or (world.t + i) % every == 0)):
                            continue
                        asked.add(name)
                        oracle = world.oracle_plan(name)
                        yield IntersectionPoint(list(entries), name, _plan_steps(oracle), world.t, seed)
                        world.set_plan(name, detour_plan(world, name, rng) if rng.random() < detour else oracle)
            finally:
                link.close()
