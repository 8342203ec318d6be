"""One intersection episode flown through AirSim's multirotor client API (ROS-free).

`DroneWorld` owns an episode: it resets the simulator, gives every drone API control, arms it and takes it
off; then each `step` sets the wind (gusts), lets simulated time advance (the caller's `advance`: in
lockstep `simContinueForTime` on a paused simulator, in real time nothing), reads every drone's state and
collision info, advances each drone's plan by one step's worth (starting a skill sends its command:
`moveToPositionAsync`, `hoverAsync`, `landAsync`, ...; a skill finishes when the state says so, never by
waiting on the command's reply), counts near-misses and the minimum distance, and returns what happened as
events (drone_feed.py turns them into context entries and outcomes).

Positions: the API takes and returns each vehicle's local NED frame, whose origin is its spawn point
(settings.json X, Y, Z); the world adds the origin, so plans and reports are in world NED.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from brace_common.airsim_settings import read_settings  # noqa: F401 - the bridge's and its tests' name
from brace_common.episode import (
    COLLISIONS,
    COORDINATION_WAIT,
    MIN_DISTANCE_M,
    NEAR_MISSES,
    PATH_EFFICIENCY,
    EpisodeMetrics,
)
from brace_common.vocabulary import Activity, EntryKind, Failure, Predicate
from brace_common.world_state import AgentActivity, Entity, Pose, Relation, WorldState, parameters_text

from .intersection import (
    TOWER,
    DroneView,
    IntersectionConfig,
    Point,
    Route,
    Step,
    arrived,
    cleared,
    crossing_order,
    in_box,
    oracle_plan,
    routes,
)

LANDED, FLYING = 0, 1  # AirSim's LandedState
TAKEOFF_ALTITUDE_M = 1.5      # a takeoff has finished above this altitude (AirSim takes off to ~3 m; from the air
                              # it holds where it is)
REACHED_M = 1.0               # a move_to has reached its point within this horizontally ...
ALTITUDE_TOLERANCE_M = 1.5    # ... and this vertically
MOVE_TIMEOUT_SLACK = 2.0      # a move_to times out after this many times its nominal flight time ...
MOVE_TIMEOUT_MIN_S = 10.0     # ... plus this
YIELD_TIMEOUT_S = 90.0        # a yield_to gives up after this long
LAND_TIMEOUT_S = 60.0
TAKEOFF_TIMEOUT_S = 30.0
BACK_OFF_M = 3.0              # after a collision a drone moves this far away from the other
AIRBORNE_SKILLS = ("move_to", "hover", "yield_to")  # skills a drone on the ground takes off for first



@dataclass
class Event:
    """What happened to one drone in one step (becomes ContextEntries and outcomes)."""

    agent: str
    step: int
    kind: EntryKind
    text: str
    success: bool = True
    action: str = ""
    to: str = ""          # addressed agent of a message ('' = a broadcast)
    failure: Failure = Failure.NONE


@dataclass
class Drone:
    """A drone's last state and its plan's progress."""

    name: str
    route: Route
    origin: Point
    position: Point = (0.0, 0.0, 0.0)   # world NED
    landed_state: int = LANDED
    plan: list[Step] = field(default_factory=list)
    cursor: int = 0
    step_started: float = 0.0      # simulated seconds when the current skill started
    commanded: bool = False        # the current skill's command has been sent
    segment: Optional[tuple[Point, Point]] = None  # (from, to) of the current move, for the tracking error
    done: bool = False             # landed at its goal
    waited: int = 0                # steps spent yielding, hovering or without a plan
    cleared: bool = False          # has crossed the intersection box
    travelled: float = 0.0         # horizontal metres flown

    @property
    def current(self) -> Optional[Step]:
        """The plan step being executed, None when the plan is done."""
        return self.plan[self.cursor] if self.cursor < len(self.plan) else None

    @property
    def altitude(self) -> float:
        """Metres above the ground."""
        return -self.position[2]

    def local(self, p: Point) -> Point:
        """A world NED point in this vehicle's frame."""
        return (p[0] - self.origin[0], p[1] - self.origin[1], p[2] - self.origin[2])


def horizontal(a: Point, b: Point) -> float:
    """Horizontal distance (m)."""
    return math.hypot(a[0] - b[0], a[1] - b[1])


def distance(a: Point, b: Point) -> float:
    """3-D distance (m)."""
    return math.dist(a, b)


