"""airsim_monitor lifecycle node, the collision monitor of AirSim drones: the msgpack-rpc proxy
(airsim_guard.AirSimGuard) the airsim_bridge connects to instead of AirSim, checking every motion command through
the zones on its way to the simulator. Topics, parameters and zones: docs/safety.md and docs/nodes.md."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Optional

from brace_msgs.msg import CollisionMonitorState, ExecutionOutcome
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn

from brace_common import names, qos
from brace_common.clock import steady_timer
from brace_common.config import ConfigError, autostart_param, diagnostics_period_param
from brace_common.counters import Health
from brace_common.diagnostics import health_array
from brace_common.lifecycle import ReleasingLifecycleNode, serialized
from brace_common.params import declare_parameters, read_config, reject_undeclared
from brace_common.spin import spin_node
from brace_common.vocabulary import ZoneAction

from . import convert
from .airsim_guard import AirSimGuard, AirSimMonitorConfig
from .monitor import Guarded

COMMAND = "airsim_motion"
"""The `action` of a stop's ExecutionOutcome: a drone's motion command (the monitor does not know the skill)."""


@dataclass
class AirSimMonitorNodeConfig(AirSimMonitorConfig):
    """The proxy's parameters and the node's own."""

    autostart: bool = autostart_param()
    diagnostics_period_s: float = diagnostics_period_param()


class AirSimMonitorNode(ReleasingLifecycleNode):
    """Thin lifecycle shell: configure validates, activate serves the bridge and connects to AirSim, the zones'
    state changes and stops become messages."""

    def __init__(self, **kwargs) -> None:
        super().__init__("airsim_monitor", **kwargs)
        self.config: Optional[AirSimMonitorNodeConfig] = None
        self.guard: Optional[AirSimGuard] = None
        declare_parameters(self, AirSimMonitorNodeConfig, enforce_ranges=False)  # checked at configure
        self.diag_pub = self.create_publisher(DiagnosticArray, names.DIAGNOSTICS, qos.DIAGNOSTICS)
        period = self.get_parameter("diagnostics_period_s").value
        steady_timer(self, period if isinstance(period, float) and 0.05 <= period <= 3600.0 else 1.0,
                     self.publish_diagnostics, MutuallyExclusiveCallbackGroup())

    @serialized
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Validate the parameters; create the state and outcome topics and the proxy (not yet serving)."""
        try:
            cfg = read_config(self, AirSimMonitorNodeConfig)
            reject_undeclared(self)
        except ConfigError as exc:
            self.last_error = f"configure failed: {exc}"
            self.get_logger().error(self.last_error)
            return TransitionCallbackReturn.FAILURE
        self.config, self.last_error = cfg, ""
        self.state_pub = self.configured(self.create_publisher(CollisionMonitorState, names.COLLISION_MONITOR_STATE,
                                                               qos.EVENTS))
        self.outcome_pub = self.configured(self.create_publisher(ExecutionOutcome, names.OUTCOMES, qos.EVENTS))
        self.guard = AirSimGuard(cfg, self.on_guarded)
        self.state_label = "inactive"
        return TransitionCallbackReturn.SUCCESS

    @serialized
    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Serve the bridge on host:port and connect to AirSim (retried until it answers)."""
        cfg = self.config
        try:
            self.guard.start()
        except OSError as exc:
            self.last_error = f"cannot serve on {cfg.host}:{cfg.port}: {exc}"
            self.get_logger().error(self.last_error)
            return TransitionCallbackReturn.FAILURE
        self.state_label = "active"
        self.get_logger().info(f"serving AirSim's API on {cfg.host}:{cfg.port} for AirSim at {cfg.airsim_host}:"
                               f"{cfg.airsim_port}, zones {', '.join(cfg.zones)}" +
                               ("" if cfg.enable else " (disabled: passing)"))
        return super().on_activate(state)

    @serialized
    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Hover every drone with a command and stop serving (nothing passes while inactive)."""
        self._stop_guard()
        self.state_label = "inactive"
        return super().on_deactivate(state)

    def _release(self) -> None:
        """Cleanup and shutdown: stop the proxy and forget it (the base then destroys configure's topics)."""
        self._stop_guard()
        self.guard, self.config = None, None

    def _stop_guard(self) -> None:
        guard = getattr(self, "guard", None)
        if guard is not None and guard.server.running:
            guard.stop()

    def on_guarded(self, agent: str, guarded: Guarded) -> None:
        """A drone's zone state changed (from the proxy's threads): its state, and a stop's outcome."""
        stamp = self.get_clock().now().to_msg()
        self.state_pub.publish(convert.state_msg(agent, guarded.verdict, stamp))
        if guarded.began and guarded.verdict.action is ZoneAction.STOP:
            self.outcome_pub.publish(convert.stop_outcome(agent, guarded.verdict, stamp, COMMAND))
            self.get_logger().warning(f"{agent}: held: {guarded.verdict.detail}")

    def publish_diagnostics(self) -> None:
        """The node's state and the proxy's health (connections, commands held / scaled, zones per drone)."""
        guard = self.guard
        health = Health({"state": self.state_label}, errors=(self.last_error,) if self.last_error else ()) + \
            (guard.health() if guard is not None and guard.server.running else Health())
        self.diag_pub.publish(health_array(f"{self.get_name()}: collision monitor (AirSim)", health,
                                           self.get_clock().now().to_msg()))

    def destroy_node(self) -> None:
        """Stop the proxy's threads with the node."""
        self._stop_guard()
        super().destroy_node()


def main(args=None) -> int:
    """`ros2 run brace_safety airsim_monitor` (configures and activates itself with `autostart`)."""
    return spin_node(AirSimMonitorNode, "airsim_monitor", args)


if __name__ == "__main__":
    sys.exit(main())
