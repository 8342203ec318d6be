"""The collision monitor's zones (ROS-free): what each does to one agent's commanded motion.

Nav2's collision_monitor is the model: the zones act on the commanded motion, never on the plan, from what the
world senses. Three zones around an agent, each named by its action (docs/safety.md):
- stop: an obstacle closer than `hazard_distance_m` -> motion closing on it is stopped; the zone grows by the
  stopping distance at the agents' sensed closing speed v: v x `reaction_time_s` (covered before a stop takes
  hold) + v^2 / 2a at `braking_deceleration_mps2`, so that a vehicle that cannot stop at once still ends outside
  hazard_distance_m;
- slowdown: closer than `slowdown_distance_m` -> motion closing on it is scaled by `slowdown_ratio`;
- approach: the command is simulated forward; if it would bring the stop zone's edge within
  `time_before_collision_s`, it is scaled so that, at the speed let through, the edge is that far away in time.
Unlike Nav2's polygons, a zone acts only on motion that closes on the obstacle, so an agent can always move away.
A fourth zone, restore, is for monitors that can command motion of their own (the AirSim proxy): an agent its
command does not move (held, or hovering) that something else brought into the stop zone (wind, braking past the
edge) is commanded straight back out of it. A fifth, yield, is the right of way between agents that both move under
their own command (the first in `agents` has it over the later ones): where the slowdown or approach zone limits an
agent's motion for one with the right of way, it holds instead, and one that stands in the way of an agent with the
right of way, limiting it, is flown out of its way (make way) — a jam of agents each slowed by the next resolves
one agent at a time instead of each creeping until none moves.
Distances are between centres (an agent's, another agent's); for a keep-out box, from the agent's point to the box.
"""

from __future__ import annotations

import math
from collections.abc import Container, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar, Optional

from brace_common.config import ConfigError, check_fields, param
from brace_common.vocabulary import ZoneAction

Vec3 = tuple[float, float, float]
ZONES = tuple(a.label for a in ZoneAction if a is not ZoneAction.NONE)
"""The zones a monitor can have: stop, slowdown, approach in priority order, restore and yield."""
COMMAND_ZONES = ZONES[:3]
"""The zones that act on a command (every monitor has them; restore and yield need one that commands motion)."""
MOTION_ZONES = ("restore", "yield")
"""The zones that command motion of the monitor's own (flying an agent out of a zone, or out of another's way)."""
CLOSING_M = 1e-6
"""A command closes on an obstacle when one simulation step brings it nearer by more than this (m)."""
PUSHED_MPS = 0.1
"""An agent its command does not move is being pushed in when it closes on an obstacle faster than this (m/s)."""
YIELDING = (ZoneAction.SLOWDOWN, ZoneAction.APPROACH)
"""The zones whose limit on an agent's motion, for one with the right of way, the yield zone turns into a hold (a stop
stays a stop: inside the stop zone it is a hazard, whoever has the right of way)."""