def segment_distance(p: Point, a: Point, b: Point) -> float:
    """Horizontal distance from p to the segment a-b."""
    ax, ay, bx, by = a[0], a[1], b[0], b[1]
    dx, dy = bx - ax, by - ay
    length2 = dx * dx + dy * dy
    t = 0.0 if length2 == 0 else max(0.0, min(1.0, ((p[0] - ax) * dx + (p[1] - ay) * dy) / length2))
    return math.hypot(p[0] - (ax + t * dx), p[1] - (ay + t * dy))


class DroneWorld:
    """The episode state and its step function over an AirSim multirotor client."""

    def __init__(self, cfg: IntersectionConfig, client: Any, origins: dict[str, Point], step_s: float,
                 advance: Callable[[float], None], vector: Callable[..., Any]):
        cfg.validate()
        missing = [name for name in routes(cfg) if name not in origins]
        if missing:
            raise ValueError(f"the simulator has no vehicles {missing} (settings.json names {sorted(origins)})")
        self.cfg, self.client, self.step_s, self.advance, self.vector = cfg, client, step_s, advance, vector
        self.rng = random.Random(cfg.seed)
        self.t = 0
        self.drones = {name: Drone(name, route, origins[name], route.start) for name, route in routes(cfg).items()}
        self.gust_left = 0
        self.near_misses = self.collisions = 0
        self.min_distance = math.inf
        self.reported_pairs: set[tuple[str, str]] = set()  # pairs closer than d_min at the last step
        self.contacts: set[tuple[str, str]] = set()        # pairs in contact at the last step

    # ------------------------------------------------------------------ episode

    @property
    def sim_time(self) -> float:
        """Simulated seconds since the episode started."""
        return self.t * self.step_s

    def start(self) -> None:
        """Reset the simulator; API control, arm and take off every drone; read the first states."""
        self.client.reset()
        self.client.simSetWind(self.vector(0.0, 0.0, 0.0))
        for name in self.drones:
            self.client.enableApiControl(True, name)
            self.client.armDisarm(True, name)
        for d in self.drones.values():
            d.plan, d.cursor, d.commanded = [Step("takeoff")], 0, False
        self.read_states()

    def set_plan(self, name: str, plan: list[Step]) -> bool:
        """Replace a drone's plan (the current skill is abandoned; a drone on the ground takes off first; a drone
        that landed at its goal keeps its place); True when it differs from what was left."""
        d = self.drones[name]
        if d.done:
            return False  # landed at its goal: the task is over, the drone stays down
        changed = [(s.action, s.parameters) for s in plan] != [(s.action, s.parameters) for s in d.plan[d.cursor:]]
        plan = list(plan)
        if plan and plan[0].action in AIRBORNE_SKILLS and d.landed_state == LANDED:
            plan.insert(0, Step("takeoff"))  # a drone on the ground takes off first
        d.plan, d.cursor, d.commanded, d.segment = plan, 0, False, None
        return changed

    # ------------------------------------------------------------------ step

    def step(self) -> list[Event]:
        """Advance the episode by one step; return what happened."""
        self.t += 1
        events: list[Event] = []
        self._wind(events)
        self.advance(self.step_s)
        previous = {n: d.position for n, d in self.drones.items()}
        self.read_states()
        for n, d in self.drones.items():
            d.travelled += horizontal(previous[n], d.position)
        events.extend(self._collisions())
        for name in sorted(self.drones):
            events.extend(self._execute(self.drones[name]))
        events.extend(self._proximity())
        events.extend(self._crossings())
        return events

    def read_states(self) -> None:
        """Every drone's position (world NED) and landed state from the simulator."""
        for d in self.drones.values():
            state = self.client.getMultirotorState(vehicle_name=d.name)
            p = state.kinematics_estimated.position
            d.position = (d.origin[0] + float(p.x_val), d.origin[1] + float(p.y_val), d.origin[2] + float(p.z_val))
            d.landed_state = int(state.landed_state)

    def _wind(self, events: list[Event]) -> None:
        """Start or end a gust (seeded): the simulator's wind pushes every drone off its lane."""
        if self.gust_left > 0:
            self.gust_left -= 1
            if self.gust_left == 0:
                self.client.simSetWind(self.vector(0.0, 0.0, 0.0))
            return
        if self.cfg.gust_speed_mps > 0 and self.rng.random() < self.cfg.gust_probability:
            bearing = self.rng.uniform(0.0, 2 * math.pi)
            speed = self.cfg.gust_speed_mps
            self.client.simSetWind(self.vector(speed * math.cos(bearing), speed * math.sin(bearing), 0.0))
            self.gust_left = self.cfg.gust_steps
            compass = ("north", "north-east", "east", "south-east", "south", "south-west", "west", "north-west")
            towards = compass[round(math.degrees(bearing) / 45.0) % 8]
            events.append(Event(TOWER, self.t, EntryKind.MESSAGE,
                                f"tower -> all: gust of {speed:.0f} m/s blowing {towards} for "
                                f"{self.cfg.gust_steps * self.step_s:.0f} s"))

    def _collisions(self) -> list[Event]:
        """Collision info of every drone (AirSim clears it on read). A new contact is one collision: both drones
        drop their plans, report the failure once and back off from each other; a contact that lasts says nothing
        more."""
        events, pairs = [], set()
        for name in sorted(self.drones):
            info = self.client.simGetCollisionInfo(vehicle_name=name)
            if not info.has_collided:
                continue
            other = str(info.object_name)
            pair = tuple(sorted((name, other)))
            pairs.add(pair)
            if pair in self.contacts:
                continue
            d = self.drones[name]
            action = d.current.action if d.current else "hover"
            d.plan, d.cursor, d.commanded, d.segment = [], 0, False, None
            self._back_off(d, self.drones[other].position if other in self.drones else d.position)
            events.append(Event(name, self.t, EntryKind.FAILURE_TRACE, f"{name} collided with {other or 'an obstacle'}",
                                False, action, failure=Failure.COLLISION))
        self.collisions += len(pairs - self.contacts)
        self.contacts = pairs
        return events

    def _back_off(self, d: Drone, away_from: Point) -> None:
        """Move BACK_OFF_M horizontally away from `away_from` and hold there (hover in contact would hold the
        contact)."""
        dx, dy = d.position[0] - away_from[0], d.position[1] - away_from[1]
        norm = math.hypot(dx, dy) or 1.0
        target = (d.position[0] + BACK_OFF_M * dx / norm, d.position[1] + BACK_OFF_M * dy / norm, d.position[2])
        x, y, z = d.local(target)
        self.client.moveToPositionAsync(x, y, z, 2.0, vehicle_name=d.name)

    def _proximity(self) -> list[Event]:
        """Near-misses (pairs closer than d_min, counted once per step) and the minimum distance of flying drones."""
        events = []
        names = sorted(self.drones)
        close = set()
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                da, db = self.drones[a], self.drones[b]
                if da.landed_state == LANDED or db.landed_state == LANDED:
                    continue
                gap = distance(da.position, db.position)
                self.min_distance = min(self.min_distance, gap)
                if gap < self.cfg.hazard_distance_m:
                    close.add((a, b))
                    if (a, b) not in self.reported_pairs:
                        events.append(Event(a, self.t, EntryKind.MESSAGE,
                                            f"{a} -> all: {b} within {gap:.1f} m", True))
        self.near_misses += len(close)
        self.reported_pairs = close
        return events

    def _crossings(self) -> list[Event]:
        """A drone that has just cleared the box tells the drone after it in the crossing order."""
        events = []
        order = self.order()
        for i, name in enumerate(order):
            d = self.drones[name]
            if d.cleared or not cleared(self.cfg, d.route, d.position[0], d.position[1]):
                continue
            d.cleared = True
            after = order[i + 1] if i + 1 < len(order) else ""
            text = f"{name} -> {after}: cleared the intersection" if after else f"{name} -> all: cleared the intersection"
            events.append(Event(name, self.t, EntryKind.MESSAGE, text, to=after))
        return events

    # ------------------------------------------------------------------ skills

    def _finish(self, d: Drone, text: str, success: bool = True, failure: Failure = Failure.NONE) -> Event:
        action = d.current.action if d.current else ""
        d.cursor += 1
        d.commanded, d.segment = False, None
        kind = EntryKind.ACTION_OUTCOME if success else EntryKind.FAILURE_TRACE
        return Event(d.name, self.t, kind, text, success, action, failure=failure)

    def _execute(self, d: Drone) -> list[Event]:
        """Start or follow up the drone's current skill."""
        events: list[Event] = []
        step = d.current
        if step is None:
            d.waited += 1
            return events
        elapsed = self.sim_time - d.step_started
        if not d.commanded:
            error = self._command(d, step)
            if error:
                return [self._finish(d, error, False, Failure.EXECUTOR)]
            d.commanded, d.step_started, elapsed = True, self.sim_time, 0.0
        act, p = step.action, step.parameters
        if act == "takeoff":
            if d.altitude >= TAKEOFF_ALTITUDE_M:
                events.append(self._finish(d, f"took off, at {d.altitude:.1f} m"))
            elif elapsed > TAKEOFF_TIMEOUT_S:
                events.append(self._finish(d, "takeoff timed out", False, Failure.TIMEOUT))
        elif act == "move_to":
            target = (float(p["x"]), float(p["y"]), float(p["z"]))
            nominal = distance(d.segment[0], target) / max(float(p["speed"]), 0.1) if d.segment else 0.0
            lands_next = d.cursor + 1 < len(d.plan) and d.plan[d.cursor + 1].action == "land"
            if horizontal(d.position, target) <= REACHED_M and (
                    abs(d.position[2] - target[2]) <= ALTITUDE_TOLERANCE_M or lands_next):
                # Above the point with a landing next: the landing takes the altitude (no climb back first).
                events.append(self._finish(d, f"reached ({_xy(target)})"))
            elif elapsed > MOVE_TIMEOUT_SLACK * nominal + MOVE_TIMEOUT_MIN_S:
                self.client.hoverAsync(vehicle_name=d.name)
                events.append(self._finish(d, f"move_to({_xy(target)}) timed out at ({_xy(d.position)})", False,
                                           Failure.TIMEOUT))
        elif act == "hover":
            d.waited += 1
            if elapsed >= float(p.get("seconds", 0.0)):
                events.append(self._finish(d, f"hovered {float(p.get('seconds', 0.0)):.0f} s"))
        elif act == "yield_to":
            d.waited += 1
            other = self.drones[p["agent"]]
            if other.done or cleared(self.cfg, other.route, other.position[0], other.position[1]):
                events.append(self._finish(d, f"{other.name} cleared the intersection, crossing"))
            elif elapsed > YIELD_TIMEOUT_S:
                events.append(self._finish(d, f"yield_to({other.name}) timed out", False, Failure.TIMEOUT))
        elif act == "land":
            if d.landed_state == LANDED and d.altitude < 0.5:
                events.append(self._finish(d, f"landed at ({_xy(d.position)})"))
                if not d.done and arrived(self.cfg, d.route, d.position[0], d.position[1]):
                    d.done = True
                    events.append(Event(d.name, self.t, EntryKind.TASK_DONE, f"task done: {d.name} landed at its goal"))
            elif elapsed > LAND_TIMEOUT_S:
                events.append(self._finish(d, "landing timed out", False, Failure.TIMEOUT))
        if d.current is not None and d.current is not step:
            events.extend(self._execute(d))  # a skill that finished at once lets the next one start this step
        return events

    def _command(self, d: Drone, step: Step) -> str:
        """Send the skill's command; an error text when the step cannot run."""
        act, p = step.action, step.parameters
        name = d.name
        if act == "takeoff":
            self.client.takeoffAsync(vehicle_name=name)
        elif act == "move_to":
            try:
                target = (float(p["x"]), float(p["y"]), float(p["z"]))
                speed = float(p["speed"])
            except (KeyError, TypeError, ValueError):
                return f"move_to needs numbers x, y, z, speed (got {sorted(p)})"
            if speed <= 0:
                return "move_to speed must be positive"
            d.segment = (d.position, target)
            x, y, z = d.local(target)
            self.client.moveToPositionAsync(x, y, z, speed, vehicle_name=name)
        elif act == "hover":
            self.client.hoverAsync(vehicle_name=name)
        elif act == "yield_to":
            other = p.get("agent", "")
            if other not in self.drones or other == name:
                return f"yield_to({other}): not another drone"
            hold = d.route.hold
            if d.route.progress(d.position[0], d.position[1]) < d.route.progress(hold[0], hold[1]):
                d.segment = (d.position, hold)
                x, y, z = d.local(hold)
                self.client.moveToPositionAsync(x, y, z, self.cfg.cruise_speed_mps, vehicle_name=name)
            else:
                self.client.hoverAsync(vehicle_name=name)
        elif act == "land":
            self.client.landAsync(vehicle_name=name)
        else:
            return f"unknown skill {act}"
        return ""

    # ------------------------------------------------------------------ views and metrics

    def tracking_error(self, name: str) -> float:
        """Drift sensor: horizontal distance (m) from the segment the current move flies (0 without one)."""
        d = self.drones[name]
        if d.segment is None:
            return 0.0
        return segment_distance(d.position, *d.segment)

    def views(self) -> dict[str, DroneView]:
        """What the oracle reads of every drone."""
        return {n: DroneView(d.position[0], d.position[1], d.landed_state == LANDED, d.done)
                for n, d in self.drones.items()}

    def oracle_plan(self, name: str) -> list[Step]:
        """The correct plan for `name` from the true state."""
        return oracle_plan(self.cfg, name, self.views())

    def order(self) -> list[str]:
        """The tower's crossing order."""
        return crossing_order(self.cfg)

    @property
    def success(self) -> bool:
        """Every drone landed at its goal, and no collision."""
        return all(d.done for d in self.drones.values()) and self.collisions == 0

    @property
    def finished(self) -> bool:
        """Every drone landed at its goal, or out of steps."""
        return all(d.done for d in self.drones.values()) or self.t >= self.cfg.max_steps

    def metrics(self) -> EpisodeMetrics:
        """Success, SPL-like efficiency, coordination wait, near-misses, collisions, minimum distance."""
        shortest = sum(horizontal(d.route.start, d.route.goal) for d in self.drones.values())
        flown = sum(d.travelled for d in self.drones.values())
        spl = shortest / max(flown, shortest) if self.success and shortest else float(self.success)
        measured = {PATH_EFFICIENCY: round(spl, 4), COORDINATION_WAIT: sum(d.waited for d in self.drones.values()),
                    NEAR_MISSES: self.near_misses, COLLISIONS: self.collisions}
        if math.isfinite(self.min_distance):  # never two drones in the air: not measured
            measured[MIN_DISTANCE_M] = round(self.min_distance, 3)
        return EpisodeMetrics(success=self.success, steps=self.t, delivered=sum(d.done for d in self.drones.values()),
                              tasks=len(self.drones), metrics=measured)


