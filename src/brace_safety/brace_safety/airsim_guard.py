"""The collision monitor in front of AirSim (ROS-free): a msgpack-rpc proxy between the bridge and the simulator.

The bridge speaks AirSim's RPC API to this proxy instead of to AirSim. Every call passes through unchanged except
the drones' motion commands (moveToPosition, moveToZ, takeoff, land), which the zones check before they are sent and
again every `control_period_s` of simulated time while they run: a command the stop zone holds is replaced by hover
and sent again once it is clear; a slowed moveToPosition is sent again at the scaled speed. Any other motion call
(hover, moveByVelocity, ...) ends the held command and passes. With the restore zone, a flying drone whose command
does not move it (held, or none) and that wind or braking brought into another's stop zone is flown back out with
moveByVelocity at `restore_speed_mps`, renewed at every check, and hovers (or is held) again once out. In lockstep
(the bridge advances a paused simulator with simContinueForTime) each continue runs in chunks of control_period_s
with a check between two, and simIsPaused answers false until the last chunk is done; besides, a check runs every
control_period_s of wall time / ClockSpeed.
Positions: a vehicle's API frame is local to its spawn point (settings.json X, Y, Z); the proxy adds the origin.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Optional

from brace_common.airsim_settings import read_settings
from brace_common.config import ConfigError, param
from brace_common.counters import Counters, Health
from brace_common.msgpack_rpc import Deferred, MsgpackRpcClient, MsgpackRpcServer, RpcError

from .monitor import CollisionMonitor, Guarded, MonitorConfig, Sensed
from .zones import Vec3

log = logging.getLogger(__name__)

VERTICAL_SPEED_MPS = 1.0
"""The speed the zones assume for takeoff, land and moveToZ (their RPCs carry none): SimpleFlight's default."""
ARRIVED_M = 0.5
"""A moveToPosition this near its target commands no more motion the zones could act on."""
MIN_RATIO = 0.05
"""A scaled command slower than this share of its speed is held with hover instead (no creeping into the zone)."""
RESEND_STEP = 0.1
"""A scaled moveToPosition is sent again when its ratio changed by more than this (not at every check)."""
INTERCEPTED = ("moveToPosition", "moveToZ", "takeoff", "land")
ENDS_COMMAND = ("hover", "cancelLastTask", "moveByVelocity", "moveByVelocityZ", "moveByVelocityBodyFrame",
                "moveOnPath", "goHome", "rotateToYaw", "rotateByYawRate", "moveByRollPitchYawZ",
                "moveByAngleRatesThrottle", "moveByRC")
"""Motion calls that pass unchecked and end the vehicle's held command (the bridge sends only hover of these)."""
COUNTS = ("upstream_connects", "upstream_lost", "upstream_errors", "commands_held", "commands_scaled",
          "commands_resumed", "restore_commands", "chunks")
FLYING = 1
"""AirSim's LandedState.Flying (getMultirotorState's landed_state): only a flying drone is restored."""
RESTORE_CHECKS = 2
"""A restore's moveByVelocity lasts this many control periods (renewed at each check; it ends by itself when the
proxy stops checking)."""


@dataclass
class AirSimMonitorConfig(MonitorConfig):
    """The zones (MonitorConfig; `agents` [] = every vehicle of the simulator's settings) and both connections."""

    agents: list[str] = param([], "vehicles whose motion commands pass the zones ([] = every vehicle of the "
                              "simulator's settings.json); every vehicle is an obstacle")
    host: str = param("127.0.0.1", "address the proxy serves AirSim's RPC API on (the bridge's host)")
    port: int = param(41452, "port the proxy serves on (the bridge's port)", 1, 65535)
    airsim_host: str = param("127.0.0.1", "AirSim's RPC address (brace-airsim-peer or a real AirSim)")
    airsim_port: int = param(41451, "AirSim's RPC port (settings.json ApiServerPort)", 1, 65535)
    control_period_s: float = param(0.1, "simulated seconds between two checks of the running commands", 0.01, 10.0)
    timeout_s: float = param(10.0, "longest wait for one reply of AirSim (s); longer is a lost connection",
                             0.1, 600.0)
    reconnect_period_s: float = param(0.5, "wait between two connection attempts to AirSim (s)", 0.05, 60.0)
    restore_speed_mps: float = param(3.0, "restore and yield zones: the speed a drone is flown out of a stop zone "
                                     "it was brought into, or out of the way of one with the right of way (m/s)",
                                     0.1, 20.0)

    RESTORES = True

    def validate(self) -> None:
        """The zones' rules; `agents` may be empty (every vehicle); two distinct endpoints."""
        agents, self.agents = self.agents, self.agents or ["any"]
        try:
            super().validate()
        finally:
            self.agents = agents
        if (self.host, self.port) == (self.airsim_host, self.airsim_port):
            raise ConfigError("port", f"{self.host}:{self.port} is AirSim's own address (airsim_host:airsim_port)")