@dataclass
class ZoneConfig:
    """The zones of one monitor: which act, and their sizes (one field = one ROS parameter)."""

    RESTORES: ClassVar[bool] = False
    """Whether the monitor can command motion of its own (the restore and yield zones)."""

    enable: bool = param(True, "act on commanded motion (false: every command passes unchanged; the state is still "
                         "measured and published)")
    zones: list[str] = param(list(COMMAND_ZONES), "zones that act, of stop, slowdown, approach and (a monitor that "
                             "commands motion itself: airsim_monitor) restore, yield (docs/safety.md)")
    hazard_distance_m: float = param(1.0, "radius of the stop zone: motion closing on an obstacle nearer than this "
                                     "(centres; a keep-out box: from the agent's point) is stopped (m)", 0.01, 1000.0)
    slowdown_distance_m: float = param(2.0, "radius of the slowdown zone: motion closing on an obstacle nearer than "
                                       "this is scaled by slowdown_ratio (m)", 0.01, 1000.0)
    slowdown_ratio: float = param(0.5, "speed let through in the slowdown zone / speed commanded", 0.0, 1.0)
    time_before_collision_s: float = param(2.0, "approach zone: closing motion is scaled so the stop zone is at "
                                           "least this far away in time at the speed let through (s)", 0.05, 60.0)
    simulation_time_step_s: float = param(0.1, "time step of the forward simulation of a command (s)", 0.005, 1.0)
    braking_deceleration_mps2: float = param(0.0, "stop zone: grows by v^2 / (2 x this), v the sensed speed at "
                                             "which the agent and an obstacle close (m/s^2; 0: no growth, for "
                                             "vehicles that stop at once)", 0.0, 100.0)
    reaction_time_s: float = param(0.0, "stop zone: grows by v x this too, the distance covered at the closing "
                                   "speed v before a stop takes hold (a check's period and the vehicle's velocity "
                                   "lag; s)", 0.0, 10.0)
    footprint_radius_m: float = param(0.3, "radius of an agent's footprint (m); hazard_distance_m must exceed two "
                                      "(two agents' footprints never touch outside the stop zone)", 0.0, 100.0)

    def validate(self) -> None:
        """Ranges, known zones, and sizes that nest (slowdown outside stop; stop outside two footprints)."""
        check_fields(self)
        unknown = sorted(set(self.zones) - set(ZONES))
        if unknown or len(set(self.zones)) != len(self.zones):
            raise ConfigError("zones", f"{self.zones}: each of {', '.join(ZONES)} at most once")
        moving = [z for z in self.zones if z in MOTION_ZONES]
        if moving and not self.RESTORES:
            raise ConfigError("zones", f"{', '.join(moving)} needs a monitor that commands motion of its own "
                              f"(airsim_monitor); this one acts on commands only: {', '.join(COMMAND_ZONES)}")
        if "slowdown" in self.zones and self.slowdown_distance_m <= self.hazard_distance_m:
            raise ConfigError("slowdown_distance_m", f"{self.slowdown_distance_m} must exceed hazard_distance_m "
                              f"{self.hazard_distance_m} (the slowdown zone surrounds the stop zone)")
        if self.hazard_distance_m <= 2.0 * self.footprint_radius_m:
            raise ConfigError("hazard_distance_m", f"{self.hazard_distance_m} must exceed two footprint_radius_m "
                              f"({2.0 * self.footprint_radius_m:g}): agents would touch outside the stop zone")
        if self.simulation_time_step_s > self.time_before_collision_s:
            raise ConfigError("simulation_time_step_s", f"{self.simulation_time_step_s} is longer than "
                              f"time_before_collision_s {self.time_before_collision_s}")


@dataclass(frozen=True)
class Obstacle:
    """What a source sensed: another agent's centre moving at `velocity`, or a keep-out box (`half_extents_m`, axis
    aligned about `position`)."""

    id: str
    position: Vec3
    velocity: Vec3 = (0.0, 0.0, 0.0)
    half_extents_m: Optional[Vec3] = None

    def distance(self, point: Vec3, t: float = 0.0) -> float:
        """Distance from `point` to this obstacle `t` seconds on (a box's: 0 inside it)."""
        return math.dist(point, self.nearest_point(point, t))

    def nearest_point(self, point: Vec3, t: float = 0.0) -> Vec3:
        """The point of this obstacle nearest `point`, `t` seconds on (a box's: `point` itself inside it)."""
        centre = tuple(c + v * t for c, v in zip(self.position, self.velocity, strict=True))
        if self.half_extents_m is None:
            return centre
        return tuple(min(max(p, c - h), c + h) for p, c, h in zip(point, centre, self.half_extents_m, strict=True))


@dataclass(frozen=True)
class Motion:
    """An agent's commanded motion from where it is: a velocity in its body frame (yaw about z) and a yaw rate; a
    holonomic vehicle commanded in the world frame has yaw 0. `velocity` is what its source senses it doing now
    (world frame): the stop zone's braking growth reads it."""

    position: Vec3
    yaw: float
    linear: Vec3
    yaw_rate: float = 0.0
    velocity: Vec3 = (0.0, 0.0, 0.0)

    @property
    def moving(self) -> bool:
        """Whether the command moves the agent at all."""
        return any(v != 0.0 for v in self.linear) or self.yaw_rate != 0.0

    def scaled(self, ratio: float) -> Motion:
        """The same motion at `ratio` of its speed (Nav2 scales the whole command, turning included)."""
        return Motion(self.position, self.yaw, tuple(v * ratio for v in self.linear), self.yaw_rate * ratio,
                      self.velocity)

    def path(self, step_s: float, horizon_s: float) -> Iterator[tuple[float, Vec3]]:
        """(t, position) every `step_s` up to `horizon_s`, the command held (a unicycle when the yaw rate is set)."""
        (x, y, z), yaw = self.position, self.yaw
        vx, vy, vz = self.linear
        for k in range(1, max(1, round(horizon_s / step_s)) + 1):
            mid = yaw + self.yaw_rate * step_s / 2.0
            c, s = math.cos(mid), math.sin(mid)
            x, y, z = x + (c * vx - s * vy) * step_s, y + (s * vx + c * vy) * step_s, z + vz * step_s
            yaw += self.yaw_rate * step_s
            yield k * step_s, (x, y, z)


