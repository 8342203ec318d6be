"""airsim_bridge lifecycle node: K drones of the intersection scenario flown in AirSim through its RPC API (topics:
docs/nodes.md, "airsim_bridge"; connection, readiness and faults: docs/airsim.md)."""

from __future__ import annotations

import math
import sys
import time
from typing import Optional

from builtin_interfaces.msg import Time
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn

from brace_common.clock import spaced_timer, stamp_of, steady_timer
from brace_common.config import ConfigError
from brace_common.counters import Health
from brace_common.episode import EpisodeResult
from brace_common.holds import CallHolds
from brace_common.lifecycle import ReleasingLifecycleNode, serialized
from brace_common.params import declare_parameters, read_config, reject_undeclared
from brace_common.spin import spin_node
from brace_common.world_inputs import WorldInputs

from ..warehouse.warehouse_config import AirSimBridgeConfig
from . import drone_feed, intersection
from .airsim_link import AirSimLink, LinkDown, continue_for
from .drone_feed import ned_to_enu
from .drone_markers import drone_markers
from .drone_world import DroneWorld, read_settings, world_state


class AirSimBridgeNode(WorldInputs, ReleasingLifecycleNode):
    """Thin lifecycle shell around DroneWorld over an AirSimLink: parameters, episodes, holds, topics."""

    world_name = "airsim"

    def __init__(self, **kwargs) -> None:
        super().__init__("airsim_bridge", **kwargs)
        declare_parameters(self, AirSimBridgeConfig, enforce_ranges=False)
        self.config: Optional[AirSimBridgeConfig] = None
        self.link: Optional[AirSimLink] = None
        self.origins: dict = {}
        self.clock_speed = 1.0
        self.world: Optional[DroneWorld] = None
        self.init_stepped_world(None, 0, 60.0, ("link_losses", "reconnects"), warn=("link_losses",))
        self.last_error = ""
        self.next_connect = 0.0
        self.sim_time = self.get_parameter("use_sim_time").value
        self.timer = None
        steady_timer(self, 1.0, self.publish_diagnostics)

    # ------------------------------------------------------------------ lifecycle

    @serialized
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Validate the parameters and open the link (the simulator may come up later)."""
        try:
            self.config = read_config(self, AirSimBridgeConfig)
            reject_undeclared(self)
        except ConfigError as exc:
            self.last_error = str(exc)
            self.get_logger().error(f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        self.holds = CallHolds(self.config.hold_timeout_s)
        self.book.episodes, self.book.base_seed = self.config.episodes, self.config.seed
        self.wait_for_peers(self.config)
        self.link = AirSimLink(self.config.host, self.config.port, self.config.timeout_s)
        self.last_error = ""
        self.state_label = "inactive"
        return TransitionCallbackReturn.SUCCESS

    @serialized
    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Start stepping."""
        self.timer = spaced_timer(self, self.config.step_period_s, self.tick, lock=self.transition_lock)
        self.state_label = "active"
        self.get_logger().info(f"AirSim bridge for {self.config.num_agents} drones at {self.config.host}:"
                               f"{self.config.port} ({'lockstep' if self.config.lockstep else 'real time'})")
        return TransitionCallbackReturn.SUCCESS

    @serialized
    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop stepping; every drone hovers."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self._hover_all()
        self.state_label = "inactive"
        return TransitionCallbackReturn.SUCCESS

    def _release(self) -> None:
        """Stop stepping and close the link (drones are told to hover first)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.link is not None:
            self._hover_all()
            self.link.close()
            self.link = None
        self.release_peers()
        self.world = None

    # ------------------------------------------------------------------ inputs

    def has_agent(self, agent: str) -> bool:
        """The drone is in this episode."""
        return agent in self.world.drones

    def agent_xy(self, agent: str) -> tuple[float, float]:
        """The drone's position (ENU, as the markers)."""
        return ned_to_enu(self.world.drones[agent].position)[:2]

    def parse_plan(self, agent: str, raw: list[tuple[str, str]]) -> list:
        """The drone's steps, checked against the drone skill schema (it yields to other drones only)."""
        return drone_feed.plan_from_steps(raw, self.world.cfg, agent)

    def apply_plan(self, agent: str, steps: list) -> bool:
        """Set the drone's plan; True when its first step is the oracle's."""
        agrees = drone_feed.agrees_with_oracle(self.world, agent, steps)
        self.world.set_plan(agent, steps)
        self._publish_world_state()
        return agrees

    # ------------------------------------------------------------------ stepping

    def progress(self) -> str:
        """Where the run is ('episode e/N step t'): brace-run's progress line."""
        return f"{self.book.progress()} step {self.world.t if self.world is not None else 0:3d}"

    @serialized
    def tick(self) -> None:
        """Connect, wait for the peers, start an episode, step the world, or close the episode."""
        if self.done or self.timer is None:  # a tick dispatched before deactivate or cleanup took the lock
            return
        if not self.link.up and not self._connect():
            return
        if self.peers.waiting(self.counts, self.get_logger()):
            self.out.sim_clock(self.sim_steps * self.config.sim_step_s)
            return
        try:
            self.advance()
        except LinkDown as exc:
            self._lost(str(exc))

    def _connect(self) -> bool:
        """Try to (re)connect at most every reconnect_period_s; on success read the vehicles and hover them."""
        now = time.monotonic()
        if now < self.next_connect:
            return False
        self.next_connect = now + self.config.reconnect_period_s
        try:
            version = self.link.connect()
            client = self.link.client()
            self.origins, self.clock_speed = read_settings(client.getSettingsString())
            if self.config.lockstep:
                client.simPause(True)
        except (LinkDown, ValueError) as exc:
            self.last_error = f"AirSim at {self.config.host}:{self.config.port}: {exc}"
            self.get_logger().warning(self.last_error, throttle_duration_sec=10.0)
            return False
        missing = [n for n in self.config.names() if n not in self.origins]
        if missing:
            self.last_error = f"the simulator's settings have no vehicles {missing} (it has {sorted(self.origins)})"
            self.get_logger().error(self.last_error, throttle_duration_sec=10.0)
            self.link.up = False
            return False
        if self.world is not None:
            self.counts["reconnects"] += 1
            self._hover_all(reclaim=True)
            for d in self.world.drones.values():
                d.commanded = False  # the current skill is commanded again when stepping resumes
        self.last_error = ""
        self.get_logger().info(f"connected to AirSim {version} at {self.config.host}:{self.config.port}, "
                               f"vehicles {sorted(self.origins)}")
        return True

    def _lost(self, reason: str) -> None:
        self.counts["link_losses"] += 1
        self.last_error = f"lost AirSim at {self.config.host}:{self.config.port}: {reason}"
        self.get_logger().error(self.last_error)
        self.next_connect = time.monotonic() + self.config.reconnect_period_s

    def _hover_all(self, reclaim: bool = False) -> None:
        """Command every flying drone of the episode to hover (best effort: the link may be down); with `reclaim`
        take API control and arm every drone first."""
        if self.world is None or self.link is None or not self.link.up:
            return
        client = self.link.client()
        try:
            for name, d in self.world.drones.items():
                if reclaim:  # a simulator that restarted gave API control back
                    client.enableApiControl(True, name)
                    client.armDisarm(True, name)
                if d.landed_state != 0:
                    client.hoverAsync(vehicle_name=name)
            self.link.flush()
        except LinkDown as exc:
            self.last_error = f"could not command hover: {exc}"

    def _advance(self, seconds: float) -> None:
        """Lockstep: run the paused simulator for `seconds` and wait until it has paused again."""
        if not self.config.lockstep:
            return
        continue_for(self.link.client(), seconds, self.config.timeout_s + seconds / self.clock_speed)

    def start_episode(self) -> None:
        """Reset the simulator, take off every drone, announce the episode, publish its task and states."""
        episode = self.episode + 1
        # In real time a step is what the simulator ran between two ticks.
        step_s = self.config.sim_step_s if self.config.lockstep else self.config.step_period_s * self.clock_speed
        world = DroneWorld(self.config.scenario(episode), self.link.client(), self.origins, step_s, self._advance,
                           self.link.vector)
        world.start()
        if self.config.lockstep:
            self.link.client().simPause(True)
        self.world = world
        self.begin_episode()
        self.publish_entries(drone_feed.episode_entries(world, episode))
        self.publish_entries(drone_feed.step_entries(world, [], 0))
        self._publish_states()

    def step_entries(self, events: list) -> list:
        """The drones' entries of one step."""
        return drone_feed.step_entries(self.world, events, self.config.observe_every)

    def episode_summary(self, result: EpisodeResult) -> str:
        """The log line of an ended episode."""
        return (f"success={result.success} steps={result.steps} landed={result.delivered}/{result.tasks} "
                f"{dict(result.metrics)} plans={self.plans} held_ticks={self.counts['held_ticks']} "
                f"stale_plans={self.counts['stale_plans']}")

    def close_world(self) -> None:
        """Every drone hovers between episodes."""
        self._hover_all()

    # ------------------------------------------------------------------ outputs

    def stamp(self) -> Time:
        """Simulated time with use_sim_time, else the node's clock."""
        if self.sim_time:
            return stamp_of(self.sim_steps * self.config.sim_step_s)
        return self.get_clock().now().to_msg()

    def num_agents(self) -> int:
        """K."""
        return self.config.num_agents

    def world_agents(self) -> list[str]:
        """The episode's drones."""
        return list(self.world.drones)

    def world_schema(self) -> dict:
        """The drone skills with every parameter enumerated from this episode's intersection (its K drones)."""
        return intersection.action_schema(self.world.cfg)

    def _publish_states(self) -> None:
        stamp = self.stamp()
        reports = drone_feed.agent_reports(self.world)  # ENU, as ROS frames are
        self.out.agent_states(reports, stamp, self.config.frame_id)
        self._publish_world_state()
        self.out.sim_clock(self.sim_steps * self.config.sim_step_s)
        if self.config.markers:
            markers = drone_markers(self.world, self.config.frame_id, stamp)
            markers.markers.extend(self.calls.markers(self.config.frame_id, stamp, (0.0, 0.0)).markers)
            self.out.markers.publish(markers)

    def _publish_world_state(self) -> None:
        self.publish_state(world_state(self.world, self.episode), self.config.frame_id)

    def publish_diagnostics(self) -> None:
        """Link, readiness, episode progress, holds and dropped plans on /diagnostics."""
        if self.config is None:
            self.publish_world_health("AirSim bridge", Health({"state": self.state_label},
                                                              errors=(self.last_error,) if self.last_error else ()),
                                      message=self.state_label)
            return
        link_up = self.link is not None and self.link.up
        errors = () if link_up or self.state_label != "active" else (self.last_error or "not connected to AirSim",)
        link = Health({"state": self.state_label, "simulator": f"{self.config.host}:{self.config.port}",
                       "connected": link_up, "rpc_calls": self.link.calls if self.link else 0}, errors=errors)
        distance = (Health({"min_distance_m": round(self.world.min_distance, 2)})
                    if self.world is not None and math.isfinite(self.world.min_distance) else Health())
        self.publish_stepped_health("AirSim bridge", link + self.stepped_health() + distance)


def main(args=None) -> int:
    """`ros2 run sim_bridges airsim_bridge`; with `shutdown_when_done` it exits after the last episode."""
    return spin_node(AirSimBridgeNode, "airsim_bridge", args,
                     until=lambda node: node.done and node.config is not None and node.config.shutdown_when_done)


if __name__ == "__main__":
    sys.exit(main())
