"""piper_twin lifecycle node: the PiPER arm's CAN twin (piper_twin.PiperTwin) as its own ROS process.

Publishes /diagnostics (ERROR while a fault is on); the faults are run-time parameters (fault_silent,
fault_collision, fault_over_limit_joint, fault_refuse_enable). The bus across processes (udp_multicast, CAN_CONFIG),
parameters and lifecycle: docs/piper_twin.md.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Optional

from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn

from brace_common import names, qos
from brace_common.clock import steady_timer
from brace_common.config import ConfigError, autostart_param, check_fields, diagnostics_period_param, param
from brace_common.counters import Health
from brace_common.diagnostics import health_array
from brace_common.lifecycle import ReleasingLifecycleNode
from brace_common.params import declare_parameters, read_config, reject_undeclared
from brace_common.spin import spin_node

from .piper_twin import PiperTwin, TwinConfig, is_interface_local_group

INTERFACES = ("virtual", "udp_multicast", "socketcan")


@dataclass
class TwinNodeConfig:
    """The node's own parameters (the arm's are TwinConfig's)."""

    can_interface: str = param("udp_multicast", "python-can interface: udp_multicast (processes), virtual (one "
                                                "process), socketcan (a vcan device)")
    can_port: str = param("ff01::74:1", "python-can channel: an ff01:: multicast group for udp_multicast, any name "
                                        "for virtual, the device for socketcan")
    autostart: bool = autostart_param()
    diagnostics_period_s: float = diagnostics_period_param()

    def validate(self) -> None:
        """ConfigError naming the first invalid parameter."""
        check_fields(self)
        if self.can_interface not in INTERFACES:
            raise ConfigError("can_interface", f"'{self.can_interface}' is not one of {list(INTERFACES)}")
        if not self.can_port.strip():
            raise ConfigError("can_port", "must not be empty")
        if self.can_interface == "udp_multicast" and not is_interface_local_group(self.can_port):
            raise ConfigError("can_port", f"'{self.can_port}' is not an interface-local IPv6 multicast group (ff01::/16);"
                                          " other groups send the arm's frames onto the network")


FAULTS: dict[str, tuple[Any, str]] = {
    "fault_silent": (False, "bus silence: no feedback frames, commands lost (a cut cable)"),
    "fault_collision": (False, "collision: arm status 0x07, motion stops and holds"),
    "fault_over_limit_joint": (-1, "joint 1-6 over its angle limit (status error bit); -1 none"),
    "fault_refuse_enable": (False, "enable commands are ignored (motors stay disabled)"),
}


def check_fault(name: str, value: Any) -> Optional[str]:
    """Why `value` is not a valid value of fault parameter `name` (None when it is)."""
    default = FAULTS[name][0]
    if type(value) is not type(default):
        return f"{name} must be a {type(default).__name__}, got {value!r}"
    if name == "fault_over_limit_joint" and not (value == -1 or 1 <= value <= 6):
        return f"{name} must be 1-6 or -1 (none), got {value}"
    return None