WORLD = "airsim"
"""Episode.world and WorldState.world of the drone intersection."""

WAITING_SKILLS = ("hover", "yield_to")


def _enu(p: Point) -> Pose:
    return Pose(p[1], p[0], -p[2])  # AirSim's NED as ROS's ENU (x east, y north, z up), as agent_states


def _activity(d: Drone) -> AgentActivity:
    step = d.current
    if step is None:
        return AgentActivity(d.name, Activity.IDLE, index=d.cursor, plan_steps=len(d.plan))
    kind = Activity.WAITING if step.action in WAITING_SKILLS else Activity.EXECUTING
    return AgentActivity(d.name, kind, step.action, parameters_text(step.parameters), d.cursor, len(d.plan))


def world_state(world: DroneWorld, episode: int) -> WorldState:
    """The intersection as a scene graph, poses in ENU (as agent_states; the planner's text is NED).

    Entities: the drones (state landed, flying, or arrived: landed at its goal), the intersection box, each
    drone's task (land at its goal: open, done; its pose is the goal). Relations: drone assigned its task, drone in
    the intersection box, drones near each other (closer than d_min at the last step), drone after the drone
    before it in the tower's crossing order, drone yields_to the drone its yield_to step waits for.
    """
    entities: list[Entity] = []
    relations: list[Relation] = []
    cfg = world.cfg
    for name, d in sorted(world.drones.items()):
        state = "arrived" if d.done else "landed" if d.landed_state == LANDED else "flying"
        entities.append(Entity(name, "drone", state, _enu(d.position),
                               {"approach": d.route.approach, "row": str(d.route.row), "cleared": str(d.cleared).lower()}))
        if in_box(cfg, d.position[0], d.position[1]):
            relations.append(Relation(name, Predicate.IN, "intersection"))
        relations.append(Relation(name, Predicate.ASSIGNED, f"task_{name}"))
        if d.current is not None and d.current.action == "yield_to" and d.current.parameters.get("agent") in world.drones:
            relations.append(Relation(name, Predicate.YIELDS_TO, d.current.parameters["agent"]))
    relations += [Relation(a, Predicate.NEAR, b) for a, b in sorted(world.reported_pairs)]
    order = world.order()
    relations += [Relation(later, Predicate.AFTER, before) for before, later in zip(order, order[1:], strict=False)]
    entities.append(Entity("intersection", "area", pose=Pose(), attributes={"half_width_m": f"{cfg.box_m:g}"}))
    for name, d in sorted(world.drones.items()):
        gx, gy, _ = d.route.goal
        entities.append(Entity(f"task_{name}", "task", "done" if d.done else "open", _enu(d.route.goal),
                               {"text": f"{name} lands at its goal ({gx:.1f}, {gy:.1f}) NED"}))
    return WorldState(WORLD, episode, world.t, tuple(entities), tuple(relations),
                      tuple(_activity(world.drones[n]) for n in sorted(world.drones)))


def _xy(p: Point) -> str:
    return f"{p[0]:.1f}, {p[1]:.1f}, {p[2]:.1f}"
