"""A protocol-level AirSim peer: the unmodified AirSim Python client talks to it as to Unreal.

`AirSimPeer` serves the multirotor part of AirSim's RPC API (msgpack-rpc over TCP)
on top of `MultirotorModel`, for the vehicles of an AirSim settings.json. Simulated
time runs at real time x ClockSpeed unless paused; `simContinueForTime` advances it
deterministically. Motion commands reply when the motion ends, as AirSim's do: True
when it completed, False when a newer command preempted it, its timeout passed or
the world was reset. Positions are in each vehicle's local NED frame (origin at its
spawn point), the wind in the world NED frame.

CLI: `brace-airsim-peer (--settings FILE | --agents K) [--host 127.0.0.1] [--port 41451]`;
`brace-airsim-peer --agents K --write-settings FILE` writes the K-drone intersection's settings.json (for a real
AirSim) and exits.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from brace_common.counters import Counters
from brace_common.msgpack_rpc import Deferred, MsgpackRpcServer, RpcError
from sim_bridges.airsim.intersection import IntersectionConfig, settings
from sim_bridges.airsim.multirotor_model import Collision, Mode, MultirotorConfig, MultirotorModel, Vec3, VehicleState

DEFAULT_PORT = 41451
"""AirSim's RPC port."""

SERVER_VERSION = 4
"""What getServerVersion answers: the client's getMinRequiredServerVersion."""

MIN_CLIENT_VERSION = 4
"""What getMinRequiredClientVersion answers: the client's getClientVersion."""

DEFAULT_ORIGIN_GEOPOINT = (47.641468, -122.140165, 122.0)
"""AirSim's default OriginGeopoint (latitude, longitude in degrees; altitude in m)."""

MULTIROTOR_TYPES = ("simpleflight",)
"""VehicleType values (lower case) this peer simulates."""

_EARTH_RADIUS = 6378137.0


@dataclass(frozen=True)
class PeerSettings:
    """What the peer takes from AirSim's settings.json."""

    clock_speed: float
    vehicles: dict[str, tuple[float, float, float]]   # name -> spawn point (world NED X, Y, Z)
    origin_geopoint: tuple[float, float, float]
    text: str                                         # the settings as getSettingsString returns them


def _setting_number(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"settings {where}: expected a finite number, got {value!r}")
    return float(value)


def parse_settings(settings: Any) -> PeerSettings:
    """Validate an AirSim settings dict for a multirotor peer; ValueError names what is wrong."""
    if not isinstance(settings, dict):
        raise ValueError(f"settings: expected a JSON object, got {type(settings).__name__}")
    mode = settings.get("SimMode", "Multirotor")
    if mode != "Multirotor":
        raise ValueError(f"settings SimMode: this peer simulates 'Multirotor', not {mode!r}")
    clock_speed = _setting_number("ClockSpeed", settings.get("ClockSpeed", 1.0))
    if clock_speed <= 0:
        raise ValueError(f"settings ClockSpeed: must be > 0, got {clock_speed}")
    vehicles_in = settings.get("Vehicles", {"SimpleFlight": {"VehicleType": "SimpleFlight"}})
    if not isinstance(vehicles_in, dict) or not vehicles_in:
        raise ValueError("settings Vehicles: expected a non-empty object of vehicle name -> vehicle settings")
    vehicles: dict[str, tuple[float, float, float]] = {}
    for name, vehicle in vehicles_in.items():
        if not name:
            raise ValueError("settings Vehicles: a vehicle name is empty")
        if not isinstance(vehicle, dict):
            raise ValueError(f"settings Vehicles.{name}: expected an object, got {type(vehicle).__name__}")
        kind = vehicle.get("VehicleType")
        if not isinstance(kind, str) or kind.lower() not in MULTIROTOR_TYPES:
            raise ValueError(f"settings Vehicles.{name}.VehicleType: expected 'SimpleFlight', got {kind!r}")
        vehicles[name] = tuple(_setting_number(f"Vehicles.{name}.{axis}", vehicle.get(axis, 0.0))
                               for axis in ("X", "Y", "Z"))
    geo = settings.get("OriginGeopoint", {})
    if not isinstance(geo, dict):
        raise ValueError("settings OriginGeopoint: expected an object with Latitude, Longitude, Altitude")
    origin_geopoint = tuple(_setting_number(f"OriginGeopoint.{key}", geo.get(key, default))
                            for key, default in zip(("Latitude", "Longitude", "Altitude"), DEFAULT_ORIGIN_GEOPOINT,
                                                    strict=True))
    return PeerSettings(clock_speed, vehicles, origin_geopoint, json.dumps(settings, indent=2))


