"""ee_monitor lifecycle node, the collision monitor of an arm: every end-effector command of the executor passes the
zones on its way to the arm (ee_delta_cmd_nav in, ee_delta_cmd out), the arm's end pose as the source, keep-out boxes
(static ones, and the objects the world state reports of the types named) as the obstacles. A command is a
displacement: it is read as a velocity over `command_period_s`. Topics, parameters and zones: docs/safety.md and
docs/nodes.md."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from typing import Optional

from brace_msgs.msg import EndEffectorDelta, WorldState
from geometry_msgs.msg import PoseStamped
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn

from brace_common import names, qos
from brace_common.config import ConfigError, autostart_param, diagnostics_period_param, param
from brace_common.counters import Counters, Health
from brace_common.lifecycle import serialized
from brace_common.spin import spin_node
from brace_common.validation import InvalidInput
from brace_common.world_state import world_state_from_msg

from . import convert
from .monitor import MonitorConfig
from .monitor_node import MonitorNode
from .zones import Obstacle

COMMAND = "ee_delta"
"""The `action` of a stop's ExecutionOutcome: an end-effector command (the monitor does not know the skill)."""


@dataclass
class EeMonitorConfig(MonitorConfig):
    """The zones (sized for an end effector), the arm, its topics and the keep-out boxes."""

    agents: list[str] = param(["arm_0"], "the arm whose end-effector commands pass the monitor (one)")
    hazard_distance_m: float = param(0.02, "radius of the stop zone: a command closing on a keep-out box nearer "
                                     "than this is dropped (m, from the end effector's point)", 0.001, 10.0)
    slowdown_distance_m: float = param(0.05, "radius of the slowdown zone (m)", 0.001, 10.0)
    time_before_collision_s: float = param(1.0, "approach zone: closing commands are scaled so the stop zone is at "
                                           "least this far away in time (s)", 0.05, 60.0)
    simulation_time_step_s: float = param(0.05, "time step of the forward simulation of a command (s)", 0.005, 1.0)
    footprint_radius_m: float = param(0.005, "radius of the end effector's point (m); hazard_distance_m must exceed "
                                      "two", 0.0, 1.0)
    source_timeout_s: float = param(0.5, "a command while the end pose is older than this is dropped (s)",
                                    0.01, 3600.0)
    command_period_s: float = param(0.2, "time one command's displacement takes (the executor's control_period_s):"
                                    " it is checked as a velocity of displacement / this (s)", 0.001, 10.0)
    keep_out_types: list[str] = param([], "entity types of the world state that are keep-out boxes (e.g. "
                                      "[obstacle]); [] = the static_obstacles only")
    keep_out_half_extents_m: list[float] = param([0.05, 0.05, 0.05], "half extents x, y, z of the box around "
                                                 "each keep-out entity's pose (m)")
    end_pose_topic: str = param(names.END_POSE, "the arm's end-effector pose (geometry_msgs/PoseStamped, the "
                                "frame of the boxes): the source")
    cmd_in_topic: str = param(names.EE_DELTA_CMD_NAV, "the executor's commands the monitor checks "
                              "(brace_msgs/EndEffectorDelta)")
    cmd_out_topic: str = param(names.EE_DELTA_CMD, "the commands the monitor sends to the arm")
    autostart: bool = autostart_param()
    diagnostics_period_s: float = diagnostics_period_param()

    def validate(self) -> None:
        """The monitor's rules, one arm, positive box extents and distinct topics."""
        super().validate()
        if len(self.agents) != 1:
            raise ConfigError("agents", f"{self.agents}: one arm per monitor")
        if len(self.keep_out_half_extents_m) != 3 or not all(
                math.isfinite(h) and h > 0.0 for h in self.keep_out_half_extents_m):
            raise ConfigError("keep_out_half_extents_m", f"{self.keep_out_half_extents_m}: three values > 0")
        for name in ("end_pose_topic", "cmd_in_topic", "cmd_out_topic"):
            if not getattr(self, name).strip("/"):
                raise ConfigError(name, "must not be empty")
        if self.cmd_in_topic.strip("/") == self.cmd_out_topic.strip("/"):
            raise ConfigError("cmd_out_topic", "must differ from cmd_in_topic (the monitor would hear itself)")


NODE_COUNTS = ("inactive_commands", "malformed_poses", "malformed_world_states", "stops_reported")