@dataclass(frozen=True)
class Verdict:
    """What the zones did to one command: the action, the speed let through / commanded, and why."""

    action: ZoneAction
    speed_ratio: float
    obstacle: str = ""
    distance_m: float = math.nan
    detail: str = ""


def nearest(point: Vec3, obstacles: Iterable[Obstacle]) -> tuple[str, float]:
    """(id, distance) of the obstacle nearest `point`; ("", NaN) without any."""
    return min(((o.id, o.distance(point)) for o in obstacles), key=lambda e: e[1], default=("", math.nan))


def closing_speed(motion: Motion, obstacle: Obstacle) -> float:
    """The speed at which the agent (its sensed velocity) and the obstacle close on each other now; 0 when they
    part or touch."""
    towards = [o - p for o, p in zip(obstacle.nearest_point(motion.position), motion.position, strict=True)]
    norm = math.hypot(*towards)
    if norm == 0.0:
        return 0.0
    relative = [a - b for a, b in zip(motion.velocity, obstacle.velocity, strict=True)]
    return max(0.0, sum(r * u for r, u in zip(relative, towards, strict=True)) / norm)


def stop_radius(cfg: ZoneConfig, motion: Motion, obstacle: Obstacle) -> float:
    """The stop zone's radius for `obstacle`: hazard_distance_m, grown by the stopping distance at the closing speed
    v: v x reaction_time_s + v^2 / 2a at braking_deceleration_mps2 (each when set)."""
    a, t = cfg.braking_deceleration_mps2, cfg.reaction_time_s
    if a <= 0.0 and t <= 0.0:
        return cfg.hazard_distance_m
    v = closing_speed(motion, obstacle)
    return cfg.hazard_distance_m + v * t + (v * v / (2.0 * a) if a > 0.0 else 0.0)


def check(cfg: ZoneConfig, motion: Motion, obstacles: Sequence[Obstacle]) -> Verdict:
    """The zones' verdict on `motion` among `obstacles`: the most restrictive action any zone calls for on any
    obstacle (a tie goes to the higher-priority zone); NONE with the nearest obstacle when nothing acts."""
    near, near_m = nearest(motion.position, obstacles)
    passed = Verdict(ZoneAction.NONE, 1.0, near, near_m)
    if not cfg.enable or not motion.moving or not obstacles:
        return passed
    path = list(motion.path(cfg.simulation_time_step_s, cfg.time_before_collision_s))
    verdicts = [v for obstacle in obstacles for v in _zone_verdicts(cfg, motion, obstacle, path)]
    return min(verdicts, key=lambda v: (v.speed_ratio, v.action), default=passed)


def restore(cfg: ZoneConfig, motion: Motion, obstacles: Sequence[Obstacle],
            speed_mps: float) -> Optional[tuple[Verdict, Vec3]]:
    """The restore zone, for an agent its command does not move (`motion.linear` is not read; its sensed `velocity`
    is): when it is inside an obstacle's hazard_distance_m, or inside its braking-grown stop zone and being pushed in,
    RESTORE and the velocity out (world frame, `speed_mps` long: away from each obstacle whose stop zone it is in,
    weighted by how deep); None otherwise."""
    if not cfg.enable or "restore" not in cfg.zones or speed_mps <= 0.0:
        return None
    away, inside = [0.0, 0.0, 0.0], []
    for o in obstacles:
        nearest_point = o.nearest_point(motion.position)
        d, radius = math.dist(motion.position, nearest_point), stop_radius(cfg, motion, o)
        if d >= radius:
            continue
        if d < cfg.hazard_distance_m or closing_speed(motion, o) > PUSHED_MPS:
            inside.append((d, o.id))
        # coincident centres have no direction out: any fixed one will do
        unit = [(p - q) / d for p, q in zip(motion.position, nearest_point, strict=True)] if d > 0.0 else [1, 0, 0]
        away = [a + u * (radius - d) / radius for a, u in zip(away, unit, strict=True)]
    norm = math.hypot(*away)
    if not inside or norm == 0.0:
        return None
    d0, obstacle = min(inside)
    verdict = Verdict(ZoneAction.RESTORE, 0.0, obstacle, d0,
                      f"inside {obstacle}'s stop zone at {d0:.2f} m: commanded out at {speed_mps:g} m/s")
    return verdict, tuple(a / norm * speed_mps for a in away)


