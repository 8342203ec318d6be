"""Oracle-labelled decision points of the embedded warehouse (planner fine-tuning and evaluation data).

ROS-free. `decision_points` drives episodes by the oracle (with `detour` mistakes, an on-policy share of a planner's
own plans, and a memory system fed as the node feeds it) and yields what the planner would be asked with the correct
answer (docs/training.md).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Optional

from brace_common.action_schema import Step
from brace_common.replanning import Trigger
from brace_common.vocabulary import Block, Mode, TriggerKind
from brace_common.world_feed import FeedEntry, outcomes
from brace_controller.config import ControllerConfig
from brace_controller.policy import select_mode
from brace_controller.triggers import PERIODIC_SEVERITY
from brace_memory.lookahead import Projection
from brace_memory.system import MemorySystem, StepOutcome
from erecap_planner.context import ContextBuffer, Entry
from sim_bridges.warehouse.warehouse_feed import episode_entries, place_near, step_entries
from sim_bridges.warehouse.warehouse_world import Warehouse, WorldConfig, lookahead, world_state


def step_outcome(event) -> StepOutcome:
    """A world's outcome event (brace_common.world_feed.outcomes) as memory reads it."""
    return StepOutcome(event.agent, event.step, event.action, event.success, event.text, getattr(event, "failure", 0))


@dataclass
class DecisionPoint:
    """The context entries so far, the agent asked about, and the oracle's plan."""

    entries: list[FeedEntry]
    agent_id: str
    oracle: list[Step]
    step: int
    seed: int
    here: str = ""  # the place the agent stands at ('' between places)
    mode: Mode = Mode.FULL_REPLAN  # the request's mode, as the controller would pick it for this moment


Policy = Callable[[DecisionPoint], list[Step]]
"""A plan for a decision point (its oracle answer unread); [] = none (the oracle's runs)."""


def context_buffer(entries: list[FeedEntry]) -> ContextBuffer:
    """The planner's context after these feed entries (what the node's buffer holds)."""
    buf = ContextBuffer()
    buf.extend(Entry(e.agent_id, e.step, Block(e.block), e.text, e.kind) for e in entries)
    return buf


def detour_plan(world: Warehouse, agent: str, rng: random.Random) -> list[Step]:
    """A plausible wrong plan for the agent: go park, go to a random shelf, or wait."""
    kind = rng.randrange(3)
    if kind == 0:
        return [Step("move_to", {"target": f"park_{agent.split('_')[-1]}"}), Step("wait")]
    if kind == 1:
        return [Step("move_to", {"target": rng.choice(sorted(world.shelves))})]
    return [Step("wait")]


@dataclass
class PlanChoice:
    """Which plan an episode's world executes: the oracle's, a detour or the policy's."""

    world: Warehouse
    rng: random.Random
    detour: float = 0.0
    policy: Optional[Policy] = None
    on_policy: float = 0.0

    def executed(self, agent: str, point: Optional[DecisionPoint], oracle: list[Step]) -> list[Step]:
        """The plan for `agent` (`point`: the decision point just asked about, None where none was)."""
        if point is not None and self.policy is not None and self.rng.random() < self.on_policy:
            return self.policy(point) or oracle
        return detour_plan(self.world, agent, self.rng) if self.rng.random() < self.detour else oracle


def projection(world: Warehouse, episode: int, agent: str, step: Step) -> Projection:
    """GiG's Bounded Lookahead for `agent`'s candidate `step`, answered by the world's transition model as the
    embedded sim's lookahead service answers it (on a copy: the world does not change)."""
    predicted = lookahead(world, episode, agent, step)
    return Projection(predicted.valid, predicted.reason, predicted.state)


class MemoryFeed:
    """What the planner node feeds its memory system, for an episode driven here (no-ops without a system): context
    entries, outcomes, plans, and (GiG's modules) the world's states and its lookahead answers."""

    def __init__(self, memory: Optional[MemorySystem], agents: list[str], world: Optional[Warehouse] = None,
                 episode: int = 0) -> None:
        self.memory = memory
        self.teammates = frozenset(agents)
        self.world = world
        self.episode = episode
        if memory is not None:
            memory.start_episode()
            if world is not None:
                memory.predict = lambda agent, step: projection(world, episode, agent, step)
                self.state()

    def state(self) -> None:
        """The world's state as its world_state topic publishes it (read by GiG's modules only)."""
        if self.memory is not None and self.world is not None:
            self.memory.on_world_state(world_state(self.world, self.episode))

    def entries(self, entries: list[FeedEntry]) -> list[FeedEntry]:
        """Context entries as they reach the planner (returned, for the caller's own list)."""
        if self.memory is not None:
            for e in entries:
                self.memory.on_context_entry(e, self.teammates)
        return entries

    def outcomes(self, events) -> None:
        """The execution outcomes among a step's events."""
        if self.memory is not None:
            for e in outcomes(events):
                self.memory.on_outcome(step_outcome(e))
            self.state()

    def plan(self, agent: str, step: int, mode: Mode, plan: list[Step]) -> None:
        """A plan the planner returned (what the world executes)."""
        if self.memory is not None:
            self.memory.on_plan(agent, step, mode, plan)
            self.state()


