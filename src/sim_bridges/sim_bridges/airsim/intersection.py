"""The K-drone intersection (paper Table 2's AirSim setting): geometry, crossing order, oracle, skill schema.

ROS-free and simulator-free: what the scenario *is*, not how it is flown (drone_world.py flies it through
AirSim's client). Coordinates are world NED metres (x north, y east, z down) with the intersection's centre
at the origin and the ground at z = 0.

Eight drones (K <= 8) come from four approaches (south, west, north, east; drone i from approach i % 4,
row i // 4 behind the first) on right-hand lanes `lane_offset_m` off the centre line, cross the
intersection and land at goals on the far side. Lanes of crossing approaches meet inside the intersection box,
so drones that enter together come closer than d_min or collide. The intersection manager ("tower") gives
every drone its place in the crossing order when the episode starts; the oracle enters only after the drone
before it has cleared the box (`yield_to`), flies to its goal at cruise altitude and lands.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

from brace_common.action_schema import ActionSchema, Step
from brace_common.config import ConfigError, check_fields, param

TOWER = "tower"
"""Agent id of the intersection manager's messages and the episode's framing."""

APPROACHES = ("south", "west", "north", "east")
"""Approach of drone i: APPROACHES[i % 4] (the crossing order breaks distance ties in this order)."""

# Unit heading (north, east) of a drone coming from each approach.
_HEADING = {"south": (1.0, 0.0), "west": (0.0, 1.0), "north": (-1.0, 0.0), "east": (0.0, -1.0)}


@dataclass
class IntersectionConfig:
    """Parameters of the intersection scenario; each field is also an airsim_bridge parameter of the same name."""

    num_agents: int = param(8, "K: drones (drone i comes from approach i % 4: south, west, north, east)", 1, 8)
    seed: int = param(0, "scenario seed (airsim_bridge: of the first episode; episode e runs seed + e)", 0, 2**31 - 1)
    max_steps: int = param(150, "steps after which an unfinished episode fails", 1, 10**6)
    approach_m: float = param(40.0, "distance of the first row's start from the centre (m)", 10.0, 1000.0)
    row_spacing_m: float = param(15.0, "distance between two drones of one approach (m)", 2.0, 1000.0)
    goal_m: float = param(40.0, "distance of the first row's goal beyond the centre (m)", 10.0, 1000.0)
    lane_offset_m: float = param(3.0, "right-hand lane offset from the centre line (m)", 0.0, 100.0)
    cruise_altitude_m: float = param(10.0, "altitude every drone crosses at (m above ground)", 2.0, 500.0)
    cruise_speed_mps: float = param(5.0, "speed the oracle flies at (m/s)", 0.5, 50.0)
    box_m: float = param(8.0, "half-width of the intersection box: a drone inside it occupies the crossing (m)",
                         1.0, 100.0)
    hold_m: float = param(12.0, "where a yielding drone of the first row holds, this far before the centre on its "
                          "lane (m; the second row holds row_spacing_m further back)", 1.0, 1000.0)
    goal_tolerance_m: float = param(2.0, "horizontal distance from the goal that counts as arrived (m)", 0.1, 100.0)
    hazard_distance_m: float = param(4.0, "d_min: drone pairs closer than this count as a near-miss (m)", 0.0, 100.0)
    gust_probability: float = param(0.05, "probability per step that a wind gust starts", 0.0, 1.0)
    gust_speed_mps: float = param(8.0, "wind speed of a gust (m/s)", 0.0, 60.0)
    gust_steps: int = param(3, "steps a gust lasts", 1, 1000)
    vehicles: list[str] = param([], "vehicle names as in AirSim's settings.json, drone i first ([] = drone_0, "
                                "drone_1, ...); they are the agent ids")

    def validate(self) -> None:
        """ConfigError naming the first invalid field."""
        check_fields(self)
        if self.vehicles and len(self.vehicles) != self.num_agents:
            raise ConfigError("vehicles", f"names {len(self.vehicles)} vehicles for {self.num_agents} agents")
        if len(set(self.vehicles)) != len(self.vehicles) or any(not v.strip() for v in self.vehicles):
            raise ConfigError("vehicles", f"{self.vehicles}: names must be distinct and not empty")
        if self.hold_m <= self.box_m:
            raise ConfigError("hold_m", f"{self.hold_m} must exceed box_m ({self.box_m}): drones hold outside the box")
        if self.approach_m <= self.hold_m:
            raise ConfigError("approach_m", f"{self.approach_m} must exceed hold_m ({self.hold_m})")

    def names(self) -> list[str]:
        """The drones' names (agent ids), drone i first."""
        return list(self.vehicles) or [drone_name(i) for i in range(self.num_agents)]

    def scenario_fields(self) -> dict:
        """The scenario's own fields (without what a subclass adds)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(IntersectionConfig)}


Point = tuple[float, float, float]  # world NED (m)


@dataclass(frozen=True)
class Route:
    """One drone's route: where it starts (on the ground), where it holds to yield, where it lands."""

    drone: str
    approach: str
    row: int
    start: Point      # spawn point on the ground (z = 0)
    hold: Point       # yielding position, cruise altitude
    goal: Point       # landing point on the ground (z = 0)

    @property
    def heading(self) -> tuple[float, float]:
        """Unit (north, east) direction of travel."""
        return _HEADING[self.approach]

    def progress(self, x: float, y: float) -> float:
        """Signed distance (m) along the heading from the centre's cross line: < 0 before it, > 0 past it."""
        hx, hy = self.heading
        return x * hx + y * hy

    def cross_track(self, x: float, y: float) -> float:
        """Horizontal distance (m) from the route's lane (the line through start and goal)."""
        hx, hy = self.heading
        sx, sy = self.start[0], self.start[1]
        return abs((x - sx) * hy - (y - sy) * hx)


