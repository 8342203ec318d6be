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
from .airsim_link import LinkDown
from .airsim_session import COUNTS as SESSION_COUNTS
from .airsim_session import AirSimSession, Connection
from .drone_feed import ned_to_enu
from .drone_markers import drone_markers
from .drone_world import DroneWorld, world_state


class AirSimBridgeNode(WorldInputs, ReleasingLifecycleNode):
    """Thin lifecycle shell around DroneWorld over an AirSimSession: parameters, episodes, holds, topics."""

    world_name = "airsim"

    def __init__(self, **kwargs) -> None:
        super().__init__("airsim_bridge", **kwargs)
        declare_parameters(self, AirSimBridgeConfig, enforce_ranges=False)
        self.config: Optional[AirSimBridgeConfig] = None
        self.session: Optional[AirSimSession] = None
        self.world: Optional[DroneWorld] = None
        self.timer = None  # the step timer: configure creates it stopped, activate starts it, deactivate stops it
        self.init_stepped_world(None, 0, 60.0, SESSION_COUNTS, warn=("link_losses",), open_now=False)
        self.sim_time = self.get_parameter("use_sim_time").value
        steady_timer(self, 1.0, self.publish_diagnostics)

    @serialized
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Validate the parameters, open the link (the simulator may come up later) and create the topics, inputs
        and the (stopped) step timer."""
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
        self.session = AirSimSession(self.config, self.counts)
        self.open_stepped_world(keep=self.configured)
        self.configured(self.subscribe_monitor_states())
        self.timer = self.configured(spaced_timer(self, self.config.step_period_s, self.tick, lock=self.transition_lock))
        self.timer.cancel()
        self.last_error = ""
        self.state_label = "inactive"
        return TransitionCallbackReturn.SUCCESS

    @serialized
    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Start stepping."""
        self.timer.reset()
        self.state_label = "active"
        self.get_logger().info(f"AirSim bridge for {self.config.num_agents} drones at {self.session.where} "
                               f"({'lockstep' if self.config.lockstep else 'real time'})")
        return TransitionCallbackReturn.SUCCESS

    @serialized
    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop stepping; every drone hovers."""
        self.timer.cancel()
        if self.session is not None:
            self.session.hover(self.world)
        self.state_label = "inactive"
        return TransitionCallbackReturn.SUCCESS

    def _release(self) -> None:
        """Close the link (drones are told to hover first) and forget the topics (the base destroys them)."""
        self.timer = None
        if self.session is not None:
            self.session.close(self.world)
            self.session = None
        self.release_peers()
        self.close_stepped_world()
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
        if self.done or self.timer is None or self.timer.is_canceled():  # dispatched before deactivate or cleanup
            return
        if not self.session.up and not self._connect():
            return
        if self.peers.waiting(self.counts, self.get_logger()):
            self.out.sim_clock(self.sim_steps * self.config.sim_step_s)
            return
        try:
            self.advance()
        except LinkDown as exc:
            self.session.lost(str(exc), time.monotonic())
            self.get_logger().error(self.session.last_error)

    def _connect(self) -> bool:
        """Try to (re)connect (AirSimSession.connect) and say how it went."""
        connection = self.session.connect(time.monotonic(), self.world)
        if connection is Connection.UNREACHABLE:  # one call site per severity (rclpy)
            self.get_logger().warning(self.session.last_error, throttle_duration_sec=10.0)
        elif connection is Connection.WRONG_VEHICLES:
            self.get_logger().error(self.session.last_error, throttle_duration_sec=10.0)
        elif connection is Connection.CONNECTED:
            self.get_logger().info(f"connected to AirSim {self.session.version} at {self.session.where}, "
                                   f"vehicles {sorted(self.session.origins)}")
        return connection is Connection.CONNECTED

    def start_episode(self) -> None:
        """Reset the simulator, take off every drone, announce the episode, publish its task and states."""
        episode = self.episode + 1
        self.world = world = self.session.new_world(episode)
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
        self.session.hover(self.world)

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
        if self.config is None or self.session is None:
            self.publish_world_health("AirSim bridge", Health({"state": self.state_label},
                                                              errors=(self.last_error,) if self.last_error else ()),
                                      message=self.state_label)
            return
        link = Health({"state": self.state_label}) + self.session.health(self.state_label == "active")
        distance = (Health({"min_distance_m": round(self.world.min_distance, 2)})
                    if self.world is not None and math.isfinite(self.world.min_distance) else Health())
        self.publish_stepped_health("AirSim bridge", link + self.stepped_health() + distance)


def main(args=None) -> int:
    """`ros2 run sim_bridges airsim_bridge`; with `shutdown_when_done` it exits after the last episode."""
    return spin_node(AirSimBridgeNode, "airsim_bridge", args,
                     until=lambda node: node.done and node.config is not None and node.config.shutdown_when_done)


if __name__ == "__main__":
    sys.exit(main())