def right_of_way(cfg: ZoneConfig, verdict: Verdict, ahead: Container[str]) -> Verdict:
    """The yield zone on a command's verdict: motion the slowdown or approach zone limits for an agent of `ahead`
    (those with the right of way over this one that move under their own command) is held instead (YIELD)."""
    if not cfg.enable or "yield" not in cfg.zones or verdict.action not in YIELDING or verdict.obstacle not in ahead:
        return verdict
    return Verdict(ZoneAction.YIELD, 0.0, verdict.obstacle, verdict.distance_m,
                   f"yielding to {verdict.obstacle} (right of way): {verdict.detail}")


def make_way(cfg: ZoneConfig, motion: Motion, blocked: Sequence[tuple[Obstacle, Vec3]],
             speed_mps: float) -> Optional[tuple[Verdict, Vec3]]:
    """The yield zone for an agent its command does not move that limits agents with the right of way (`blocked`:
    each as an obstacle, with its commanded velocity): YIELD and the velocity out of their way (`speed_mps` long,
    level: square off each one's course, to the side the agent already is); None when it blocks none."""
    if not cfg.enable or "yield" not in cfg.zones or speed_mps <= 0.0 or not blocked:
        return None
    side = [0.0, 0.0]
    for obstacle, heading in blocked:
        rx, ry = motion.position[0] - obstacle.position[0], motion.position[1] - obstacle.position[1]
        norm = math.hypot(heading[0], heading[1])
        if norm == 0.0:   # no course to leave: straight away from it
            away = math.hypot(rx, ry) or 1.0
            side = [side[0] + rx / away, side[1] + ry / away]
            continue
        ux, uy = heading[0] / norm, heading[1] / norm
        along = rx * ux + ry * uy
        wx, wy = rx - along * ux, ry - along * uy
        width = math.hypot(wx, wy)
        if width < 1e-6:   # on its course: to its left
            wx, wy, width = -uy, ux, 1.0
        side = [side[0] + wx / width, side[1] + wy / width]
    norm = math.hypot(*side)
    if norm == 0.0:
        return None
    first = min(blocked, key=lambda b: b[0].distance(motion.position))[0]
    d0 = first.distance(motion.position)
    verdict = Verdict(ZoneAction.YIELD, 0.0, first.id, d0, f"in the way of {first.id} (right of way) at {d0:.2f} m: "
                      f"flown out of its way at {speed_mps:g} m/s")
    return verdict, (side[0] / norm * speed_mps, side[1] / norm * speed_mps, 0.0)


def _zone_verdicts(cfg: ZoneConfig, motion: Motion, obstacle: Obstacle,
                   path: list[tuple[float, Vec3]]) -> Iterator[Verdict]:
    d0 = obstacle.distance(motion.position)
    t1, p1 = path[0]
    if obstacle.distance(p1, t1) >= d0 - CLOSING_M:
        return  # moving away from it, or past it: no zone acts on that
    zones = cfg.zones
    radius = stop_radius(cfg, motion, obstacle)
    if "stop" in zones and d0 < radius:
        yield Verdict(ZoneAction.STOP, 0.0, obstacle.id, d0, f"closing on {obstacle.id} at {d0:.2f} m < {radius:.3g} m")
    if "slowdown" in zones and d0 < cfg.slowdown_distance_m:
        yield Verdict(ZoneAction.SLOWDOWN, cfg.slowdown_ratio, obstacle.id, d0,
                      f"closing on {obstacle.id} at {d0:.2f} m < {cfg.slowdown_distance_m:g} m")
    if "approach" in zones:
        reached = _reached(radius, d0, obstacle, path)
        if reached is not None:
            yield Verdict(ZoneAction.APPROACH, reached / cfg.time_before_collision_s, obstacle.id, d0,
                          f"{obstacle.id} within {radius:.3g} m in {reached:.2f} s < "
                          f"{cfg.time_before_collision_s:g} s")


def _reached(radius_m: float, d0: float, obstacle: Obstacle, path: list[tuple[float, Vec3]]) -> Optional[float]:
    """When the path first comes within `radius_m` of the obstacle, interpolated between simulation steps (a time
    rounded up to a step would let a slow approach creep into the zone); 0 when it starts inside, None if never."""
    if d0 < radius_m:
        return 0.0
    before_t, before_d = 0.0, d0
    for t, p in path:
        d = obstacle.distance(p, t)
        if d < radius_m:
            return before_t + (t - before_t) * (before_d - radius_m) / (before_d - d)
        before_t, before_d = t, d
    return None