@dataclass
class Command:
    """A drone's motion command as the bridge sent it, and what the proxy sent of it."""

    method: str
    params: list
    reply: Deferred                 # the bridge's answer: the command's end (AirSim's), or False when superseded
    target: Optional[Vec3] = None   # moveToPosition's target (world NED)
    speed: float = 0.0
    vertical: float = 0.0           # +1 down (land), -1 up (takeoff), moveToZ's sign
    sent_ratio: float = -1.0        # the ratio of the copy sent last (0: held with hover; -1: nothing sent yet)
    copy: int = 0                   # the copy whose end is the command's end (a copy the proxy replaced is ignored)

    def velocity(self, position: Vec3) -> Vec3:
        """The velocity it commands from `position` (world NED), as the zones read it."""
        if self.target is None:
            return (0.0, 0.0, self.vertical * VERTICAL_SPEED_MPS)
        delta = tuple(t - p for t, p in zip(self.target, position, strict=True))
        norm = math.hypot(*delta)
        return (0.0, 0.0, 0.0) if norm < ARRIVED_M else tuple(d / norm * self.speed for d in delta)

    def scaled(self, ratio: float) -> list:
        """The params of a copy at `ratio` of its speed (a vertical command: its own, unscaled)."""
        if self.method != "moveToPosition":
            return list(self.params)
        params = list(self.params)
        params[3] = max(self.speed * ratio, 1e-3)
        return params