def drone_name(index: int) -> str:
    """The vehicle name of drone `index` (as in AirSim's settings.json)."""
    return f"drone_{index}"


def _round(v: float) -> float:
    return round(v, 3) + 0.0  # no -0.0 in text


def routes(cfg: IntersectionConfig) -> dict[str, Route]:
    """Every drone's route, by name."""
    out = {}
    for i, name in enumerate(cfg.names()):
        approach, row = APPROACHES[i % 4], i // 4
        hx, hy = _HEADING[approach]
        # The right-hand side of heading (hx, hy) in NED is (-hy, hx).
        ox, oy = -hy * cfg.lane_offset_m, hx * cfg.lane_offset_m
        back = cfg.approach_m + row * cfg.row_spacing_m
        ahead = cfg.goal_m + row * cfg.row_spacing_m
        z = -cfg.cruise_altitude_m
        out[name] = Route(
            name, approach, row,
            start=(_round(ox - hx * back), _round(oy - hy * back), 0.0),
            hold=(_round(ox - hx * (cfg.hold_m + row * cfg.row_spacing_m)),
                  _round(oy - hy * (cfg.hold_m + row * cfg.row_spacing_m)), _round(z)),
            goal=(_round(ox + hx * ahead), _round(oy + hy * ahead), 0.0))
    return out