class EeMonitorNode(MonitorNode):
    """Thin lifecycle shell: end_pose -> the source; world_state -> keep-out boxes; each command -> the zones."""

    def __init__(self, **kwargs) -> None:
        super().__init__("ee_monitor", EeMonitorConfig, COMMAND, **kwargs)
        self.boxes: tuple[Obstacle, ...] = ()
        self.last_pose: Optional[tuple[tuple[float, float, float], float]] = None
        self.counts = Counters(NODE_COUNTS, warn=["malformed_poses", "malformed_world_states"])

    @serialized
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Validate the parameters; create the pose, world-state and command topics, the state and outcomes."""
        cfg = self.read_configuration()
        if cfg is None:
            return TransitionCallbackReturn.FAILURE
        self.arm = self.configured(self.create_publisher(EndEffectorDelta, cfg.cmd_out_topic, qos.ROBOT_COMMANDS))
        self.configured(self.create_subscription(PoseStamped, cfg.end_pose_topic, self.on_pose, qos.ROBOT_FEEDBACK,
                                                 callback_group=self.group))
        self.configured(self.create_subscription(EndEffectorDelta, cfg.cmd_in_topic, self.on_command,
                                                 qos.ROBOT_COMMANDS, callback_group=self.group))
        if cfg.keep_out_types:
            self.configured(self.create_subscription(WorldState, names.WORLD_STATE, self.on_world_state,
                                                     qos.WORLD_STATE, callback_group=self.group))
        self.get_logger().info(f"guarding {cfg.agents[0]}: {cfg.cmd_in_topic} -> {cfg.cmd_out_topic}, "
                               f"{len(cfg.static_obstacles)} static keep-out(s), world types {cfg.keep_out_types}, "
                               f"{self.zones_text(cfg)}")
        return TransitionCallbackReturn.SUCCESS

    def _release(self) -> None:
        """Cleanup and shutdown: forget the arm (the base then destroys configure's topics)."""
        self.active = False
        self.monitor, self.config, self.boxes, self.last_pose = None, None, (), None

    @serialized
    def on_pose(self, msg: PoseStamped) -> None:
        """The arm's end pose: where the monitor senses the end effector, and how fast it moves."""
        if self.monitor is None:
            return
        now = time.monotonic()
        try:
            sensed = convert.sensed_from_pose(msg, self.last_pose, now)
        except InvalidInput as exc:
            self.counts.add("malformed_poses")
            self.get_logger().warn(f"end pose dropped: {exc}", throttle_duration_sec=5.0)
            return
        self.last_pose = (sensed.position, now)
        self.monitor.sense(self.config.agents[0], sensed)

    @serialized
    def on_world_state(self, msg: WorldState) -> None:
        """Keep-out boxes around the entities of `keep_out_types` where the world state puts them."""
        if self.config is None:
            return
        try:
            state = world_state_from_msg(msg)
        except ValueError:
            self.counts.add("malformed_world_states")
            return
        half = tuple(self.config.keep_out_half_extents_m)
        self.boxes = tuple(Obstacle(e.id, (e.pose.x, e.pose.y, e.pose.z), half_extents_m=half)
                           for e in state.entities if e.type in self.config.keep_out_types and e.pose is not None)

    @serialized
    def on_command(self, msg: EndEffectorDelta) -> None:
        """One end-effector command: through the zones to the arm (its displacement scaled, or not sent when
        stopped); a change of state published, a stop reported."""
        monitor, cfg = self.monitor, self.config
        if monitor is None or not self.active:
            self.counts.add("inactive_commands")
            return
        agent, t = cfg.agents[0], msg.translation
        velocity = tuple(v / cfg.command_period_s for v in (t.x, t.y, t.z))
        guarded = monitor.guard(agent, velocity, 0.0, time.monotonic(), self.boxes)
        self.arm.publish(convert.ee_delta_let_through(msg, guarded.motion, guarded.verdict))
        if self.report(agent, guarded):
            self.counts.add("stops_reported")

    def health(self) -> Health:
        """Its counts, the keep-out boxes and the monitor's (commands, interventions per zone)."""
        boxes = len(self.boxes) + (len(self.config.static_obstacles) if self.config is not None else 0)
        return Health({"keep_out_boxes": boxes}) + self.counts.health() + super().health()


def main(args=None) -> int:
    """`ros2 run brace_safety ee_monitor` (configures and activates itself with `autostart`)."""
    return spin_node(EeMonitorNode, "ee_monitor", args)


if __name__ == "__main__":
    sys.exit(main())