def load_settings(path: str | Path) -> dict:
    """Read and validate an AirSim settings.json; ValueError names the file and what is wrong."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"settings file {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        settings = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"settings file {path}: not JSON ({exc})") from None
    try:
        parse_settings(settings)
    except ValueError as exc:
        raise ValueError(f"settings file {path}: {exc}") from None
    return settings


# ---------------------------------------------------------------------- AirSim structs (client's msgpack maps)

def vector3r(v: Vec3) -> dict:
    """AirSim's Vector3r."""
    return {"x_val": v.x, "y_val": v.y, "z_val": v.z}


def quaternionr_identity() -> dict:
    """AirSim's Quaternionr of no rotation (the point-mass model does not turn)."""
    return {"w_val": 1.0, "x_val": 0.0, "y_val": 0.0, "z_val": 0.0}


def geo_point(home: tuple[float, float, float], ned: Vec3) -> dict:
    """AirSim's GeoPoint of a world NED offset from `home` (flat-earth approximation)."""
    lat, lon, alt = home
    return {"latitude": lat + math.degrees(ned.x / _EARTH_RADIUS),
            "longitude": lon + math.degrees(ned.y / (_EARTH_RADIUS * math.cos(math.radians(lat)))),
            "altitude": alt - ned.z}


def kinematics_state(state: VehicleState) -> dict:
    """AirSim's KinematicsState (position in the vehicle's local frame)."""
    return {"position": vector3r(state.position), "orientation": quaternionr_identity(),
            "linear_velocity": vector3r(state.velocity), "angular_velocity": vector3r(Vec3()),
            "linear_acceleration": vector3r(state.acceleration), "angular_acceleration": vector3r(Vec3())}


def collision_info(collision: Optional[Collision]) -> dict:
    """AirSim's CollisionInfo (has_collided False and zeros when there is none)."""
    if collision is None:
        return {"has_collided": False, "penetration_depth": 0.0, "time_stamp": 0, "normal": vector3r(Vec3()),
                "impact_point": vector3r(Vec3()), "position": vector3r(Vec3()), "object_name": "", "object_id": -1}
    return {"has_collided": True, "penetration_depth": collision.penetration_depth,
            "time_stamp": collision.time_stamp, "normal": vector3r(collision.normal),
            "impact_point": vector3r(collision.impact_point), "position": vector3r(collision.position),
            "object_name": collision.object_name, "object_id": -1}


def rc_data(timestamp: int) -> dict:
    """AirSim's RCData of no remote control."""
    return {"timestamp": timestamp, "pitch": 0.0, "roll": 0.0, "throttle": 0.0, "yaw": 0.0,
            **{f"switch{i}": 0 for i in range(1, 9)}, "is_initialized": False, "is_valid": False}


# ---------------------------------------------------------------------- argument checks

