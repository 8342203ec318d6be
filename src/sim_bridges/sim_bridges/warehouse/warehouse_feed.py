"""What the embedded warehouse tells the rest of the stack: context entries, outcomes, agent states.

ROS-free. The node turns these into ContextEntry / ExecutionOutcome / AgentState
messages. Blocks follow the planner's context layout (paper Eq. 3): the task and
the constraints open an episode (protected), each agent's latest observation is
its state (protected), messages from one agent to another are coordination
(protected) — the supervisor's notice that an object was moved is one, addressed to the
agent that fetches it —, a finished task is a task entry (protected), and action outcomes,
failure traces, broadcasts ("blocked on the way", a moved object no task needs) and a
periodic observation log are history (prunable), so the context grows with time and with
the number of agents, and pruning can remove what mattered.
"""

from __future__ import annotations

import copy
import math
from collections import OrderedDict
from typing import Optional

from brace_common.action_schema import ActionSchema, Fault, PlanError, Step
from brace_common.validation import InvalidInput
from brace_common.vocabulary import Block, EntryKind
from brace_common.world_feed import AgentReport, FeedEntry

from .warehouse_world import SUPERVISOR, Event, Prediction, Warehouse, lookahead


def place_near(world: Warehouse, cell: tuple[int, int]) -> str:
    """The place whose access cell is `cell`, or ''."""
    for name in (*world.docks, *world.parks, *world.shelves):
        if world.access(name) == cell:
            return name
    return ""


def episode_entries(world: Warehouse, episode: int) -> list[FeedEntry]:
    """Task and constraint entries that open an episode."""
    shelves, docks = list(world.shelves), list(world.docks)
    out = [FeedEntry(SUPERVISOR, 0, Block.TASK, EntryKind.TASK.value,
                     f"Warehouse episode {episode}, {len(world.agents)} agents. Places: {shelves[0]} to {shelves[-1]}, "
                     f"{docks[0]} to {docks[-1]}, park_<i> for agent_<i>.")]
    for task in world.tasks:
        shelf = world.objects.get(task.obj)
        if task.giver is None:
            out.append(FeedEntry(task.carrier, 0, Block.TASK, EntryKind.TASK.value,
                                 f"{task.carrier} must deliver {task.obj} to {task.dock}. {task.obj} is on {shelf}."))
        else:
            out.append(FeedEntry(task.giver, 0, Block.TASK, EntryKind.TASK.value,
                                 f"{task.giver} must fetch {task.obj} from {shelf} and hand it to {task.carrier} "
                                 f"at {task.dock}."))
            out.append(FeedEntry(task.carrier, 0, Block.TASK, EntryKind.TASK.value,
                                 f"{task.carrier} must wait at {task.dock}, take {task.obj} from {task.giver} "
                                 f"and place it at {task.dock}."))
    out.append(FeedEntry(SUPERVISOR, 0, Block.CONSTRAINTS, EntryKind.CONSTRAINT.value,
                         "One agent per cell. Objects may be moved: the latest notice says where. "
                         "Idle agents go to their park."))
    return out


def state_text(world: Warehouse, agent: str) -> str:
    """An agent's observation as the planner reads it."""
    a = world.agents[agent]
    near = place_near(world, a.pos)
    where = f"at {near} {a.pos}" if near else f"at {a.pos}"
    what = f"holding {a.holding}" if a.holding else "empty-handed"
    nxt = a.current.values_text() if a.current else "no plan"
    return f"{where}, {what}, next {nxt}"


def event_entries(events) -> list[FeedEntry]:
    """Entries of a step's events (a world's Event: agent, step, kind, text, to): a finished task as a task entry,
    an addressed message as coordination, the rest (outcomes, failures, broadcasts) as history; observations are
    the states' (`state_entries`)."""
    out = []
    for e in events:
        if e.kind == EntryKind.OBSERVATION:
            continue
        if e.kind == EntryKind.TASK_DONE:
            block = Block.TASK
        elif e.kind == EntryKind.MESSAGE and e.to:
            block = Block.COORDINATION
        else:
            block = Block.HISTORY
        out.append(FeedEntry(e.agent, e.step, block, EntryKind(e.kind).value, e.text))
    return out