class PiperTwinNode(ReleasingLifecycleNode):
    """Thin lifecycle shell around PiperTwin: parameters, faults, diagnostics."""

    def __init__(self, **kwargs) -> None:
        super().__init__("piper_twin", **kwargs)
        self.twin: Optional[PiperTwin] = None
        declare_parameters(self, TwinNodeConfig, enforce_ranges=False)
        declare_parameters(self, TwinConfig, enforce_ranges=False)
        for name, (default, text) in FAULTS.items():  # values are checked at configure and by _check_faults
            self.declare_parameter(name, default, ParameterDescriptor(name=name, description=text))
        self.add_on_set_parameters_callback(self._check_faults)
        self.add_post_set_parameters_callback(lambda parameters: self._apply_faults(parameters, announce=True))
        self.node_config: Optional[TwinNodeConfig] = None
        self.state_label = "unconfigured"
        self.last_error = ""
        self.diag_pub = self.create_publisher(DiagnosticArray, names.DIAGNOSTICS, qos.DIAGNOSTICS)
        steady_timer(self, self.get_parameter("diagnostics_period_s").value, self.publish_diagnostics,
                     MutuallyExclusiveCallbackGroup())

    # ------------------------------------------------------------------ lifecycle

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Validate the parameters and build the twin."""
        try:
            self.node_config = read_config(self, TwinNodeConfig)
            twin_config = read_config(self, TwinConfig)
            reject_undeclared(self)
            for name in FAULTS:
                reason = check_fault(name, self.get_parameter(name).value)
                if reason:
                    raise ConfigError(name, reason)
        except ConfigError as exc:
            self.last_error = str(exc)
            self.get_logger().error(f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        self.twin = PiperTwin(self.node_config.can_port, self.node_config.can_interface, twin_config)
        self.last_error = ""
        self.state_label = "inactive"
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Open the bus and start the arm."""
        try:
            self.twin.start()
        except Exception as exc:  # noqa: BLE001 - python-can raises interface-specific errors; all stop activation
            self.last_error = f"cannot open {self.node_config.can_interface} bus '{self.node_config.can_port}': {exc}"
            self.get_logger().error(self.last_error)
            return TransitionCallbackReturn.FAILURE
        self._apply_faults([self.get_parameter(name) for name in FAULTS], announce=False)
        for fault in self.active_faults():
            self.get_logger().warn(f"starting with fault {fault}")
        self.state_label = "active"
        self.get_logger().info(f"PiPER twin on {self.node_config.can_interface} '{self.node_config.can_port}' at "
                               f"a feedback cycle every {self.twin.config.feedback_period_s:g} s")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop the arm (it falls silent)."""
        self.twin.stop()
        self.state_label = "inactive"
        return super().on_deactivate(state)

    def _release(self) -> None:
        """Cleanup and shutdown: drop the twin (also for a node whose constructor stopped half way)."""
        if getattr(self, "twin", None) is not None:
            self.twin.stop()
            self.twin = None

    def destroy_node(self) -> None:
        """Stop the twin's thread with the node."""
        self._release()
        super().destroy_node()

    # ------------------------------------------------------------------ faults

    def _check_faults(self, parameters) -> SetParametersResult:
        for parameter in parameters:
            if parameter.name in FAULTS:
                reason = check_fault(parameter.name, parameter.value)
                if reason:
                    return SetParametersResult(successful=False, reason=reason)
        return SetParametersResult(successful=True)

    def _apply_faults(self, parameters, announce: bool) -> None:
        twin = self.twin
        if twin is None:
            return  # applied at activate
        for parameter in parameters:
            name, value = parameter.name, parameter.value
            if name == "fault_silent":
                twin.set_silent(value)
            elif name == "fault_collision":
                twin.set_collision(value)
            elif name == "fault_over_limit_joint":
                twin.set_over_limit(None if value == -1 else value)
            elif name == "fault_refuse_enable":
                twin.refuse_enable(value)
            else:
                continue
            if announce:
                self.get_logger().warn(f"fault {name} = {value}")

    def active_faults(self) -> list[str]:
        """The injected faults that are on."""
        faults = []
        for name in FAULTS:
            value = self.get_parameter(name).value
            if value not in (False, -1):
                faults.append(f"{name}={value}" if name == "fault_over_limit_joint" else name)
        return faults

    # ------------------------------------------------------------------ diagnostics

    def publish_diagnostics(self) -> None:
        """The node's state and injected faults, and the twin's health (PiperTwin.health)."""
        cfg, twin = self.node_config, self.twin
        values: dict[str, Any] = {"state": self.state_label}
        if cfg is not None:
            values.update({"can_interface": cfg.can_interface, "can_port": cfg.can_port})
        errors = [f"configure failed: {self.last_error}"] if self.last_error else []
        if twin is not None and self.state_label == "active" and not twin.running:
            errors.append(f"twin thread stopped ({twin.last_error or 'no error recorded'})")
        faults = self.active_faults()
        errors += [f"fault injected: {f}" for f in faults]
        health = Health(values) + (twin.health() if twin is not None else Health()) + \
            Health({"faults": ",".join(faults) or "none"}, errors=tuple(errors))
        self.diag_pub.publish(health_array(f"{self.get_name()}: PiPER CAN twin", health, self.get_clock().now().to_msg()))

def main(args=None) -> int:
    """`ros2 run robot_bridge piper_twin` (configures and activates itself with `autostart`)."""
    return spin_node(PiperTwinNode, "piper_twin", args)


if __name__ == "__main__":
    sys.exit(main())
