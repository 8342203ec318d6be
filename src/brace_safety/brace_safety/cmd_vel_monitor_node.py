"""cmd_vel_monitor lifecycle node, the collision monitor of mobile bases: every velocity command passes the zones on
its way to the motors (Nav2's collision_monitor layout: /<robot>/cmd_vel_nav in, /<robot>/cmd_vel out), with the
other robots' odometry as the sources. Topics, parameters and zones: docs/safety.md and docs/nodes.md."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from functools import partial

from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn

from brace_common import names, qos
from brace_common.config import ConfigError, autostart_param, diagnostics_period_param, param
from brace_common.counters import Counters, Health
from brace_common.lifecycle import serialized
from brace_common.planar import Pose2D
from brace_common.spin import spin_node
from brace_common.validation import InvalidInput

from . import convert
from .monitor import MonitorConfig
from .monitor_node import MonitorNode

COMMAND = "cmd_vel"
"""The `action` of a stop's ExecutionOutcome: what the monitor stopped (it does not know the plan's skill)."""


@dataclass
class CmdVelMonitorConfig(MonitorConfig):
    """The zones and agents (MonitorConfig), and where each robot's topics and odometry start."""

    origins: list[float] = param([], "x, y, yaw (m, m, rad) per agent in the world frame: where its odometry starts "
                                 "(as the isaac_bridge's origins); [] = every robot at 0, 0, 0")
    odom_topic: str = param(names.ODOM, "odometry topic in a robot's namespace (nav_msgs/Odometry): the sources")
    cmd_vel_in_topic: str = param(names.CMD_VEL_NAV, "velocity command topic in a robot's namespace the monitor "
                                  "checks (geometry_msgs/Twist, the executor's output)")
    cmd_vel_out_topic: str = param(names.CMD_VEL, "velocity command topic in a robot's namespace the monitor sends "
                                   "to the motors (geometry_msgs/Twist)")
    autostart: bool = autostart_param()
    diagnostics_period_s: float = diagnostics_period_param()

    def validate(self) -> None:
        """The monitor's rules, one origin per agent, and distinct topic names."""
        super().validate()
        if self.origins and len(self.origins) != 3 * len(self.agents):
            raise ConfigError("origins", f"{len(self.origins)} values: 3 per agent ({3 * len(self.agents)}) or none")
        for name in ("odom_topic", "cmd_vel_in_topic", "cmd_vel_out_topic"):
            if not getattr(self, name).strip("/"):
                raise ConfigError(name, "must not be empty")
        if self.cmd_vel_in_topic.strip("/") == self.cmd_vel_out_topic.strip("/"):
            raise ConfigError("cmd_vel_out_topic", "must differ from cmd_vel_in_topic (the monitor would hear itself)")

    def origin(self, agent: str) -> Pose2D:
        """Where the agent's odometry starts."""
        if not self.origins:
            return Pose2D(0.0, 0.0, 0.0)
        i = 3 * self.agents.index(agent)
        return Pose2D(*self.origins[i:i + 3])


def robot_topic(robot: str, relative: str) -> str:
    """The absolute name of topic `relative` in robot namespace `robot` (Isaac Sim's OmniGraph nodeNamespace)."""
    return f"/{robot.strip('/')}/{relative.strip('/')}"


NODE_COUNTS = ("inactive_commands", "malformed_odometry", "stops_reported")


class CollisionMonitorNode(MonitorNode):
    """Thin lifecycle shell: odometry -> the monitor's sources; each cmd_vel_nav -> the zones -> cmd_vel."""

    def __init__(self, **kwargs) -> None:
        super().__init__("cmd_vel_monitor", CmdVelMonitorConfig, COMMAND, **kwargs)
        self.motors: dict[str, object] = {}
        self.counts = Counters(NODE_COUNTS, warn=["malformed_odometry"])

    @serialized
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Validate the parameters; create each robot's odometry and command topics, the state and outcomes."""
        cfg = self.read_configuration()
        if cfg is None:
            return TransitionCallbackReturn.FAILURE
        for agent in cfg.agents:
            self.motors[agent] = self.configured(self.create_publisher(
                Twist, robot_topic(agent, cfg.cmd_vel_out_topic), qos.SIM_COMMANDS))
            self.configured(self.create_subscription(Odometry, robot_topic(agent, cfg.odom_topic),
                                                     partial(self.on_odom, agent), qos.ROBOT_FEEDBACK,
                                                     callback_group=self.group))
            self.configured(self.create_subscription(Twist, robot_topic(agent, cfg.cmd_vel_in_topic),
                                                     partial(self.on_command, agent), qos.SIM_COMMANDS,
                                                     callback_group=self.group))
        self.get_logger().info(f"guarding {', '.join(cfg.agents)}: {cfg.cmd_vel_in_topic} -> {cfg.cmd_vel_out_topic}"
                               f", {self.zones_text(cfg)}")
        return TransitionCallbackReturn.SUCCESS

    def _release(self) -> None:
        """Cleanup and shutdown: stop the robots and forget them (the base then destroys configure's topics)."""
        self.hold()
        self.active = False
        self.motors, self.monitor, self.config = {}, None, None

    def destroy_node(self) -> None:
        """Stop the robots while the context is still valid (on exit, too), then destroy the node."""
        self.hold()
        super().destroy_node()

    def hold(self) -> None:
        """A zero velocity to every robot (a differential controller keeps the last command it got)."""
        for motor in self.motors.values():
            motor.publish(Twist())

    @serialized
    def on_odom(self, agent: str, msg: Odometry) -> None:
        """A robot's odometry: where the monitor senses it (and every other robot's obstacle)."""
        monitor = self.monitor
        if monitor is None:
            return
        try:
            monitor.sense(agent, convert.sensed_from_odom(msg, self.config.origin(agent), time.monotonic()))
        except InvalidInput as exc:
            self.counts.add("malformed_odometry")
            self.get_logger().warn(f"{agent}: odometry dropped: {exc}", throttle_duration_sec=5.0)

    @serialized
    def on_command(self, agent: str, msg: Twist) -> None:
        """One velocity command: through the zones to the motors; a change of state published, a stop reported."""
        monitor = self.monitor
        if monitor is None or not self.active:
            self.counts.add("inactive_commands")
            return
        guarded = monitor.guard(agent, (msg.linear.x, msg.linear.y, msg.linear.z), msg.angular.z, time.monotonic())
        self.motors[agent].publish(convert.twist_let_through(msg, guarded.motion, guarded.verdict))
        if self.report(agent, guarded):
            self.counts.add("stops_reported")

    def health(self) -> Health:
        """Its counts and the monitor's (commands, interventions per agent and zone)."""
        return self.counts.health() + super().health()


def main(args=None) -> int:
    """`ros2 run brace_safety cmd_vel_monitor` (configures and activates itself with `autostart`)."""
    return spin_node(CollisionMonitorNode, "cmd_vel_monitor", args)


if __name__ == "__main__":
    sys.exit(main())
