"""What the collision monitors' lifecycle nodes share: parameters checked at configure, the state and outcome
topics, how a verdict is reported, and /diagnostics (docs/safety.md)."""

from __future__ import annotations

from typing import Any, Optional

from brace_msgs.msg import CollisionMonitorState, ExecutionOutcome
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn

from brace_common import names, qos
from brace_common.clock import steady_timer
from brace_common.counters import Health
from brace_common.diagnostics import health_array
from brace_common.lifecycle import ReleasingLifecycleNode, serialized
from brace_common.params import declare_parameters
from brace_common.vocabulary import ZoneAction

from . import convert
from .monitor import CollisionMonitor, Guarded


class MonitorNode(ReleasingLifecycleNode):
    """A collision monitor's lifecycle shell: its parameters (declared now, checked at configure), one callback
    group, the diagnostics timer, `collision_monitor_state` and `outcomes`; the CollisionMonitor built at configure
    (unless the node's core owns one: OWNS_MONITOR false)."""

    OWNS_MONITOR = True

    def __init__(self, name: str, config_class: type, command: str, **kwargs) -> None:
        super().__init__(name, **kwargs)
        self.config_class, self.command = config_class, command
        self.config: Optional[Any] = None
        self.monitor: Optional[CollisionMonitor] = None
        self.active = False
        self.state_label = "unconfigured"
        self.group = MutuallyExclusiveCallbackGroup()  # every callback of the node, one at a time
        declare_parameters(self, config_class, enforce_ranges=False)  # checked at configure (read_config)
        self.diag_pub = self.create_publisher(DiagnosticArray, names.DIAGNOSTICS, qos.DIAGNOSTICS)
        period = self.get_parameter("diagnostics_period_s").value
        steady_timer(self, period if isinstance(period, float) and 0.05 <= period <= 3600.0 else 1.0,
                     self.publish_diagnostics, self.group)

    def read_configuration(self) -> Optional[Any]:
        """The validated config (kept in `config`), the monitor (OWNS_MONITOR) and the state and outcome topics;
        None, with `last_error` logged, when a parameter is invalid."""
        cfg = self.read_parameters(self.config_class)
        if cfg is None:
            return None
        self.config, self.state_label = cfg, "inactive"
        if self.OWNS_MONITOR:
            self.monitor = CollisionMonitor(cfg)
        self.state_pub = self.configured(self.create_publisher(CollisionMonitorState, names.COLLISION_MONITOR_STATE,
                                                               qos.EVENTS))
        self.outcome_pub = self.configured(self.create_publisher(ExecutionOutcome, names.OUTCOMES, qos.EVENTS))
        return cfg

    @serialized
    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Let commands through the zones."""
        self.active, self.state_label = True, "active"
        return super().on_activate(state)

    @serialized
    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """`hold()` the agents; nothing passes while inactive."""
        self.hold()
        self.active, self.state_label = False, "inactive"
        return super().on_deactivate(state)

    def hold(self) -> None:
        """What holds the agents when commands stop passing (nothing here: a command not sent moves nothing)."""

    def report(self, agent: str, guarded: Guarded, verb: str = "stopped") -> bool:
        """Publish an agent's changed state, and a stop that began as an outcome (a HAZARD trigger) and a warning;
        True when a stop was reported."""
        stamp = self.get_clock().now().to_msg()
        if guarded.changed:
            self.state_pub.publish(convert.state_msg(agent, guarded.verdict, stamp))
        if not (guarded.began and guarded.verdict.action is ZoneAction.STOP):
            return False
        self.outcome_pub.publish(convert.stop_outcome(agent, guarded.verdict, stamp, self.command))
        self.get_logger().warning(f"{agent}: {verb}: {guarded.verdict.detail}")
        return True

    @staticmethod
    def zones_text(cfg: Any) -> str:
        """The zones that act, for the configure log line."""
        return f"zones {', '.join(cfg.zones)}" + ("" if cfg.enable else " (disabled: passing)")

    def health(self) -> Health:
        """What the node adds to its state on /diagnostics: the monitor's (commands, interventions per zone)."""
        return self.monitor.health() if self.monitor is not None else Health()

    def publish_diagnostics(self) -> None:
        """The node's state (ERROR with the last configure or activate error) and its `health()`."""
        health = Health({"state": self.state_label}, errors=(self.last_error,) if self.last_error else ()) + \
            self.health()
        self.diag_pub.publish(health_array(f"{self.get_name()}: collision monitor", health,
                                           self.get_clock().now().to_msg()))
