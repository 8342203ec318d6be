"""airsim_monitor lifecycle node, the collision monitor of AirSim drones: the msgpack-rpc proxy
(airsim_guard.AirSimGuard) the airsim_bridge connects to instead of AirSim, checking every motion command through
the zones on its way to the simulator. Topics, parameters and zones: docs/safety.md and docs/nodes.md."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Optional

from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn

from brace_common.config import autostart_param, diagnostics_period_param
from brace_common.counters import Health
from brace_common.lifecycle import serialized
from brace_common.spin import spin_node

from .airsim_guard import AirSimGuard, AirSimMonitorConfig
from .monitor import Guarded
from .monitor_node import MonitorNode

COMMAND = "airsim_motion"
"""The `action` of a stop's ExecutionOutcome: a drone's motion command (the monitor does not know the skill)."""


@dataclass
class AirSimMonitorNodeConfig(AirSimMonitorConfig):
    """The proxy's parameters and the node's own."""

    autostart: bool = autostart_param()
    diagnostics_period_s: float = diagnostics_period_param()


class AirSimMonitorNode(MonitorNode):
    """Thin lifecycle shell: configure validates, activate serves the bridge and connects to AirSim, the zones'
    state changes and stops become messages."""

    OWNS_MONITOR = False   # the proxy builds its monitor once it knows AirSim's vehicles

    def __init__(self, **kwargs) -> None:
        super().__init__("airsim_monitor", AirSimMonitorNodeConfig, COMMAND, **kwargs)
        self.guard: Optional[AirSimGuard] = None

    @serialized
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Validate the parameters; create the state and outcome topics and the proxy (not yet serving)."""
        cfg = self.read_configuration()
        if cfg is None:
            return TransitionCallbackReturn.FAILURE
        self.guard = AirSimGuard(cfg, self.on_guarded)
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
                               f"{cfg.airsim_port}, {self.zones_text(cfg)}")
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
        self.report(agent, guarded, "held")

    def health(self) -> Health:
        """The proxy's health (connections, commands held / scaled, zones per drone) while it serves."""
        guard = self.guard
        return guard.health() if guard is not None and guard.server.running else Health()

    def destroy_node(self) -> None:
        """Stop the proxy's threads with the node."""
        self._stop_guard()
        super().destroy_node()


def main(args=None) -> int:
    """`ros2 run brace_safety airsim_monitor` (configures and activates itself with `autostart`)."""
    return spin_node(AirSimMonitorNode, "airsim_monitor", args)


if __name__ == "__main__":
    sys.exit(main())