def state_entries(t: int, states: dict[str, str], observe_every: int) -> list[FeedEntry]:
    """Each agent's latest observation as its state, and every `observe_every` steps also into the history."""
    out = []
    for name in sorted(states):
        out.append(FeedEntry(name, t, Block.STATE, EntryKind.OBSERVATION.value, states[name]))
        if observe_every > 0 and t % observe_every == 0:
            out.append(FeedEntry(name, t, Block.HISTORY, EntryKind.OBSERVATION.value, states[name]))
    return out


def step_entries(world: Warehouse, events: list[Event], observe_every: int) -> list[FeedEntry]:
    """Entries of one step: outcomes, failures, broadcasts as history; addressed messages as coordination; done
    tasks; states."""
    return event_entries(events) + state_entries(world.t, {n: state_text(world, n) for n in world.agents},
                                                 observe_every)


def tracking_error(world: Warehouse, agent: str) -> float:
    """Drift sensor: how far (cells) the object the agent is about to fetch is from the shelf its plan goes to.

    0 when the plan's next pick finds its object where the plan expects it, or the plan has no pick.
    """
    a = world.agents[agent]
    target: Optional[str] = None
    for step in a.plan[a.cursor:]:
        if step.action == "move_to":
            target = step.parameters.get("target")
        elif step.action == "pick":
            shelf = world.objects.get(step.parameters.get("object", ""))
            if shelf is None or target not in world.shelves or target == shelf:
                return 0.0
            (x1, y1), (x2, y2) = world.shelves[target], world.shelves[shelf]
            return math.hypot(x1 - x2, y1 - y2)
    return 0.0


def agent_reports(world: Warehouse) -> list[AgentReport]:
    """Every agent's state after the current step."""
    return [AgentReport(n, world.t, float(a.pos[0]), float(a.pos[1]), tracking_error(world, n), a.current is not None)
            for n, a in sorted(world.agents.items())]


WAREHOUSE_SKILLS = ActionSchema.from_dict({
    "max_steps": 4,
    "entities": {"place": [], "object": [], "dock": [], "agent": []},
    "actions": {
        "move_to": {"target": {"type": "string", "entity": "place"}},
        "pick": {"object": {"type": "string", "entity": "object"}},
        "place": {"object": {"type": "string", "entity": "object"}, "target": {"type": "string", "entity": "dock"}},
        "handoff": {"object": {"type": "string", "entity": "object"},
                    "to_agent": {"type": "string", "entity": "agent", "not_self": True}},
        "wait": {"steps": {"type": "integer", "required": False}},
    },
    "subtasks": {
        "fetch": {"object": {"type": "string", "entity": "object"}},
        "deliver": {"object": {"type": "string", "entity": "object"}, "dock": {"type": "string", "entity": "dock"}},
        "hand_over": {"object": {"type": "string", "entity": "object"},
                      "to_agent": {"type": "string", "entity": "agent", "not_self": True}},
        "stand_by": {},
    }})
"""The warehouse's skills (the world's intake schema). Its entities list no ids: the world takes any name and
reports one it does not know (an unknown place, an object that is not here) as a failed step the planner reads. A
handoff goes to another agent (`not_self`): the planner never writes one to the agent itself. The composite subtasks
a ReCAP planner decomposes (warehouse_decomposition): fetch an object, deliver it to a dock, hand it over, stand by."""

WAREHOUSE_REASONS = {reason: "bad_parameter" for reason in (
    Fault.UNKNOWN_PARAMETER, Fault.MISSING_PARAMETER, Fault.BAD_PARAMETER_TYPE, Fault.BAD_PARAMETER_VALUE,
    Fault.UNKNOWN_CHOICE)}
"""The warehouse counts every refused parameter as bad_parameter."""


def world_schema(world: Warehouse, max_steps: int = 4) -> ActionSchema:
    """The warehouse skills with the ids of `world`'s places, objects, docks and agents."""
    return WAREHOUSE_SKILLS.extend({"max_steps": max_steps, "entities": {
        "place": [*world.shelves, *world.docks, *world.parks], "object": sorted(world.objects),
        "dock": list(world.docks), "agent": sorted(world.agents)}})


