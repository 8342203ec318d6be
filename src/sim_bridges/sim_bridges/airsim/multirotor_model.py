"""Point-mass multirotor physics for N vehicles in NED (x north, y east, z down; metres, seconds).

ROS-free and deterministic: the state advances in fixed steps of `dt`, so the same
commands at the same simulated times give the same trajectory however `advance`
is chunked. As in AirSim, each vehicle has a spawn origin in the world and every
position the API takes or returns is in the vehicle's local NED frame whose origin
is that spawn point (world = origin + local); velocities and the wind share axes
in both frames.

A flying vehicle's velocity follows the velocity its controller asks for with a
first-order lag and an acceleration limit. Position holding and segment tracking
are proportional with a bounded correction, and the controller cancels only part
of the wind (up to `wind_rejection` m/s, learnt with a lag), so a strong gust
pushes a vehicle off its segment and it recovers when the gust stops.

Commands (takeoff, move_to, move_z, move_velocity, land) return an id; each ends
in exactly one `Completion`: success, or failure when a newer command for the
same vehicle preempts it, its timeout passes or the world is reset.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Optional

from brace_common.config import check_fields, param


@dataclass(frozen=True)
class Vec3:
    """A 3-vector (NED metres, or metres per second)."""

    x: float = 0.0
    y: float = 0.0
    z: float = 0.0

    def __add__(self, other: Vec3) -> Vec3:
        return Vec3(self.x + other.x, self.y + other.y, self.z + other.z)

    def __sub__(self, other: Vec3) -> Vec3:
        return Vec3(self.x - other.x, self.y - other.y, self.z - other.z)

    def __mul__(self, k: float) -> Vec3:
        return Vec3(self.x * k, self.y * k, self.z * k)

    def norm(self) -> float:
        """Euclidean length."""
        return math.sqrt(self.x * self.x + self.y * self.y + self.z * self.z)

    def clipped(self, limit: float) -> Vec3:
        """The same direction, at most `limit` long."""
        n = self.norm()
        return self * (limit / n) if n > limit else self


ZERO = Vec3()


@dataclass
class MultirotorConfig:
    """Constants of the multirotor model (defaults roughly match AirSim's SimpleFlight quadrotor)."""

    dt: float = param(0.01, "fixed physics step (s); advance() integrates in steps of dt", 1e-4, 0.1)
    takeoff_height: float = param(3.0, "takeoff climbs to this height above the spawn point (m, AirSim's default)",
                                  0.1, 100.0)
    takeoff_speed: float = param(1.0, "climb speed of takeoff (m/s)", 0.05, 20.0)
    land_speed: float = param(1.0, "descent speed of land (m/s)", 0.05, 20.0)
    max_speed: float = param(20.0, "commanded speeds are capped at this (m/s)", 0.1, 100.0)
    max_vertical_speed: float = param(3.0, "climb / descent speed of moveByVelocityZ's height hold (m/s)", 0.1, 50.0)
    velocity_tau: float = param(0.3, "time constant of the velocity response (s)", 0.01, 10.0)
    max_accel: float = param(5.0, "acceleration limit (m/s^2)", 0.1, 100.0)
    path_accel: float = param(3.0, "acceleration and braking of the carrot along a move's segment (m/s^2)", 0.1, 100.0)
    position_gain: float = param(1.5, "proportional gain of position holding and segment tracking (1/s)", 0.01, 20.0)
    correction_limit: float = param(2.0, "largest velocity the position correction may add (m/s)", 0.0, 50.0)
    arrival_tolerance: float = param(0.2, "a move is done within this distance of its target (m)", 0.01, 10.0)
    wind_gain: float = param(0.5, "share of the wind speed that becomes vehicle velocity", 0.0, 1.0)
    wind_rejection: float = param(2.0, "largest wind-induced velocity the controller cancels (m/s)", 0.0, 50.0)
    wind_rejection_tau: float = param(1.0, "time the controller takes to learn a changed wind (s)", 0.01, 100.0)
    radius: float = param(0.5, "collision radius of every vehicle (m)", 0.01, 10.0)
    ground_z: float = param(0.0, "world z of the ground (NED: vehicles stay at z <= ground_z)", -1e4, 1e4)

    def validate(self) -> None:
        """ConfigError (a ValueError) naming the offending field."""
        check_fields(self)


class Mode(str, enum.Enum):
    """What a vehicle is doing."""

    LANDED = "landed"
    TAKING_OFF = "taking_off"
    HOVERING = "hovering"
    MOVING = "moving"
    VELOCITY = "velocity"
    LANDING = "landing"


@dataclass(frozen=True)
class Completion:
    """The end of a command: `success`, or why not (`reason`: done, preempted, timeout, reset)."""

    vehicle: str
    command: int
    success: bool
    reason: str


@dataclass(frozen=True)
class Collision:
    """A vehicle-vehicle contact as AirSim's CollisionInfo reports it (positions in the vehicle's local frame)."""

    object_name: str
    impact_point: Vec3
    normal: Vec3
    penetration_depth: float
    position: Vec3
    time_stamp: int


@dataclass(frozen=True)
class VehicleState:
    """A snapshot of one vehicle: position in its local frame, velocity and acceleration (NED)."""

    name: str
    origin: Vec3
    position: Vec3
    velocity: Vec3
    acceleration: Vec3
    mode: Mode

    @property
    def landed(self) -> bool:
        """On the ground (AirSim's LandedState.Landed)."""
        return self.mode is Mode.LANDED

    @property
    def world_position(self) -> Vec3:
        """Position in the world frame."""
        return self.origin + self.position


@dataclass
class _Vehicle:
    name: str
    origin: Vec3
    pos: Vec3 = ZERO            # local frame
    vel: Vec3 = ZERO
    acc: Vec3 = ZERO
    mode: Mode = Mode.LANDED
    hold: Vec3 = ZERO           # hovering: the point held (local)
    start: Vec3 = ZERO          # moving / taking off: the segment
    target: Vec3 = ZERO
    speed: float = 0.0
    travelled: float = 0.0      # carrot's distance along the segment
    carrot_speed: float = 0.0
    velocity: Vec3 = ZERO       # velocity command
    z_hold: Optional[float] = None
    until_tick: int = 0
    command: Optional[int] = None
    deadline: Optional[int] = None
    wind_estimate: Vec3 = ZERO  # the share of the wind the controller has learnt to cancel
    collision: Optional[Collision] = None
    collisions: int = 0


class MultirotorModel:
    """N point-mass multirotors, their commands, wind and vehicle-vehicle collisions."""

    def __init__(self, origins: dict[str, tuple[float, float, float]], config: Optional[MultirotorConfig] = None):
        if not origins:
            raise ValueError("a multirotor model needs at least one vehicle")
        self.config = config or MultirotorConfig()
        self.config.validate()
        self._vehicles = {name: _Vehicle(name, Vec3(*map(float, xyz))) for name, xyz in origins.items()}
        self._dt_ns = round(self.config.dt * 1e9)
        self.tick = 0
        self._carry = 0.0
        self._next_id = 1
        self._completions: list[Completion] = []
        self.wind = ZERO

    # ------------------------------------------------------------------ time

    @property
    def names(self) -> list[str]:
        """Vehicle names in the order given."""
        return list(self._vehicles)

    @property
    def time_s(self) -> float:
        """Simulated seconds since the model was made."""
        return self.tick * self.config.dt

    @property
    def time_ns(self) -> int:
        """Simulated nanoseconds since the model was made (AirSim's time stamps)."""
        return self.tick * self._dt_ns

    def advance(self, seconds: float) -> int:
        """Integrate `seconds` of simulated time in whole steps (a remainder is kept for the next call)."""
        if not seconds >= 0.0:
            raise ValueError(f"cannot advance by {seconds} s")
        self._carry += seconds
        # The epsilon keeps 0.3 s from being 29.999... steps.
        steps = int(math.floor(self._carry / self.config.dt + 1e-6))
        self._carry = max(0.0, self._carry - steps * self.config.dt)
        for _ in range(steps):
            self.step()
        return steps

    def discard_remainder(self) -> None:
        """Forget the time left over from `advance` calls (the next call starts on the step grid)."""
        self._carry = 0.0

    def step(self) -> None:
        """Advance one fixed step."""
        self.tick += 1
        for v in self._vehicles.values():
            if v.mode is not Mode.LANDED:
                self._integrate(v)
        self._collide()
        for v in self._vehicles.values():
            self._check_done(v)

    def take_completions(self) -> list[Completion]:
        """The commands that ended since the last call, in order."""
        out, self._completions = self._completions, []
        return out

    # ------------------------------------------------------------------ commands

    def takeoff(self, name: str, timeout: float = math.inf) -> int:
        """Climb to `takeoff_height` above the spawn point at the vehicle's x, y."""
        v = self._vehicles[name]
        target = Vec3(v.pos.x, v.pos.y, -self.config.takeoff_height)
        return self._start_move(v, target, self.config.takeoff_speed, timeout, Mode.TAKING_OFF)

    def move_to(self, name: str, target: tuple[float, float, float], speed: float, timeout: float = math.inf) -> int:
        """Fly the straight segment to `target` (local frame) at `speed`, then hold it."""
        v = self._vehicles[name]
        return self._start_move(v, Vec3(*map(float, target)), speed, timeout, Mode.MOVING)

    def move_z(self, name: str, z: float, speed: float, timeout: float = math.inf) -> int:
        """Climb or descend to local `z` at the current x, y."""
        v = self._vehicles[name]
        return self._start_move(v, Vec3(v.pos.x, v.pos.y, float(z)), speed, timeout, Mode.MOVING)

    def move_velocity(self, name: str, velocity: tuple[float, float, float], duration: float,
                      z: Optional[float] = None) -> int:
        """Fly at `velocity` for `duration` seconds, then hover; with `z`, hold that local height instead of vz."""
        v = self._vehicles[name]
        if not duration >= 0.0:
            raise ValueError(f"duration must be >= 0, got {duration}")
        command = self._begin(v, math.inf)
        v.mode = Mode.VELOCITY
        v.velocity = Vec3(*map(float, velocity)).clipped(self.config.max_speed)
        v.z_hold = None if z is None else float(z)
        v.until_tick = self.tick + self._ticks(duration)
        return command

    def land(self, name: str, timeout: float = math.inf) -> int:
        """Descend at `land_speed` to local z = 0 (or the ground, if higher), then stand landed."""
        v = self._vehicles[name]
        command = self._begin(v, timeout)
        if v.mode is Mode.LANDED:
            self._finish(v, True, "done")
        else:
            v.mode, v.hold = Mode.LANDING, v.pos
        return command

    def hover(self, name: str) -> None:
        """Hold the current position (a landed vehicle stays landed); ends the pending command as preempted."""
        v = self._vehicles[name]
        if v.command is not None:
            self._finish(v, False, "preempted")
        if v.mode is not Mode.LANDED:
            self._hover_here(v)

    def set_wind(self, wind: tuple[float, float, float]) -> None:
        """Set the wind (world NED, m/s) that pushes every flying vehicle."""
        self.wind = Vec3(*map(float, wind))

    def reset(self) -> None:
        """Every vehicle back on its spawn point, landed; no wind, no collisions; pending commands fail."""
        for v in list(self._vehicles.values()):
            if v.command is not None:
                self._finish(v, False, "reset")
            self._vehicles[v.name] = _Vehicle(v.name, v.origin)
        self.wind = ZERO

    # ------------------------------------------------------------------ queries

    def state(self, name: str) -> VehicleState:
        """A snapshot of vehicle `name`."""
        v = self._vehicles[name]
        return VehicleState(v.name, v.origin, v.pos, v.vel, v.acc, v.mode)

    def pending(self, name: str) -> Optional[int]:
        """The id of the vehicle's running command, if any."""
        return self._vehicles[name].command

    def collision(self, name: str) -> Optional[Collision]:
        """The vehicle's latest collision (kept until taken)."""
        return self._vehicles[name].collision

    def take_collision(self, name: str) -> Optional[Collision]:
        """The vehicle's latest collision, forgetting it (a second call says None until a new one)."""
        v = self._vehicles[name]
        out, v.collision = v.collision, None
        return out

    def collision_count(self, name: str) -> int:
        """Collisions of the vehicle since the last reset (one per step in contact)."""
        return self._vehicles[name].collisions

    # ------------------------------------------------------------------ internals

    def _ticks(self, seconds: float) -> int:
        return max(0, math.ceil(seconds / self.config.dt - 1e-6))

    def _begin(self, v: _Vehicle, timeout: float) -> int:
        """Preempt the running command and register a new one."""
        if v.command is not None:
            self._finish(v, False, "preempted")
        v.command, self._next_id = self._next_id, self._next_id + 1
        # AirSim's "no timeout" is 3e38: anything beyond a year of simulated time means none.
        v.deadline = self.tick + self._ticks(timeout) if math.isfinite(timeout) and timeout < 3.2e7 else None
        return v.command

    def _start_move(self, v: _Vehicle, target: Vec3, speed: float, timeout: float, mode: Mode) -> int:
        if not speed > 0.0:
            raise ValueError(f"speed must be > 0, got {speed}")
        command = self._begin(v, timeout)
        v.mode = mode
        v.start, v.target, v.travelled = v.pos, target, 0.0
        v.speed = min(float(speed), self.config.max_speed)
        # The carrot starts at the speed the vehicle already has along the segment (no jerk on a preempting move).
        segment = target - v.pos
        length = segment.norm()
        along = (segment.x * v.vel.x + segment.y * v.vel.y + segment.z * v.vel.z) / length if length > 0 else 0.0
        v.carrot_speed = max(0.0, min(v.speed, along))
        return command

    def _finish(self, v: _Vehicle, success: bool, reason: str) -> None:
        assert v.command is not None
        self._completions.append(Completion(v.name, v.command, success, reason))
        v.command, v.deadline = None, None

    def _hover_here(self, v: _Vehicle) -> None:
        v.mode, v.hold = Mode.HOVERING, v.pos

    def _correction(self, error: Vec3) -> Vec3:
        return (error * self.config.position_gain).clipped(self.config.correction_limit)

    def _commanded_velocity(self, v: _Vehicle) -> Vec3:
        """What the vehicle's controller asks for this step."""
        cfg = self.config
        if v.mode in (Mode.MOVING, Mode.TAKING_OFF):
            segment = v.target - v.start
            length = segment.norm()
            # A trapezoidal speed profile: the carrot speeds up and brakes at path_accel.
            # The feedforward leads by the velocity time constant, which cancels the vehicle's lag.
            braking = math.sqrt(2.0 * cfg.path_accel * max(0.0, length - v.travelled))
            previous = v.carrot_speed
            v.carrot_speed = min(v.speed, v.carrot_speed + cfg.path_accel * cfg.dt, braking)
            v.travelled = min(length, v.travelled + v.carrot_speed * cfg.dt)
            if v.travelled >= length:
                v.carrot_speed = 0.0
            direction = segment * (1.0 / length) if length > 0 else ZERO
            carrot = v.start + direction * v.travelled
            lead = v.carrot_speed + cfg.velocity_tau * (v.carrot_speed - previous) / cfg.dt
            return direction * lead + self._correction(carrot - v.pos)
        if v.mode is Mode.VELOCITY:
            if v.z_hold is None:
                return v.velocity
            vz = max(-cfg.max_vertical_speed, min(cfg.max_vertical_speed, cfg.position_gain * (v.z_hold - v.pos.z)))
            return Vec3(v.velocity.x, v.velocity.y, vz)
        if v.mode is Mode.LANDING:
            horizontal = self._correction(Vec3(v.hold.x - v.pos.x, v.hold.y - v.pos.y, 0.0))
            return Vec3(horizontal.x, horizontal.y, cfg.land_speed)
        return self._correction(v.hold - v.pos)  # hovering

    def _integrate(self, v: _Vehicle) -> None:
        cfg = self.config
        wanted = self._commanded_velocity(v)
        disturbance = self.wind * cfg.wind_gain
        learnt = v.wind_estimate + (disturbance - v.wind_estimate) * (cfg.dt / cfg.wind_rejection_tau)
        v.wind_estimate = learnt.clipped(cfg.wind_rejection)
        target = wanted + disturbance - v.wind_estimate
        v.acc = ((target - v.vel) * (1.0 / cfg.velocity_tau)).clipped(cfg.max_accel)
        v.vel = v.vel + v.acc * cfg.dt
        v.pos = self._above_ground(v, v.pos + v.vel * cfg.dt)
        touchdown = min(0.0, self._ground(v))
        if v.mode is Mode.LANDING and v.pos.z >= touchdown:
            v.pos = Vec3(v.pos.x, v.pos.y, touchdown)
            v.vel = v.acc = v.wind_estimate = ZERO
            v.mode = Mode.LANDED

    def _ground(self, v: _Vehicle) -> float:
        """The ground's z in the vehicle's local frame."""
        return self.config.ground_z - v.origin.z

    def _above_ground(self, v: _Vehicle, pos: Vec3) -> Vec3:
        """`pos` stopped at the ground (a downward velocity is cancelled there)."""
        ground = self._ground(v)
        if pos.z <= ground:
            return pos
        v.vel = Vec3(v.vel.x, v.vel.y, min(v.vel.z, 0.0))
        return Vec3(pos.x, pos.y, ground)

    def _check_done(self, v: _Vehicle) -> None:
        """End the vehicle's command when it is done or out of time."""
        if v.command is None:
            return
        if v.mode is Mode.LANDED:
            self._finish(v, True, "done")
        elif v.mode in (Mode.MOVING, Mode.TAKING_OFF):
            arrived = (v.target - v.pos).norm() <= self.config.arrival_tolerance
            if arrived and v.travelled >= (v.target - v.start).norm():
                self._finish(v, True, "done")
                v.mode, v.hold = Mode.HOVERING, v.target
                return
        elif v.mode is Mode.VELOCITY and self.tick >= v.until_tick:
            self._finish(v, True, "done")
            self._hover_here(v)
            return
        if v.command is not None and v.deadline is not None and self.tick >= v.deadline:
            self._finish(v, False, "timeout")
            self._hover_here(v)

    def _collide(self) -> None:
        reach = self.config.radius * 2
        vehicles = list(self._vehicles.values())
        for i, a in enumerate(vehicles):
            for b in vehicles[i + 1:]:
                offset = (a.origin + a.pos) - (b.origin + b.pos)  # from b to a, world frame
                distance = offset.norm()
                if distance >= reach:
                    continue
                # Coincident vehicles have no direction between them: part them along north, a first.
                normal = offset * (1.0 / distance) if distance > 1e-9 else Vec3(1.0, 0.0, 0.0)
                depth = reach - distance
                # A landed vehicle stays put; a flying one takes its share of the separation (all of it
                # against a landed one).
                share_a = 0.0 if a.mode is Mode.LANDED else (0.5 if b.mode is not Mode.LANDED else 1.0)
                share_b = 0.0 if b.mode is Mode.LANDED else 1.0 - share_a
                a.pos = self._above_ground(a, a.pos + normal * (depth * share_a))
                b.pos = self._above_ground(b, b.pos - normal * (depth * share_b))
                a.vel = b.vel = a.acc = b.acc = ZERO
                for me, other, n in ((a, b, normal), (b, a, normal * -1.0)):
                    me.collisions += 1
                    me.collision = Collision(object_name=other.name, impact_point=me.pos - n * self.config.radius,
                                             normal=n, penetration_depth=depth, position=me.pos,
                                             time_stamp=self.time_ns)