def crossing_order(cfg: IntersectionConfig) -> list[str]:
    """The tower's crossing order: nearer rows first, ties in approach order (south, west, north, east)."""
    names = cfg.names()
    return [names[i] for i in sorted(range(cfg.num_agents), key=lambda i: (i // 4, i % 4))]


def settings(cfg: IntersectionConfig, clock_speed: float = 1.0) -> dict:
    """AirSim's settings.json for the scenario: one SimpleFlight multirotor per drone at its start."""
    return {"SettingsVersion": 2.0, "SimMode": "Multirotor", "ClockSpeed": clock_speed,
            "Vehicles": {name: {"VehicleType": "SimpleFlight", "X": r.start[0], "Y": r.start[1], "Z": r.start[2]}
                         for name, r in routes(cfg).items()}}


def in_box(cfg: IntersectionConfig, x: float, y: float) -> bool:
    """Inside the intersection box."""
    return abs(x) < cfg.box_m and abs(y) < cfg.box_m


def cleared(cfg: IntersectionConfig, route: Route, x: float, y: float) -> bool:
    """Past the box along its route: the crossing is free for the next drone."""
    return route.progress(x, y) >= cfg.box_m


def arrived(cfg: IntersectionConfig, route: Route, x: float, y: float) -> bool:
    """Within the goal tolerance of its goal (horizontally)."""
    return math.hypot(x - route.goal[0], y - route.goal[1]) <= cfg.goal_tolerance_m


def fly_to(cfg: IntersectionConfig, goal: Point) -> Step:
    """move_to the point above `goal` at cruise altitude and speed."""
    return Step("move_to", {"x": goal[0], "y": goal[1], "z": -cfg.cruise_altitude_m, "speed": cfg.cruise_speed_mps})


@dataclass(frozen=True)
class DroneView:
    """What the oracle needs of one drone: where it is, whether it has landed, whether it finished."""

    x: float
    y: float
    landed: bool
    done: bool


def predecessor(cfg: IntersectionConfig, drone: str) -> Optional[str]:
    """The drone before `drone` in the crossing order, or None for the first."""
    order = crossing_order(cfg)
    i = order.index(drone)
    return order[i - 1] if i > 0 else None


def must_yield(cfg: IntersectionConfig, drone: str, views: dict[str, DroneView]) -> Optional[str]:
    """The drone `drone` has to let cross first, or None.

    A drone that has not reached the box waits for its predecessor in the crossing order until that one
    has cleared the box (or finished).
    """
    r = routes(cfg)
    me = views[drone]
    if r[drone].progress(me.x, me.y) > -cfg.box_m:
        return None  # already at or in the box: go on
    before = predecessor(cfg, drone)
    if before is None or before not in views:
        return None
    other = views[before]
    if other.done or cleared(cfg, r[before], other.x, other.y):
        return None
    return before


def oracle_plan(cfg: IntersectionConfig, drone: str, views: dict[str, DroneView]) -> list[Step]:
    """The correct plan from the true state: yield if the crossing is not free, fly to the goal, land."""
    me = views[drone]
    route = routes(cfg)[drone]
    if me.done:
        return [Step("land")] if not me.landed else [Step("hover", {"seconds": 2.0})]
    if arrived(cfg, route, me.x, me.y):
        return [Step("land")]
    plan: list[Step] = []
    yield_to = must_yield(cfg, drone, views)
    if yield_to is not None:
        plan.append(Step("yield_to", {"agent": yield_to}))
    return plan + [fly_to(cfg, route.goal), Step("land")]


MAX_COORDINATE_M = 10_000.0
"""Largest |coordinate| or speed a plan may name."""

DRONE_SKILLS = ActionSchema.from_dict({
    "max_steps": 3,
    "entities": {"drone": []},
    "actions": {
        "takeoff": {},
        "move_to": {axis: {"type": "number", "min": -MAX_COORDINATE_M, "max": MAX_COORDINATE_M} for axis in "xyz"}
        | {"speed": {"type": "number", "min": 0.0, "exclusive_min": True, "max": MAX_COORDINATE_M}},
        "hover": {"seconds": {"type": "number", "required": False, "min": 0.0, "exclusive_min": True,
                              "max": MAX_COORDINATE_M}},
        "yield_to": {"agent": {"type": "string", "entity": "drone", "not_self": True}},
        "land": {},
    }})
"""What a drone executes (the world's intake schema): NED metres, positive speeds and hover times (a hover
without `seconds` holds until the next plan), yielding to another drone of the scenario."""


def drone_schema(cfg: IntersectionConfig) -> ActionSchema:
    """The drone skills of scenario `cfg`: its drones are the ones a drone may yield to."""
    return DRONE_SKILLS.extend({"entities": {"drone": cfg.names()}})


def action_schema(cfg: IntersectionConfig, max_steps: int = 3) -> dict:
    """The planner's schema: the drone skills with every parameter enumerated from the scenario.

    `move_to` takes world NED coordinates: x and y among the goals' and holds' coordinates, z the cruise
    altitude (negative: up), speed the cruise speed; a planned hover names its seconds. Three steps hold every
    oracle plan (yield, fly, land).
    """
    rs = routes(cfg).values()
    xs = sorted({r.goal[0] for r in rs} | {r.hold[0] for r in rs})
    ys = sorted({r.goal[1] for r in rs} | {r.hold[1] for r in rs})
    return drone_schema(cfg).extend({"max_steps": max_steps, "actions": {
        "move_to": {"x": {"choices": xs}, "y": {"choices": ys}, "z": {"choices": [-cfg.cruise_altitude_m]},
                    "speed": {"choices": [cfg.cruise_speed_mps]}},
        "hover": {"seconds": {"choices": [2.0, 5.0], "required": True}},
    }}).to_dict()


def same_step(a: Step, b: Step, tolerance: float = 1e-6) -> bool:
    """Two skill calls are the same (numbers equal within `tolerance`)."""
    if a.action != b.action or set(a.parameters) != set(b.parameters):
        return False
    for key, value in a.parameters.items():
        other = b.parameters[key]
        if isinstance(value, (int, float)) and isinstance(other, (int, float)):
            if abs(float(value) - float(other)) > tolerance:
                return False
        elif value != other:
            return False
    return True