def action_schema(world: Warehouse, max_steps: int = 4) -> dict:
    """The agents' allowed skill calls with every parameter enumerated from the world (planner schema).

    Four steps hold every oracle plan (go, pick, go, place / handoff); a longer plan only costs decoding time.
    """
    return world_schema(world, max_steps).to_dict()


MAX_PLAN_STEPS = 64
"""Longest plan the world accepts."""


def plan_from_steps(raw: list[tuple[str, str]]) -> list[Step]:
    """World steps from (action, parameters_json) pairs, checked against the warehouse skills; InvalidInput
    naming what is wrong (an empty plan clears the agent's)."""
    try:
        return WAREHOUSE_SKILLS.plan_from_pairs(raw, max_steps=MAX_PLAN_STEPS, allow_empty=True)
    except PlanError as exc:
        raise exc.renamed(WAREHOUSE_REASONS) from None


def effective_steps(plan: list[Step], here: str) -> list[Step]:
    """The plan without its leading move_to the place the agent stands at (`here`): a no-op the oracle never
    writes."""
    plan = list(plan)
    while plan and here and plan[0].action == "move_to" and plan[0].parameters.get("target") == here:
        plan.pop(0)
    return plan


def same_first_step(plan: list[Step], oracle: list[Step], here: str) -> bool:
    """The plan's first effective step (`effective_steps`) is the oracle's first step."""
    plan = effective_steps(plan, here)
    if not plan or not oracle:
        return not plan and not oracle
    return (plan[0].action, plan[0].parameters) == (oracle[0].action, oracle[0].parameters)


def agrees_with_oracle(world: Warehouse, agent: str, plan: list[Step]) -> bool:
    """The plan's first effective step is the oracle's first step from the true state."""
    return same_first_step(plan, world.oracle_plan(agent), place_near(world, world.agents[agent].pos))


class RecentWorlds:
    """Copies of the warehouse at its last `keep` steps before the live one, by (episode, step): a planner reads the
    state it was given, which on a busy machine can be a step or two behind the live world, and its lookahead is
    answered about that state."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._worlds: OrderedDict[tuple[int, int], Warehouse] = OrderedDict()

    def record(self, episode: int, world: Warehouse) -> None:
        """Keep a copy of `world` as it is now (call it just before the world steps)."""
        if self.keep < 1:
            return
        self._worlds[(episode, world.t)] = copy.deepcopy(world)
        while len(self._worlds) > self.keep:
            self._worlds.popitem(last=False)

    def find(self, episode: int, step: int) -> Optional[Warehouse]:
        """The kept copy of state `episode`/`step`, or None."""
        return self._worlds.get((episode, step))

    def clear(self) -> None:
        """Forget every copy (a new episode)."""
        self._worlds.clear()


def answer_lookahead(world: Optional[Warehouse], episode: int, state_episode: int, state_step: int, agent: str,
                     action: str, parameters_json: str, recent: Optional[RecentWorlds] = None) -> Prediction:
    """A Lookahead request about the live world, or about one of the `recent` states before it: refused (not valid,
    no state) when the state it names is neither or the step is malformed; else the one-step prediction of
    `warehouse.lookahead` from that state."""
    live = f"{episode}/{world.t}" if world is not None else "none (between episodes)"
    if world is not None and (state_episode, state_step) == (episode, world.t):
        origin: Optional[Warehouse] = world
    else:
        origin = recent.find(state_episode, state_step) if recent is not None else None
    if origin is None:
        kept = f" nor one of the {recent.keep} before it" if recent is not None and recent.keep else ""
        return Prediction(False, f"state {state_episode}/{state_step} is not the live state ({live}){kept}", None)
    try:
        step = plan_from_steps([(action, parameters_json)])[0]
    except InvalidInput as exc:
        return Prediction(False, f"malformed step: {exc}", None)
    return lookahead(origin, state_episode, agent, step)