def controller_mode(failed: bool, has_plan: bool) -> Mode:
    """The mode the controller picks at a decision point (its own rule, `select_mode`, with its default
    `reuse_severity`): for the failure trigger of an agent whose step failed, else for the periodic trigger of an
    agent with or without a running plan."""
    trigger = (Trigger(TriggerKind.FAILURE, "agent", 0, has_goal=has_plan) if failed
               else Trigger(TriggerKind.PERIODIC, "agent", 0, severity=PERIODIC_SEVERITY, has_goal=has_plan))
    return select_mode(trigger, override=False, reuse_severity=ControllerConfig().reuse_severity)


def decision_points(seeds: range, num_agents: int, every: int = 8, observe_every: int = 4,
                    max_steps: int = 60, drift: float = 0.03, grasp_failure: float = 0.1,
                    stagger: int = 1, detour: float = 0.0,
                    memory: Optional[MemorySystem] = None, floor_plan: str = "compact",
                    policy: Optional[Policy] = None, on_policy: float = 0.0) -> Iterator[DecisionPoint]:
    """Decision points of oracle-driven episodes, one episode per seed.

    As in the closed loop: the episode opens with the task, constraints and every
    agent's state at its park; agent i is asked for its initial plan at step
    1 + i * stagger (agents without a plan idle), then when its plan ends, a
    step fails, or every `every` steps. With probability `detour` the world then
    executes `detour_plan` instead of the oracle's plan; with probability
    `on_policy` it executes `policy`'s plan for the point it was just asked
    about (the oracle's where the policy gives none). Each point's mode is the
    controller's for that moment (`controller_mode`): the first plan and a
    finished one full_replan, a failure and the periodic check of a running
    plan partial_replan.
    `memory` (kept across the seeds, as a run keeps it) is fed while the episode
    runs; it holds what it would at a point while the point is being consumed. `floor_plan`: the warehouse map.
    """
    for seed in seeds:
        rng = random.Random(seed)
        world = Warehouse(WorldConfig(num_agents=num_agents, seed=seed, max_steps=max_steps, drift=drift,
                                      grasp_failure=grasp_failure, floor_plan=floor_plan))
        names = sorted(world.agents)
        feed = MemoryFeed(memory, names, world, seed)
        entries = feed.entries(list(episode_entries(world, seed)) + step_entries(world, [], 0))
        last: dict[str, list[Step]] = {}  # each agent's last oracle answer
        ran: dict[str, list[Step]] = {}  # and the plan the world executed then
        choice = PlanChoice(world, rng, detour, policy, on_policy)

        while not world.finished:
            events = world.step()
            entries.extend(feed.entries(step_entries(world, events, observe_every)))
            feed.outcomes(events)
            failed = {e.agent for e in events if not e.success}
            for i, name in enumerate(names):
                a = world.agents[name]
                if name not in last:
                    if world.t >= 1 + i * stagger:
                        last[name] = world.oracle_plan(name)
                        point = DecisionPoint(list(entries), name, last[name], world.t, seed, place_near(world, a.pos))
                        yield point
                        run = ran[name] = choice.executed(name, point, last[name])
                        world.set_plan(name, run)
                        feed.plan(name, world.t, Mode.FULL_REPLAN, run)
                    continue
                if a.current is None or name in failed or world.t % every == 0:
                    oracle = world.oracle_plan(name)
                    mode = controller_mode(name in failed, a.current is not None)
                    point = None
                    # no repeats of an idle wait, unless what ran was not the oracle's
                    if oracle != last[name] or ran[name] != last[name] or name in failed or world.t % every == 0:
                        point = DecisionPoint(list(entries), name, oracle, world.t, seed, place_near(world, a.pos), mode)
                        yield point
                    run = ran[name] = choice.executed(name, point, oracle)
                    world.set_plan(name, run)
                    feed.plan(name, world.t, mode, run)
                    last[name] = oracle