@dataclass
class AirSimGuard:
    """The proxy: serves the bridge, forwards to AirSim, holds and scales the drones' motion through the zones."""

    config: AirSimMonitorConfig
    report: Callable[[str, Guarded], None] = lambda agent, guarded: None   # a state change (the node publishes it)
    counts: Counters = field(default_factory=lambda: Counters(COUNTS, warn=["upstream_lost", "upstream_errors"]))

    def __post_init__(self) -> None:
        self.upstream: Optional[MsgpackRpcClient] = None
        self.monitor: Optional[CollisionMonitor] = None
        self.origins: dict[str, Vec3] = {}
        self.clock_speed = 1.0
        self.commands: dict[str, Command] = {}
        self.restoring: set[str] = set()
        self.lock = threading.RLock()          # commands, upstream, monitor; one check at a time
        self.chunking = threading.Event()      # a simContinueForTime runs in chunks
        self.stopping = threading.Event()
        self.last_error = ""
        handlers = {m: (lambda *p, m=m: self.on_motion(m, list(p))) for m in INTERCEPTED}
        handlers.update(simContinueForTime=self.on_continue, simIsPaused=self.on_is_paused, reset=self.on_reset)
        self.server = MsgpackRpcServer(handlers, self.config.host, self.config.port, name="airsim_monitor",
                                       fallback=self.forward)
        self.thread: Optional[threading.Thread] = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Serve the bridge and keep a connection to AirSim (retried until it answers)."""
        self.stopping.clear()
        self.server.start()
        self.thread = threading.Thread(target=self._run, name="airsim_monitor", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """Hover every drone with a command, stop serving and close AirSim's connection."""
        self.stopping.set()
        with self.lock:
            for name in list(self.commands):
                self._end(name)
                self._send("hover", [name])
        self.server.stop()
        if self.thread is not None:
            self.thread.join(5.0)
        with self.lock:
            if self.upstream is not None:
                self.upstream.close()
            self.upstream = None

    @property
    def connected(self) -> bool:
        """Whether AirSim answers."""
        upstream = self.upstream
        return upstream is not None and not upstream.closed

    def _run(self) -> None:
        while not self.stopping.is_set():
            if not self.connected:
                self._connect()
            elif not self.chunking.is_set():
                self._check_safely()
            period = self.config.control_period_s / max(self.clock_speed, 1e-3) if self.connected \
                else self.config.reconnect_period_s
            self.stopping.wait(period)

    def _connect(self) -> None:
        cfg = self.config
        upstream = None
        try:
            upstream = MsgpackRpcClient(cfg.airsim_host, cfg.airsim_port, cfg.timeout_s, name="airsim")
            origins, clock_speed = read_settings(upstream.call_sync("getSettingsString", timeout_s=cfg.timeout_s))
        except (OSError, TimeoutError, RpcError, ValueError, AttributeError, TypeError) as exc:
            if upstream is not None:
                upstream.close()
            self.last_error = f"AirSim at {cfg.airsim_host}:{cfg.airsim_port}: {exc}"
            return
        missing = sorted(set(cfg.agents) - set(origins))
        if missing:
            upstream.close()
            self.last_error = f"AirSim's settings have no vehicles {missing} (it has {sorted(origins)})"
            return
        agents = cfg.agents or sorted(origins)
        with self.lock:
            self.upstream, self.origins, self.clock_speed = upstream, origins, clock_speed
            self.monitor = CollisionMonitor(MonitorConfig(**{**_zone_fields(cfg), "agents": agents}))
            self.commands.clear()
            self.restoring.clear()
        self.last_error = ""
        self.counts.add("upstream_connects")
        log.info("AirSim at %s:%d: %d vehicles", cfg.airsim_host, cfg.airsim_port, len(origins))

    def _lost(self, why: str) -> None:
        with self.lock:
            if self.upstream is not None:
                self.upstream.close()
                self.counts.add("upstream_lost")
            self.upstream = None
            for name in list(self.commands):
                self._end(name)
        self.last_error = f"AirSim connection lost: {why}"

    # ------------------------------------------------------------------ the bridge's calls

    def forward(self, method: str, params: list) -> Deferred:
        """Any call the proxy does not check: to AirSim as it came; a motion call ends the vehicle's command."""
        if method in ENDS_COMMAND:
            with self.lock:
                self._end(_vehicle(params))
        upstream = self.upstream
        if upstream is None or upstream.closed:
            raise RpcError(f"AirSim at {self.config.airsim_host}:{self.config.airsim_port} is not connected")
        return upstream.call(method, *params)

    def on_motion(self, method: str, params: list) -> Deferred:
        """A drone's motion command: checked now and while it runs; the reply is its end (or False superseded)."""
        name = _vehicle(params)
        with self.lock:
            if self.monitor is None or name not in self.monitor.config.agents:
                return self.forward(method, params)
            self._end(name)
            command = Command(method, params, Deferred(), vertical={"land": 1.0, "takeoff": -1.0}.get(method, 0.0))
            if method == "moveToPosition":
                origin = self.origins.get(name, (0.0, 0.0, 0.0))
                command.target = tuple(float(params[i]) + origin[i] for i in range(3))
                command.speed = float(params[3])
            elif method == "moveToZ":
                command.vertical = math.copysign(1.0, float(params[0]) - self._local_z(name))
            self.commands[name] = command
        self._check_safely()
        return command.reply

    def on_continue(self, seconds: Any) -> None:
        """Lockstep: run the paused simulator for `seconds` in chunks of control_period_s, checking between two;
        answered at once, as AirSim does (simIsPaused says when it is done)."""
        if not isinstance(seconds, (int, float)) or not 0.0 <= seconds <= 3600.0:
            raise RpcError(f"simContinueForTime: seconds must be in [0, 3600], got {seconds!r}")
        if self.chunking.is_set():
            raise RpcError("simContinueForTime: the previous continue is still running")
        if not self.connected:
            raise RpcError(f"AirSim at {self.config.airsim_host}:{self.config.airsim_port} is not connected")
        self.chunking.set()
        threading.Thread(target=self._chunks, args=(float(seconds),), name="airsim_monitor_chunks",
                         daemon=True).start()

    def on_is_paused(self) -> Any:
        """False while a chunked continue runs; AirSim's answer otherwise."""
        return False if self.chunking.is_set() else self.forward("simIsPaused", [])

    def on_reset(self) -> Deferred:
        """AirSim's reset: every command ends (a new episode's drones start afresh)."""
        with self.lock:
            for name in list(self.commands):
                self._end(name)
            self.restoring.clear()
        return self.forward("reset", [])

    def _chunks(self, seconds: float) -> None:
        try:
            remaining = seconds
            while remaining > 1e-9 and not self.stopping.is_set():
                dt = min(self.config.control_period_s, remaining)
                self._sync("simContinueForTime", dt)
                deadline = time.monotonic() + self.config.timeout_s + dt / max(self.clock_speed, 1e-3)
                while not self._sync("simIsPaused"):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"simContinueForTime({dt:g}) did not pause again")
                    time.sleep(0.001)
                self.counts.add("chunks")
                remaining -= dt
                self._check()
        except (OSError, TimeoutError, RpcError) as exc:
            self._lost(f"{type(exc).__name__}: {exc}")
        finally:
            self.chunking.clear()

    # ------------------------------------------------------------------ the zones

    def _check_safely(self) -> None:
        try:
            self._check()
        except (OSError, TimeoutError, RpcError) as exc:
            self._lost(f"{type(exc).__name__}: {exc}")

    def _check(self) -> None:
        """Read every vehicle's state; each command through the zones; hold, scale or resume it. The replies are
        awaited without the lock: the connection's reader thread takes it to end a command."""
        upstream, names = self.upstream, sorted(self.origins)
        if self.monitor is None or upstream is None or upstream.closed:
            return
        pending = {n: upstream.call("getMultirotorState", n) for n in names}
        states = {n: d.result(self.config.timeout_s, f"getMultirotorState({n})") for n, d in pending.items()}
        now = time.monotonic()
        with self.lock:
            monitor = self.monitor
            if monitor is None:
                return
            for name, state in states.items():
                kinematics, origin = state["kinematics_estimated"], self.origins[name]
                position = tuple(o + float(kinematics["position"][k]) for o, k in zip(origin, AXES, strict=True))
                velocity = tuple(float(kinematics["linear_velocity"][k]) for k in AXES)
                monitor.sense(name, Sensed(position, 0.0, velocity, now), guarded=name in monitor.config.agents)
            for name in monitor.config.agents:   # in the right of way's order: who has it is checked first
                command = self.commands.get(name)
                if command is None:
                    monitor.idle(name)
                if self._restore(name, command, states.get(name, {}).get("landed_state") == FLYING, now):
                    continue
                if command is not None:
                    self._apply(name, command, monitor.sensed[name].position if name in monitor.sensed else None,
                                now)

    def _restore(self, name: str, command: Optional[Command], flying: bool, now: float) -> bool:
        """The restore and yield zones for a drone its command does not move: flown out of a stop zone or out of the
        way of a drone with the right of way (True: its command stays held), or, that just over, hovering again."""
        held = command is None or command.sent_ratio == 0.0
        guarded = self.monitor.restore(name, self.config.restore_speed_mps, now) if held and flying else None
        if guarded is not None and (guarded.changed or guarded.began):
            self.report(name, guarded)
        if guarded is not None and guarded.motion is not None:
            vx, vy, vz = guarded.motion.linear
            self.restoring.add(name)
            self.counts.add("restore_commands")
            self._send("moveByVelocity", [vx, vy, vz, RESTORE_CHECKS * self.config.control_period_s,
                                          DRIVETRAIN_FORWARD_ONLY, {"is_rate": True, "yaw_or_rate": 0.0}, name])
            return True
        if name in self.restoring:
            self.restoring.discard(name)
            if held:
                self._send("hover", [name])
        return False

    def _apply(self, name: str, command: Command, position: Optional[Vec3], now: float) -> None:
        monitor = self.monitor
        linear = command.velocity(position) if position is not None else (0.0, 0.0, 1.0)
        guarded = monitor.guard(name, linear, 0.0, now)
        if guarded.changed or guarded.began:
            self.report(name, guarded)
        ratio = guarded.verdict.speed_ratio if guarded.motion is not None else 0.0
        if command.target is None and 0.0 < ratio:
            ratio = 1.0 if ratio >= MIN_RATIO else 0.0   # a vertical command has no speed to scale: held or let go
        if ratio < MIN_RATIO:
            if command.sent_ratio != 0.0:
                command.copy += 1   # the copy hover preempts ends as superseded, not as the command's end
                command.sent_ratio = 0.0
                self.counts.add("commands_held")
                self._send("hover", [name])
            return
        if command.sent_ratio < 0.0 or (ratio == 1.0 and command.sent_ratio < 1.0) or \
                abs(ratio - command.sent_ratio) > RESEND_STEP:
            if ratio < 1.0:
                self.counts.add("commands_scaled")
            elif command.sent_ratio >= 0.0:
                self.counts.add("commands_resumed")
            command.copy += 1
            copy, command.sent_ratio = command.copy, ratio
            deferred = self.upstream.call(command.method, *command.scaled(ratio))
            deferred.attach(lambda error, result: self._copy_ended(name, command, copy, error, result))

    def _copy_ended(self, name: str, command: Command, copy: int, error: Any, result: Any) -> None:
        with self.lock:
            if self.commands.get(name) is not command or copy != command.copy:
                return
            del self.commands[name]
        if error is not None:
            self.counts.add("upstream_errors")
            command.reply.fail(error)
        else:
            command.reply.resolve(result)

    def _end(self, name: str) -> None:
        command = self.commands.pop(name, None)
        if command is not None:
            command.copy += 1
            command.reply.resolve(False)

    def _send(self, method: str, params: list) -> None:
        upstream = self.upstream
        if upstream is not None and not upstream.closed:
            upstream.call(method, *params)

    def _sync(self, method: str, *params: Any) -> Any:
        upstream = self.upstream
        if upstream is None or upstream.closed:
            raise RpcError("AirSim is not connected")
        return upstream.call_sync(method, *params, timeout_s=self.config.timeout_s)

    def _local_z(self, name: str) -> float:
        sensed = self.monitor.sensed.get(name) if self.monitor is not None else None
        return sensed.position[2] - self.origins.get(name, (0.0, 0.0, 0.0))[2] if sensed else 0.0

    def health(self) -> Health:
        """Connections, commands held / scaled / resumed, the server's counts and the monitor's."""
        values = {"airsim": "connected" if self.connected else f"not connected ({self.last_error or 'connecting'})",
                  "serving": f"{self.config.host}:{self.config.port}", "bridge_connections": self.server.connections,
                  "commands_running": len(self.commands)}
        errors = () if self.connected else (f"AirSim not connected: {self.last_error or 'connecting'}",)
        return Health(values, errors=errors) + self.counts.health() + \
            (self.monitor.health() if self.monitor is not None else Health())


AXES = ("x_val", "y_val", "z_val")
DRIVETRAIN_FORWARD_ONLY = 1
"""AirSim's DrivetrainType.ForwardOnly; with a zero yaw rate the drone keeps its heading while restored."""


def _vehicle(params: list) -> str:
    """The vehicle_name argument (AirSim's last; '' = the default vehicle)."""
    return params[-1] if params and isinstance(params[-1], str) else ""


def _zone_fields(cfg: AirSimMonitorConfig) -> dict:
    return {f.name: getattr(cfg, f.name) for f in fields(MonitorConfig)}
