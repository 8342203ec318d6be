"""Embedded 2D warehouse for K agents (1-8): shelves, objects, docks, fetch and handoff tasks.

ROS-free and deterministic given a seed. Every step each agent executes one
step of its plan (skills: move_to, pick, place, handoff, wait); execution can
fail stochastically (grasp slips), objects can be moved by someone else
(drift; the supervisor tells the agent that fetches the object), agents
closer than d_min are hazards, and agents that block each other stall
(deadlock evidence). Every step produces the context entries the planner
reads (observations, action outcomes, failure traces, coordination messages),
so the context grows with time and with K (paper Eq. 3).

Map legend: '#' wall, '.' floor, 'S' shelf (blocked; picked from the floor cell
above it), 'D' dock on the floor (place standing on it), 'd' dock in the wall
(blocked; placed from the floor cell above it). Each agent's start cell, in the
top row, is its parking place `park_<i>`. Two floor plans (`floor_plan`): `compact`
(K ≤ 6: the top row is also the aisle the upper shelves are taken from) and
`aisles` (K = 8: a parking row above that aisle and docks in the bottom wall,
so that neither parked agents nor agents at a dock close an aisle).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Optional

from brace_common.action_schema import Step
from brace_common.config import ConfigError, check_fields, param
from brace_common.episode import (
    COLLISIONS,
    COORDINATION_WAIT,
    LOOP_STEPS,
    NEAR_MISSES,
    PATH_EFFICIENCY,
    EpisodeMetrics,
)
from brace_common.vocabulary import Activity, EntryKind, Predicate
from brace_common.world_state import AgentActivity, Entity, Pose, Relation, WorldState, parameters_text

WORLD = "warehouse"
"""Episode.world and WorldState.world of the warehouse."""

SUPERVISOR = "supervisor"
"""Agent id of what no agent did: the world's own notices (an object moved) and the episode's framing."""


@dataclass(frozen=True)
class FloorPlan:
    """A warehouse map and whether its top row holds only parking places (nobody passes through it)."""

    rows: tuple[str, ...]
    parking_row: bool


FLOOR_PLANS = {
    "compact": FloorPlan((
        "##############",
        "#............#",
        "#.S.S.S.S.S..#",
        "#............#",
        "#.S.S.S.S.S..#",
        "#............#",
        "#D...D....D..#",
        "##############",
    ), parking_row=False),
    "aisles": FloorPlan((
        "##############",
        "#............#",
        "#............#",
        "#.S.S.S.S.S..#",
        "#............#",
        "#.S.S.S.S.S..#",
        "#............#",
        "#............#",
        "##d....d...d##",
    ), parking_row=True),
}
"""The maps by `floor_plan` name."""

Cell = tuple[int, int]  # (x, y)
MOVES = ((1, 0), (-1, 0), (0, 1), (0, -1))
"""The four cells an agent can step to (and hand over to) from its own."""


@dataclass
class WorldConfig:
    """Parameters of the warehouse world; each field is also an embedded_sim parameter of the same name."""

    num_agents: int = param(4, "K: agents in the warehouse", 1, 8)
    seed: int = param(0, "world seed (embedded_sim: of the first episode; episode e runs seed + e)", 0, 2**31 - 1)
    max_steps: int = param(60, "steps after which an unfinished episode fails", 1, 10**6)
    grasp_failure: float = param(0.1, "probability that a pick slips", 0.0, 1.0)
    drift: float = param(0.02, "probability per step that a waiting object is moved to another shelf", 0.0, 1.0)
    hazard_distance_m: float = param(1.01, "d_min (m; a cell is 1 m in the map frame): agent pairs closer "
                                     "than this count as a near-miss (1.01: adjacent cells)", 0.0, 100.0)
    handoff_tasks: int = param(1, "two-agent handoff tasks, Pass-Shoe-like (agents 0+1, 2+3, ... pair up, at most "
                               "K // 2 pairs; every agent has one task)", 0, 100)
    task_docks: int = param(0, "tasks deliver to the first n docks only (0 = any dock; 1 = one congested dock)", 0, 3)
    floor_plan: str = param("compact", "map: compact (K <= 6; parks on the upper shelves' aisle) or aisles (K = 8; a "
                        "parking row, docks taken from the aisle above them)")

    def validate(self) -> None:
        """ConfigError (a ValueError) naming the offending field."""
        check_fields(self)
        if self.floor_plan not in FLOOR_PLANS:
            raise ConfigError("floor_plan", f"'{self.floor_plan}' is not one of {', '.join(FLOOR_PLANS)}")

    def world_fields(self) -> dict:
        """The world's own fields (without what a subclass adds)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(WorldConfig)}