def _number(what: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise RpcError(f"{what} must be a number, got {value!r}")
    return float(value)


def _flag(what: str, value: Any) -> bool:
    if not isinstance(value, (bool, int)):
        raise RpcError(f"{what} must be a boolean, got {value!r}")
    return bool(value)


def _vector(what: str, value: Any) -> tuple[float, float, float]:
    if not isinstance(value, dict) or not {"x_val", "y_val", "z_val"} <= value.keys():
        raise RpcError(f"{what} must be a Vector3r (x_val, y_val, z_val), got {value!r}")
    return tuple(_number(f"{what}.{k}", value[k]) for k in ("x_val", "y_val", "z_val"))


class AirSimPeer:
    """An AirSim RPC server for the SimpleFlight multirotors of `settings` (AirSim's settings.json as a dict)."""

    def __init__(self, settings: dict, host: str = "127.0.0.1", port: int = 0,
                 config: Optional[MultirotorConfig] = None, tick_hz: float = 100.0) -> None:
        self.settings = parse_settings(settings)
        if not tick_hz > 0:
            raise ValueError(f"tick_hz must be > 0, got {tick_hz}")
        self.model = MultirotorModel(self.settings.vehicles, config)
        self._origin = {name: Vec3(*xyz) for name, xyz in self.settings.vehicles.items()}
        self._period = 1.0 / tick_hz
        self._lock = threading.RLock()
        self._paused = False
        self._api_control = dict.fromkeys(self.model.names, False)
        self._armed = dict.fromkeys(self.model.names, False)
        self._pending: dict[int, Deferred] = {}
        handlers = {name[len("_rpc_"):]: getattr(self, name) for name in dir(self) if name.startswith("_rpc_")}
        self._server = MsgpackRpcServer(handlers, host=host, port=port, name="airsim-peer")
        self._stop = threading.Event()
        self._clock: Optional[threading.Thread] = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> AirSimPeer:
        """Bind the port and start the simulation clock."""
        self._server.start()
        self._stop.clear()
        self._clock = threading.Thread(target=self._run_clock, name="airsim-peer-clock", daemon=True)
        self._clock.start()
        return self

    def stop(self) -> None:
        """Close every connection and stop the clock."""
        self._server.stop()
        self._stop.set()
        if self._clock is not None:
            self._clock.join(2.0)
            self._clock = None

    def __enter__(self) -> AirSimPeer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def host(self) -> str:
        """The address the peer binds."""
        return self._server.host

    @property
    def port(self) -> int:
        """The bound port (after start)."""
        return self._server.port

    @property
    def methods(self) -> list[str]:
        """The RPC methods served."""
        return sorted(name[len("_rpc_"):] for name in dir(self) if name.startswith("_rpc_"))

    @property
    def counts(self) -> Counters:
        """Calls per RPC method, plus 'errors' (error replies), 'malformed' (bad frames) and 'connections' (declared
        counters: a misspelt method name is a KeyError)."""
        return self._server.counts

    @property
    def received(self) -> list[tuple[str, list]]:
        """The (method, params) received, oldest first (the latest 10000)."""
        return self._server.received

    @property
    def paused(self) -> bool:
        """Whether simulated time is frozen."""
        with self._lock:
            return self._paused

    @property
    def sim_time(self) -> float:
        """Simulated seconds since the peer was made."""
        with self._lock:
            return self.model.time_s

    # ------------------------------------------------------------------ time

    def _run_clock(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(self._period):
            now = time.monotonic()
            # A stalled machine slows simulated time down rather than making it jump.
            elapsed, last = min(now - last, 0.25), now
            with self._lock:
                if self._paused:
                    continue
                self.model.advance(elapsed * self.settings.clock_speed)
                ready = self._collect()
            self._reply(ready)

    def _collect(self) -> list[tuple[Deferred, bool]]:
        """The replies of the commands that ended (call with the lock held)."""
        ready = []
        for completion in self.model.take_completions():
            deferred = self._pending.pop(completion.command, None)
            if deferred is not None:
                ready.append((deferred, completion.success))
        return ready

    @staticmethod
    def _reply(ready: list[tuple[Deferred, bool]]) -> None:
        # Outside the lock: a reply is a socket write.
        for deferred, success in ready:
            deferred.resolve(success)

    # ------------------------------------------------------------------ checks

    def _vehicle(self, vehicle_name: Any) -> str:
        """The vehicle a call names ('' is the first in settings)."""
        if not isinstance(vehicle_name, str):
            raise RpcError(f"vehicle_name must be a string, got {vehicle_name!r}")
        name = vehicle_name or self.model.names[0]
        if name not in self._api_control:
            raise RpcError(f"unknown vehicle '{name}' (vehicles: {', '.join(self.model.names)})")
        return name

    def _controlled(self, vehicle_name: Any, what: str) -> str:
        """The vehicle, which must be under API control and armed to move."""
        name = self._vehicle(vehicle_name)
        if not self._api_control[name]:
            raise RpcError(f"{what}: vehicle '{name}' is not under API control; call enableApiControl(True) first")
        if not self._armed[name]:
            raise RpcError(f"{what}: vehicle '{name}' is not armed; call armDisarm(True) first")
        return name

    def _motion(self, vehicle_name: Any, what: str, start: Callable[[str], int]) -> Deferred:
        """Start a command on a vehicle under API control and armed; reply when it ends."""
        deferred = Deferred()
        with self._lock:
            name = self._controlled(vehicle_name, what)
            self._pending[start(name)] = deferred
            ready = self._collect()
        self._reply(ready)
        return deferred

    # ------------------------------------------------------------------ RPC: connection and world

    def _rpc_ping(self) -> bool:
        return True

    def _rpc_getServerVersion(self) -> int:
        return SERVER_VERSION

    def _rpc_getMinRequiredClientVersion(self) -> int:
        return MIN_CLIENT_VERSION

    def _rpc_listVehicles(self) -> list[str]:
        return self.model.names

    def _rpc_getSettingsString(self) -> str:
        return self.settings.text

    def _rpc_reset(self) -> None:
        with self._lock:
            self.model.reset()
            for name in self.model.names:
                self._api_control[name] = self._armed[name] = False
            ready = self._collect()
        self._reply(ready)

    def _rpc_simPause(self, is_paused: Any) -> None:
        paused = _flag("is_paused", is_paused)
        with self._lock:
            if paused and not self._paused:
                self.model.discard_remainder()
            self._paused = paused

    def _rpc_simIsPaused(self) -> bool:
        return self.paused

    def _rpc_simContinueForTime(self, seconds: Any) -> None:
        seconds = _number("seconds", seconds)
        if not 0.0 <= seconds <= 3600.0:
            raise RpcError(f"simContinueForTime: seconds must be in [0, 3600], got {seconds}")
        with self._lock:
            if not self._paused:
                self.model.discard_remainder()
            self._paused = True
            self.model.advance(seconds)
            ready = self._collect()
        self._reply(ready)

    def _rpc_simSetWind(self, wind: Any) -> None:
        vector = _vector("wind", wind)
        with self._lock:
            self.model.set_wind(vector)

    # ------------------------------------------------------------------ RPC: vehicle control

    def _rpc_enableApiControl(self, is_enabled: Any, vehicle_name: Any = "") -> None:
        enabled = _flag("is_enabled", is_enabled)
        with self._lock:
            self._api_control[self._vehicle(vehicle_name)] = enabled

    def _rpc_isApiControlEnabled(self, vehicle_name: Any = "") -> bool:
        with self._lock:
            return self._api_control[self._vehicle(vehicle_name)]

    def _rpc_armDisarm(self, arm: Any, vehicle_name: Any = "") -> bool:
        arm = _flag("arm", arm)
        with self._lock:
            name = self._vehicle(vehicle_name)
            if not self._api_control[name]:
                raise RpcError(f"armDisarm: vehicle '{name}' is not under API control; "
                               "call enableApiControl(True) first")
            if not arm and not self.model.state(name).landed:
                return False  # SimpleFlight refuses to disarm in the air
            self._armed[name] = arm
            return True

    def _rpc_takeoff(self, timeout_sec: Any, vehicle_name: Any = "") -> Deferred:
        timeout = _number("timeout_sec", timeout_sec)
        return self._motion(vehicle_name, "takeoff", lambda name: self.model.takeoff(name, timeout))

    def _rpc_land(self, timeout_sec: Any, vehicle_name: Any = "") -> Deferred:
        timeout = _number("timeout_sec", timeout_sec)
        return self._motion(vehicle_name, "land", lambda name: self.model.land(name, timeout))

    def _rpc_hover(self, vehicle_name: Any = "") -> bool:
        with self._lock:
            self.model.hover(self._controlled(vehicle_name, "hover"))
            ready = self._collect()
        self._reply(ready)
        return True

    def _rpc_cancelLastTask(self, vehicle_name: Any = "") -> None:
        with self._lock:
            self.model.hover(self._vehicle(vehicle_name))
            ready = self._collect()
        self._reply(ready)

    def _rpc_moveToPosition(self, x: Any, y: Any, z: Any, velocity: Any, timeout_sec: Any, drivetrain: Any,
                            yaw_mode: Any, lookahead: Any, adaptive_lookahead: Any, vehicle_name: Any = "") -> Deferred:
        target = (_number("x", x), _number("y", y), _number("z", z))
        speed, timeout = self._speed(velocity), _number("timeout_sec", timeout_sec)
        return self._motion(vehicle_name, "moveToPosition",
                            lambda name: self.model.move_to(name, target, speed, timeout))

    def _rpc_moveToZ(self, z: Any, velocity: Any, timeout_sec: Any, yaw_mode: Any, lookahead: Any,
                     adaptive_lookahead: Any, vehicle_name: Any = "") -> Deferred:
        height, speed, timeout = _number("z", z), self._speed(velocity), _number("timeout_sec", timeout_sec)
        return self._motion(vehicle_name, "moveToZ", lambda name: self.model.move_z(name, height, speed, timeout))

    def _rpc_moveByVelocity(self, vx: Any, vy: Any, vz: Any, duration: Any, drivetrain: Any, yaw_mode: Any,
                            vehicle_name: Any = "") -> Deferred:
        velocity = (_number("vx", vx), _number("vy", vy), _number("vz", vz))
        seconds = self._duration(duration)
        return self._motion(vehicle_name, "moveByVelocity",
                            lambda name: self.model.move_velocity(name, velocity, seconds))

    def _rpc_moveByVelocityZ(self, vx: Any, vy: Any, z: Any, duration: Any, drivetrain: Any, yaw_mode: Any,
                             vehicle_name: Any = "") -> Deferred:
        velocity = (_number("vx", vx), _number("vy", vy), 0.0)
        height, seconds = _number("z", z), self._duration(duration)
        return self._motion(vehicle_name, "moveByVelocityZ",
                            lambda name: self.model.move_velocity(name, velocity, seconds, z=height))

    @staticmethod
    def _speed(velocity: Any) -> float:
        speed = _number("velocity", velocity)
        if not speed > 0:
            raise RpcError(f"velocity must be > 0, got {speed}")
        return speed

    @staticmethod
    def _duration(duration: Any) -> float:
        seconds = _number("duration", duration)
        if not 0 <= seconds < math.inf:
            raise RpcError(f"duration must be a finite number >= 0, got {seconds}")
        return seconds

    # ------------------------------------------------------------------ RPC: state

    def _rpc_getMultirotorState(self, vehicle_name: Any = "") -> dict:
        with self._lock:
            name = self._vehicle(vehicle_name)
            state, collision, now = self.model.state(name), self.model.collision(name), self.model.time_ns
        return {"collision": collision_info(collision), "kinematics_estimated": kinematics_state(state),
                "gps_location": geo_point(self.settings.origin_geopoint, state.world_position), "timestamp": now,
                "landed_state": 0 if state.mode is Mode.LANDED else 1, "rc_data": rc_data(now), "ready": True,
                "ready_message": "", "can_arm": True}

    def _rpc_simGetVehiclePose(self, vehicle_name: Any = "") -> dict:
        with self._lock:
            state = self.model.state(self._vehicle(vehicle_name))
        return {"position": vector3r(state.position), "orientation": quaternionr_identity()}

    def _rpc_simGetGroundTruthKinematics(self, vehicle_name: Any = "") -> dict:
        with self._lock:
            return kinematics_state(self.model.state(self._vehicle(vehicle_name)))

    def _rpc_simGetCollisionInfo(self, vehicle_name: Any = "") -> dict:
        with self._lock:
            return collision_info(self.model.take_collision(self._vehicle(vehicle_name)))

    def _rpc_getHomeGeoPoint(self, vehicle_name: Any = "") -> dict:
        name = self._vehicle(vehicle_name)
        return geo_point(self.settings.origin_geopoint, self._origin[name])


# ---------------------------------------------------------------------- CLI

def main(argv: Optional[list[str]] = None) -> int:
    """Serve an AirSim peer for a settings.json until SIGINT / SIGTERM; 2 on bad settings, 1 when it cannot bind."""
    parser = argparse.ArgumentParser(prog="brace-airsim-peer",
                                     description="Serve AirSim's multirotor RPC API without Unreal.")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--settings", help="AirSim settings.json (SimMode Multirotor)")
    source.add_argument("--agents", type=int, help="the K-drone intersection's vehicles (sim_bridges.airsim.intersection)")
    parser.add_argument("--write-settings", metavar="FILE",
                        help="with --agents: write the intersection's settings.json to FILE (for a real AirSim) and exit")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 = a free one)")
    args = parser.parse_args(argv)
    try:
        if args.agents is not None:

            scenario = IntersectionConfig(num_agents=args.agents)
            scenario.validate()
            sim_settings = settings(scenario)
            if args.write_settings:
                Path(args.write_settings).write_text(json.dumps(sim_settings, indent=2) + "\n")
                return 0
        elif args.write_settings:
            parser.error("--write-settings needs --agents")
        else:
            sim_settings = load_settings(args.settings)
        peer = AirSimPeer(sim_settings, host=args.host, port=args.port)
    except ValueError as exc:
        print(f"brace-airsim-peer: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        peer.start()
    except OSError as exc:
        print(f"brace-airsim-peer: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    try:
        print(f"airsim peer on {peer.host}:{peer.port}, vehicles: {', '.join(peer.model.names)}", flush=True)
        while not stop.wait(1.0):
            pass
    finally:
        peer.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
