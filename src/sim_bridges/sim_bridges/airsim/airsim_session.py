"""One airsim_bridge configuration's session with AirSim (ROS-free): connecting at most every reconnect_period_s,
reading its vehicles, hovering the drones, stepping a paused simulator, and the link's losses."""

from __future__ import annotations

import enum
from typing import Optional

from brace_common.counters import Counters, Health

from ..warehouse.warehouse_config import AirSimBridgeConfig
from .airsim_link import AirSimLink, LinkDown, continue_for
from .drone_world import DroneWorld, read_settings

COUNTS = ("link_losses", "reconnects")
"""The counters the session counts into (its owner declares them; link_losses WARN)."""


class Connection(enum.Enum):
    """What one attempt to (re)connect came to."""

    NOT_DUE = "not due"                 # the last attempt was less than reconnect_period_s ago
    UNREACHABLE = "unreachable"         # the simulator did not answer (last_error says how)
    WRONG_VEHICLES = "wrong vehicles"   # its settings lack drones of the scenario (last_error names them)
    CONNECTED = "connected"             # up; `version` and `origins` are the simulator's


class AirSimSession:
    """The link to the simulator of `cfg` (an AirSimLink unless given), what it said of its vehicles, and why it
    is not up (`last_error`); reconnects and losses counted in `counts`."""

    def __init__(self, cfg: AirSimBridgeConfig, counts: Counters, link: Optional[AirSimLink] = None) -> None:
        self.cfg, self.counts = cfg, counts
        self.link = link if link is not None else AirSimLink(cfg.host, cfg.port, cfg.timeout_s)
        self.origins: dict = {}
        self.clock_speed = 1.0
        self.version = ""
        self.next_connect = 0.0
        self.last_error = ""

    @property
    def up(self) -> bool:
        """The link answers."""
        return self.link.up

    @property
    def where(self) -> str:
        """host:port of the simulator."""
        return f"{self.cfg.host}:{self.cfg.port}"

    def connect(self, now: float, world: Optional[DroneWorld]) -> Connection:
        """Try to (re)connect at steady time `now` (at most every reconnect_period_s): read the vehicles and the
        clock speed, pause a lockstep simulator; on a reconnect with `world` running, reclaim and hover its drones
        (each commands its current skill again when stepping resumes)."""
        if now < self.next_connect:
            return Connection.NOT_DUE
        self.next_connect = now + self.cfg.reconnect_period_s
        try:
            self.version = self.link.connect()
            client = self.link.client()
            self.origins, self.clock_speed = read_settings(client.getSettingsString())
            if self.cfg.lockstep:
                client.simPause(True)
        except (LinkDown, ValueError) as exc:
            self.last_error = f"AirSim at {self.where}: {exc}"
            return Connection.UNREACHABLE
        missing = [n for n in self.cfg.names() if n not in self.origins]
        if missing:
            self.last_error = f"the simulator's settings have no vehicles {missing} (it has {sorted(self.origins)})"
            self.link.up = False
            return Connection.WRONG_VEHICLES
        if world is not None:
            self.counts["reconnects"] += 1
            self.hover(world, reclaim=True)
            for drone in world.drones.values():
                drone.commanded = False
        self.last_error = ""
        return Connection.CONNECTED

    def lost(self, reason: str, now: float) -> None:
        """The link failed at steady time `now`: counted; the next attempt is reconnect_period_s later."""
        self.counts["link_losses"] += 1
        self.last_error = f"lost AirSim at {self.where}: {reason}"
        self.next_connect = now + self.cfg.reconnect_period_s

    def hover(self, world: Optional[DroneWorld], reclaim: bool = False) -> None:
        """Command every flying drone of `world` to hover (best effort: the link may be down); with `reclaim` take
        API control and arm every drone first (a simulator that restarted gave API control back)."""
        if world is None or not self.link.up:
            return
        client = self.link.client()
        try:
            for name, drone in world.drones.items():
                if reclaim:
                    client.enableApiControl(True, name)
                    client.armDisarm(True, name)
                if drone.landed_state != 0:
                    client.hoverAsync(vehicle_name=name)
            self.link.flush()
        except LinkDown as exc:
            self.last_error = f"could not command hover: {exc}"

    def advance(self, seconds: float) -> None:
        """Lockstep: run the paused simulator for `seconds` and wait until it has paused again (else nothing)."""
        if self.cfg.lockstep:
            continue_for(self.link.client(), seconds, self.cfg.timeout_s + seconds / self.clock_speed)

    def new_world(self, episode: int) -> DroneWorld:
        """Reset the simulator and take off every drone of episode `episode` (a lockstep simulator paused again); in
        real time a step is what the simulator ran between two ticks."""
        step_s = self.cfg.sim_step_s if self.cfg.lockstep else self.cfg.step_period_s * self.clock_speed
        world = DroneWorld(self.cfg.scenario(episode), self.link.client(), self.origins, step_s, self.advance,
                           self.link.vector)
        world.start()
        if self.cfg.lockstep:
            self.link.client().simPause(True)
        return world

    def health(self, active: bool) -> Health:
        """The simulator, whether the link is up and its RPC calls; ERROR while an active bridge is not connected."""
        up = self.link.up
        errors = () if up or not active else (self.last_error or "not connected to AirSim",)
        return Health({"simulator": self.where, "connected": up, "rpc_calls": self.link.calls}, errors=errors)

    def close(self, world: Optional[DroneWorld]) -> None:
        """Hover `world`'s drones, then close the link."""
        self.hover(world)
        self.link.close()