@dataclass
class Agent:
    """An agent's physical and plan state."""

    name: str
    pos: Cell
    holding: Optional[str] = None
    plan: list[Step] = field(default_factory=list)
    cursor: int = 0
    stalled: int = 0
    moved: int = 0
    waited: int = 0
    looped: int = 0                       # steps in a state held before the previous one (loop_steps)
    been: list = field(default_factory=list)  # the distinct (cell, holding, tasks done) states held, in order

    @property
    def current(self) -> Optional[Step]:
        """The plan step being executed, None when the plan is done."""
        return self.plan[self.cursor] if self.cursor < len(self.plan) else None


@dataclass
class Task:
    """Deliver `obj` to `dock`; a handoff task has `giver` pass it to `carrier` first."""

    obj: str
    dock: str
    carrier: str
    giver: Optional[str] = None
    done: bool = False


@dataclass
class Event:
    """What happened to one agent in one step (becomes ContextEntries and outcomes)."""

    agent: str
    step: int
    kind: EntryKind    # observation | action_outcome | failure_trace | message | task_done
    text: str
    success: bool = True
    action: str = ""
    to: str = ""       # the agent a message is addressed to ("" = a broadcast)


class Warehouse:
    """The world state and its step function."""

    def __init__(self, config: WorldConfig):
        config.validate()
        self.config = config
        self.rng = random.Random(config.seed)
        self.t = 0
        self.floor_plan = FLOOR_PLANS[config.floor_plan]
        self.rows = self.floor_plan.rows
        self.walls: set[Cell] = set()
        self.shelves: dict[str, Cell] = {}
        self.docks: dict[str, Cell] = {}
        self.taken_from: dict[str, Cell] = {}   # shelf or dock -> the floor cell an agent uses it from
        for y, row in enumerate(self.rows):
            for x, ch in enumerate(row):
                if ch in "#Sd":
                    self.walls.add((x, y))
                if ch == "S":
                    name = f"shelf_{len(self.shelves) + 1}"
                    self.shelves[name], self.taken_from[name] = (x, y), (x, y - 1)
                elif ch in "Dd":
                    name = f"dock_{len(self.docks) + 1}"
                    self.docks[name], self.taken_from[name] = (x, y), (x, y - 1) if ch == "d" else (x, y)
        # Each agent's start cell is its parking place: idle agents go there so they free shelves and docks.
        # Every other cell of the top row, then (K > 6) the cells between them: never two agents in one cell.
        row = [(x, 1) for x in range(1, len(self.rows[0]) - 1)]
        starts = [row[2 * i % len(row) + 2 * i // len(row)] for i in range(config.num_agents)]
        self.agents = {f"agent_{i}": Agent(f"agent_{i}", cell) for i, cell in enumerate(starts)}
        self.parks = {f"park_{i}": cell for i, cell in enumerate(starts)}
        names = ["cup_3", "box_7", "drill_2", "shoe_5", "can_9", "tray_1", "lamp_4", "book_6"]
        shelf_names = list(self.shelves)
        self.objects: dict[str, Optional[str]] = {}   # object -> shelf it is on (None when held / delivered)
        self.tasks: list[Task] = []
        # Every agent takes part in exactly one task: agents 0 and 1, 2 and 3, ... pair up for the handoffs
        # (the first hands over to the second), the others fetch alone.
        agent_names = list(self.agents)
        pairs = min(config.handoff_tasks, len(agent_names) // 2)
        roles = [(agent_names[2 * i + 1], agent_names[2 * i]) for i in range(pairs)]
        roles += [(agent, None) for agent in agent_names[2 * pairs:]]
        for obj, (carrier, giver) in zip(names[: len(roles)], roles, strict=True):
            self.objects[obj] = self.rng.choice(shelf_names)
            dock = self.rng.choice(list(self.docks)[: config.task_docks or None])
            self.tasks.append(Task(obj, dock, carrier=carrier, giver=giver))
        self.delivered: set[str] = set()
        self.near_misses = 0
        self.collisions = 0
        self.shortest = {name: self._oracle_length(name) for name in self.agents}

    # ------------------------------------------------------------------ geometry

    def access(self, place: str) -> Cell:
        """The floor cell an agent stands on to use a shelf, a dock or a parking place."""
        if place in self.parks:
            return self.parks[place]
        return self.taken_from[place]

    def free(self, cell: Cell) -> bool:
        """Inside the map and not a wall or shelf."""
        return cell not in self.walls and 0 <= cell[1] < len(self.rows) and 0 <= cell[0] < len(self.rows[0])

    @staticmethod
    def _adjacent(a: Cell, b: Cell) -> bool:
        """Within reach for a handoff (the same or a 4-neighbouring cell)."""
        return abs(a[0] - b[0]) + abs(a[1] - b[1]) <= 1

    def path(self, start: Cell, goal: Cell, blocked: frozenset = frozenset()) -> Optional[list[Cell]]:
        """Shortest 4-connected path (excluding start) or None."""
        if start == goal:
            return []
        prev: dict[Cell, Cell] = {start: start}
        queue = deque([start])
        while queue:
            cell = queue.popleft()
            for dx, dy in MOVES:
                nxt = (cell[0] + dx, cell[1] + dy)
                if nxt in prev or not self.free(nxt) or (nxt in blocked and nxt != goal):
                    continue
                prev[nxt] = cell
                if nxt == goal:
                    out = [nxt]
                    while prev[out[-1]] != start:
                        out.append(prev[out[-1]])
                    return out[::-1]
                queue.append(nxt)
        return None

    # ------------------------------------------------------------------ oracle

    def task_of(self, agent: str) -> Optional[Task]:
        """The unfinished task this agent takes part in."""
        return next((t for t in self.tasks if not t.done and agent in (t.carrier, t.giver)), None)

    def oracle_plan(self, agent: str) -> list[Step]:
        """The correct plan from the true world state (scores plans; makes training data).

        Fetch: go to the object's shelf, pick, go to the dock, place. Handoff: the
        giver fetches the object and brings it to the task's dock, where the carrier
        waits, hands it over, and the carrier places it. Done: go park. Where the
        top row is a parking row (floor plan aisles) two more rules keep eight agents
        from locking a dock: a carrier waits parked until its giver holds the
        object, and an agent next to its dock makes way (goes to park) while the
        agent on the dock has no free cell to leave by.
        """
        a = self.agents[agent]
        task = self.task_of(agent)
        handed_over = task is not None and task.giver == agent and self.agents[task.carrier].holding == task.obj
        if task is None or handed_over:  # nothing (more) to do: free the shelves and docks
            return self._park_plan(agent)
        if self.floor_plan.parking_row:
            goal = self.access(task.dock)
            if a.holding == task.obj and self._adjacent(a.pos, goal) and self._boxed_in(goal):
                return self._park_plan(agent)
            giver = self.agents[task.giver] if task.giver is not None else None
            if agent == task.carrier and giver is not None and task.obj not in (a.holding, giver.holding):
                return self._park_plan(agent)
        plan: list[Step] = []

        def go(place: str) -> None:
            if a.pos != self.access(place):
                plan.append(Step("move_to", {"target": place}))

        if a.holding != task.obj:
            if task.giver is not None and agent == task.carrier:
                go(task.dock)
                return plan + [Step("wait")]
            shelf = self.objects.get(task.obj)
            if shelf is None:  # someone else holds it
                return [Step("wait")]
            go(shelf)
            plan.append(Step("pick", {"object": task.obj}))
            a_pos, a.pos = a.pos, self.access(shelf)  # plan the rest from the shelf
            go(task.dock)
            a.pos = a_pos
        elif not (task.giver == agent and self._adjacent(a.pos, self.agents[task.carrier].pos)):
            go(task.dock)  # a giver next to its carrier hands over where it stands
        if task.giver == agent:
            return plan + [Step("handoff", {"object": task.obj, "to_agent": task.carrier})]
        return plan + [Step("place", {"object": task.obj, "target": task.dock})]

    def _park_plan(self, agent: str) -> list[Step]:
        """Go to the agent's parking place (unless there) and wait."""
        park = f"park_{agent.split('_')[-1]}"
        return ([Step("move_to", {"target": park})] if self.agents[agent].pos != self.parks[park] else []) + [
            Step("wait")]

    def _boxed_in(self, cell: Cell) -> bool:
        """An agent stands on `cell` and every floor cell next to it is taken by another agent."""
        taken = {a.pos for a in self.agents.values()}
        around = [(cell[0] + dx, cell[1] + dy) for dx, dy in MOVES]
        return cell in taken and all(c in taken for c in around if self.free(c))

    def _oracle_length(self, agent: str) -> int:
        """Shortest move count of the agent's task from the start (for the SPL-like efficiency)."""
        a = self.agents[agent]
        pos, total = a.pos, 0
        for step in self.oracle_plan(agent):
            if step.action == "move_to":
                goal = self.access(step.parameters["target"])
                route = self.path(pos, goal)
                total += len(route or [])
                pos = goal
        return total

    # ------------------------------------------------------------------ step

    def set_plan(self, agent: str, plan: list[Step]) -> bool:
        """Replace an agent's plan; True when it differs from the current one."""
        a = self.agents[agent]
        changed = [(s.action, s.parameters) for s in plan] != [(s.action, s.parameters) for s in a.plan[a.cursor:]]
        a.plan, a.cursor = list(plan), 0
        return changed

    def step(self) -> list[Event]:
        """Advance the world one controller step; return what happened."""
        self.t += 1
        events: list[Event] = []
        self._count_loops()  # the first step: the states the agents start in
        self._drift(events)
        occupied = {a.pos for a in self.agents.values()}
        for name in sorted(self.agents):
            a = self.agents[name]
            step = a.current
            if step is None:
                a.waited += 1
                continue
            occupied.discard(a.pos)
            events.extend(self._execute(a, step, frozenset(occupied)))
            occupied.add(a.pos)
        self._hazards(events)
        self._count_loops()
        for name, a in sorted(self.agents.items()):
            what = f"holding {a.holding}" if a.holding else "empty-handed"
            nxt = a.current.values_text() if a.current else "no plan"
            events.append(Event(name, self.t, EntryKind.OBSERVATION, f"at {a.pos}, {what}, next {nxt}"))
        return events

    def _count_loops(self) -> None:
        """Each agent's physical state (cell, what it holds, its tasks done): one held before the previous one is
        a step in a loop (loop_steps)."""
        for a in self.agents.values():
            state = (a.pos, a.holding, tuple(t.done for t in self.tasks if a.name in (t.carrier, t.giver)))
            if a.been and a.been[-1] == state:
                continue
            a.looped += state in a.been[:-1]
            a.been.append(state)

    def _execute(self, a: Agent, step: Step, occupied: frozenset) -> list[Event]:
        act, p = step.action, step.parameters
        if act == "wait":
            a.waited += 1
            a.cursor += 1
            return []
        if act == "move_to":
            target = p.get("target", "")
            if target not in self.shelves and target not in self.docks and target not in self.parks:
                a.cursor += 1
                return [Event(a.name, self.t, EntryKind.FAILURE_TRACE, f"unknown place {target}", False, act)]
            goal = self.access(target)
            if a.pos == goal:
                a.cursor += 1
                return [Event(a.name, self.t, EntryKind.ACTION_OUTCOME, f"reached {target}", True, act)]
            if goal in occupied and abs(a.pos[0] - goal[0]) + abs(a.pos[1] - goal[1]) == 1:
                # Someone stands on the spot: stop next to it (a handoff there works; a pick will fail).
                a.cursor += 1
                return [Event(a.name, self.t, EntryKind.ACTION_OUTCOME, f"stopped next to {target} (occupied)", True, act)]
            route = self.path(a.pos, goal, occupied)
            if not route or route[0] in occupied:
                a.stalled += 1
                a.waited += 1
                return [Event(a.name, self.t, EntryKind.MESSAGE, f"{a.name} -> all: blocked on the way to {target}", True, act)]
            a.pos = route[0]
            a.moved += self.task_of(a.name) is not None  # parking trips after the task do not count
            a.stalled = 0
            if a.pos == goal:
                a.cursor += 1
                return [Event(a.name, self.t, EntryKind.ACTION_OUTCOME, f"reached {target}", True, act)]
            return []
        a.cursor += 1
        if act == "pick":
            obj = p.get("object", "")
            shelf = self.objects.get(obj)
            if shelf is None or self.access(shelf) != a.pos:
                return [Event(a.name, self.t, EntryKind.FAILURE_TRACE, f"pick {obj} failed: not here", False, act)]
            if self.rng.random() < self.config.grasp_failure:
                return [Event(a.name, self.t, EntryKind.FAILURE_TRACE, f"grasp of {obj} slipped", False, act)]
            self.objects[obj] = None
            a.holding = obj
            return [Event(a.name, self.t, EntryKind.ACTION_OUTCOME, f"picked {obj}", True, act)]
        if act == "place":
            obj, dock = p.get("object", ""), p.get("target", "")
            if a.holding != obj or dock not in self.docks or self.access(dock) != a.pos:
                return [Event(a.name, self.t, EntryKind.FAILURE_TRACE, f"place {obj} at {dock} failed", False, act)]
            a.holding = None
            task = next((t for t in self.tasks if t.obj == obj and not t.done), None)
            placed = [Event(a.name, self.t, EntryKind.ACTION_OUTCOME, f"placed {obj} at {dock}", True, act)]
            if task is not None and task.dock == dock:
                task.done = True
                self.delivered.add(obj)
                team = f"{task.giver} and {task.carrier}" if task.giver else task.carrier
                placed.append(Event(a.name, self.t, EntryKind.TASK_DONE, f"task done: {obj} delivered at {dock} by {team}"))
            return placed
        if act == "handoff":
            obj, other = p.get("object", ""), p.get("to_agent", "")
            b = self.agents.get(other)
            if a.holding != obj or b is None or b.holding is not None or not self._adjacent(a.pos, b.pos):
                return [Event(a.name, self.t, EntryKind.FAILURE_TRACE, f"handoff of {obj} to {other} failed", False, act)]
            a.holding, b.holding = None, obj
            return [Event(a.name, self.t, EntryKind.ACTION_OUTCOME, f"handed {obj} to {other}", True, act),
                    Event(a.name, self.t, EntryKind.MESSAGE, f"{a.name} -> {other}: {obj} is yours", True, act, to=other)]
        return [Event(a.name, self.t, EntryKind.FAILURE_TRACE, f"unknown skill {act}", False, act)]

    def _drift(self, events: list[Event]) -> None:
        for obj, shelf in sorted(self.objects.items()):
            if shelf is not None and self.rng.random() < self.config.drift:
                new = self.rng.choice([s for s in self.shelves if s != shelf])
                self.objects[obj] = new
                fetcher = next((t.giver or t.carrier for t in self.tasks if t.obj == obj and not t.done), "")
                to = f"supervisor -> {fetcher}: " if fetcher else ""
                events.append(Event(SUPERVISOR, self.t, EntryKind.MESSAGE, f"{to}{obj} was moved from {shelf} to {new}",
                                    to=fetcher))

    def _hazards(self, events: list[Event]) -> None:
        names = sorted(self.agents)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                pa, pb = self.agents[a].pos, self.agents[b].pos
                d = ((pa[0] - pb[0]) ** 2 + (pa[1] - pb[1]) ** 2) ** 0.5
                if d == 0:
                    self.collisions += 1
                elif d < self.config.hazard_distance_m:
                    self.near_misses += 1

    # ------------------------------------------------------------------ metrics

    @property
    def success(self) -> bool:
        """Every task delivered."""
        return all(t.done for t in self.tasks)

    @property
    def finished(self) -> bool:
        """Success, or out of steps."""
        return self.success or self.t >= self.config.max_steps

    def metrics(self) -> EpisodeMetrics:
        """Per-episode metrics: success, SPL-like efficiency, coordination wait, near-misses, collisions."""
        moved = sum(a.moved for a in self.agents.values())
        shortest = sum(self.shortest.values())
        spl = (shortest / max(moved, shortest)) if self.success and shortest else float(self.success)
        return EpisodeMetrics(success=self.success, steps=self.t, delivered=len(self.delivered), tasks=len(self.tasks),
                              metrics={PATH_EFFICIENCY: round(spl, 4),
                                       COORDINATION_WAIT: sum(a.waited for a in self.agents.values()),
                                       LOOP_STEPS: sum(a.looped for a in self.agents.values()),
                                       NEAR_MISSES: self.near_misses, COLLISIONS: self.collisions})

    def snapshot(self) -> str:
        """A canonical JSON description of the state (determinism checks, logs)."""
        return json.dumps({"t": self.t, "agents": {n: [a.pos, a.holding, a.cursor] for n, a in sorted(self.agents.items())},
                           "objects": self.objects, "done": [t.done for t in self.tasks]}, sort_keys=True)


def run_oracle(world: Warehouse, replan_every: int = 1) -> list[Event]:
    """Drive `world` to its end by the oracle: every agent gets `oracle_plan` at the start, where its plan ended or a
    step failed, and every `replan_every` steps (0: only then). The episode's events."""
    events = []
    for name in world.agents:
        world.set_plan(name, world.oracle_plan(name))
    while not world.finished:
        step_events = world.step()
        events.extend(step_events)
        failed = {e.agent for e in step_events if not e.success}
        periodic = replan_every > 0 and world.t % replan_every == 0
        for name, agent in world.agents.items():
            if agent.current is None or name in failed or periodic:
                world.set_plan(name, world.oracle_plan(name))
    return events


# ---------------------------------------------------------------------- structured state and lookahead

WAITING_SKILLS = ("wait",)


def _activity(a: Agent) -> AgentActivity:
    step = a.current
    if step is None:
        return AgentActivity(a.name, Activity.IDLE, index=a.cursor, plan_steps=len(a.plan))
    kind = Activity.WAITING if step.action in WAITING_SKILLS else Activity.BLOCKED if a.stalled else Activity.EXECUTING
    return AgentActivity(a.name, kind, step.action, parameters_text(step.parameters), a.cursor, len(a.plan))


def world_state(world: Warehouse, episode: int) -> WorldState:
    """The warehouse as a scene graph (poses are cells: x, y in the markers' frame, 1 cell = 1 unit).

    Entities: the agents (robot), the objects with their state (on_shelf, held, delivered, placed: put down
    elsewhere than its task's dock, where the world no longer tracks it), shelves, docks, parking places and the
    tasks (open, done). Relations: agent at place (standing on its access cell), agent holding object, object on
    shelf, delivered object at dock, agents near each other (closer than d_min), agent assigned task, task
    concerns object, task target dock.
    """
    entities: list[Entity] = []
    relations: list[Relation] = []
    places = {place: world.access(place) for place in (*world.shelves, *world.docks, *world.parks)}
    names = sorted(world.agents)
    for name in names:
        a = world.agents[name]
        entities.append(Entity(name, "robot", pose=Pose.planar(*a.pos)))
        relations += [Relation(name, Predicate.AT, place) for place, cell in places.items() if cell == a.pos]
        if a.holding:
            relations.append(Relation(name, Predicate.HOLDING, a.holding))
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            pa, pb = world.agents[a].pos, world.agents[b].pos
            if 0 < math.dist(pa, pb) < world.config.hazard_distance_m:
                relations.append(Relation(a, Predicate.NEAR, b))
    holders = {a.holding: a for a in world.agents.values() if a.holding}
    dock_of = {t.obj: t.dock for t in world.tasks if t.done}
    for obj in sorted(world.objects):
        shelf = world.objects[obj]
        if shelf is not None:
            entities.append(Entity(obj, "object", "on_shelf", Pose.planar(*world.shelves[shelf])))
            relations.append(Relation(obj, Predicate.ON, shelf))
        elif obj in holders:
            entities.append(Entity(obj, "object", "held", Pose.planar(*holders[obj].pos)))
        elif obj in dock_of:
            entities.append(Entity(obj, "object", "delivered", Pose.planar(*world.docks[dock_of[obj]])))
            relations.append(Relation(obj, Predicate.AT, dock_of[obj]))
        else:
            entities.append(Entity(obj, "object", "placed"))
    entities += [Entity(s, "shelf", pose=Pose.planar(*cell)) for s, cell in world.shelves.items()]
    entities += [Entity(d, "dock", pose=Pose.planar(*cell)) for d, cell in world.docks.items()]
    entities += [Entity(p, "park", pose=Pose.planar(*cell)) for p, cell in world.parks.items()]
    for i, t in enumerate(world.tasks):
        task = f"task_{i}"
        text = f"deliver {t.obj} to {t.dock}" + (f", {t.giver} hands it to {t.carrier}" if t.giver else "")
        entities.append(Entity(task, "task", "done" if t.done else "open", attributes={"text": text}))
        relations += [Relation(agent, Predicate.ASSIGNED, task) for agent in (t.giver, t.carrier) if agent]
        relations += [Relation(task, Predicate.CONCERNS, t.obj), Relation(task, Predicate.TARGET, t.dock)]
    return WorldState(WORLD, episode, world.t, tuple(entities), tuple(relations),
                      tuple(_activity(world.agents[n]) for n in names))


@dataclass(frozen=True)
class Prediction:
    """A one-step lookahead: whether the candidate step can run and did what it is for, why, and the state after."""

    valid: bool
    reason: str
    state: Optional[WorldState]   # None when the candidate could not be simulated (an unknown agent)


def lookahead(world: Warehouse, episode: int, agent: str, step: Step) -> Prediction:
    """What one world step would give if `agent` executed `step` (its whole plan for that step) and the other
    agents went on with their plans: the world's own step function on a copy, chance events (slips, drift)
    off. The live world is not changed."""
    if agent not in world.agents:
        return Prediction(False, f"unknown agent {agent}", None)
    twin = copy.deepcopy(world)
    twin.config = dataclasses.replace(twin.config, grasp_failure=0.0, drift=0.0)
    twin.set_plan(agent, [step])
    events = [e for e in twin.step() if e.agent == agent and e.kind != EntryKind.OBSERVATION]
    failed = [e for e in events if not e.success]
    reason = "; ".join(e.text for e in failed or events) or f"{step.text()} under way"
    return Prediction(not failed, reason, world_state(twin, episode))
