"""brace_viewer lifecycle node: the stack live in Rerun's web viewer, on 127.0.0.1 unless asked.

Configure starts the viewer's server (view_server: the wheel's binary bound to `bind`) and a recording that logs
into it; activate shows what arrives on the stack's topics (relative names, the audit recorder's QoS) through the
mapping `brace-audit view` uses for bags (view_mapping), stamped with the system time it arrives, as the recorder
stamps a bag: live and replayed look the same. Cleanup stops the server. Topics and parameters: docs/viewer.md.
"""

from __future__ import annotations

import ipaddress
import sys
import time
from dataclasses import dataclass
from typing import Any, Optional

import rerun as rr
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn

from brace_common import names, qos
from brace_common.clock import steady_timer
from brace_common.config import ConfigError, autostart_param, check_fields, diagnostics_period_param, param
from brace_common.counted_inputs import CountedInputs
from brace_common.counters import Health
from brace_common.diagnostics import health_array
from brace_common.lifecycle import ReleasingLifecycleNode, serialized
from brace_common.params import declare_parameters
from brace_common.spin import spin_node

from .audit_recorder_node import TOPICS, message_class
from .view_bag import APPLICATION_ID
from .view_mapping import ViewMapping, blueprint
from .view_server import ViewerError, ViewerServer

FLUSH_TIMEOUT_S = 5.0
"""How long cleanup waits for the recording to reach the server (and the saved file)."""


@dataclass
class ViewerConfig:
    """Parameters of brace_viewer."""

    port: int = param(9090, "the web viewer's HTTP port: a browser opens http://<bind>:<port>/", 1, 65535)
    grpc_port: int = param(9876, "the viewer's data port (gRPC): the node logs into it, browsers read from it",
                           1, 65535)
    bind: str = param("127.0.0.1", "the address the viewer serves on (0.0.0.0: every interface, for a browser on "
                                   "another machine; only when asked)")
    save_path: str = param("", "also write the recording to this .rrd file ('' = none)")
    memory_limit_mib: int = param(1024, "what the server keeps for browsers that open late (MiB); beyond it the "
                                       "oldest data is dropped", 16, 1 << 20)
    autostart: bool = autostart_param()
    diagnostics_period_s: float = diagnostics_period_param()

    def validate(self) -> None:
        """ConfigError naming the first invalid parameter."""
        check_fields(self)
        if self.port == self.grpc_port:
            raise ConfigError("grpc_port", f"must differ from port ({self.port})")
        try:
            ipaddress.ip_address(self.bind)
        except ValueError:
            raise ConfigError("bind", f"'{self.bind}' is not an IP address (e.g. 127.0.0.1)") from None
        if self.save_path and not self.save_path.endswith(".rrd"):
            raise ConfigError("save_path", f"'{self.save_path}' must end with .rrd")


class ViewerNode(ReleasingLifecycleNode):
    """Thin lifecycle shell: the viewer's server and recording at configure, the stack's topics into the mapping
    while active."""

    def __init__(self, **kwargs) -> None:
        super().__init__("brace_viewer", **kwargs)
        declare_parameters(self, ViewerConfig, enforce_ranges=False)   # checked at configure (read_config)
        self.config: Optional[ViewerConfig] = None
        self.server: Optional[ViewerServer] = None
        self.recording: Optional[rr.RecordingStream] = None
        self.mapping: Optional[ViewMapping] = None
        self._eye_set = False      # the blueprint with the eye on the scene was sent (once per configure)
        self.inputs = CountedInputs()
        self.active = False
        self.group = MutuallyExclusiveCallbackGroup()   # one message at a time into the mapping
        self._receive_clock = Clock(clock_type=ClockType.SYSTEM_TIME)   # as the recorder stamps a bag
        self.diag_pub = self.create_publisher(DiagnosticArray, names.DIAGNOSTICS, qos.DIAGNOSTICS)
        period = self.get_parameter("diagnostics_period_s").value
        steady_timer(self, period if isinstance(period, float) and 0.05 <= period <= 3600.0 else 1.0,
                     self.publish_diagnostics, self.group)

    @property
    def url(self) -> str:
        """What a person opens in a browser ('' before configure)."""
        return self.server.url if self.server is not None else ""

    # ------------------------------------------------------------------ lifecycle

    @serialized
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Validate the parameters, start the viewer's server and the recording, subscribe to the stack's topics."""
        cfg = self.read_parameters(ViewerConfig)
        if cfg is None:
            return TransitionCallbackReturn.FAILURE
        try:
            self.server = ViewerServer(cfg.grpc_port, cfg.port, host=cfg.bind,
                                       memory_limit=f"{cfg.memory_limit_mib}MiB").wait()
        except ViewerError as exc:
            self.last_error = f"configure failed: {exc} (is port {cfg.port} or {cfg.grpc_port} taken?)"
            self.get_logger().error(self.last_error)
            self.server = None
            return TransitionCallbackReturn.FAILURE
        self.config, self.state_label = cfg, "inactive"
        self.recording = rr.RecordingStream(APPLICATION_ID, recording_id=f"{self.get_name()}_{time.strftime('%Y%m%d_%H%M%S')}")
        sinks: list[Any] = [rr.GrpcSink(self.server.grpc_url)]
        if cfg.save_path:
            sinks.append(rr.FileSink(cfg.save_path))
        self.recording.set_sinks(*sinks, default_blueprint=blueprint(live=True))
        self.mapping = ViewMapping(self.recording)
        self._eye_set = False
        for topic in ViewMapping.TOPICS:
            type_name, profile = TOPICS[topic]
            self.configured(self.inputs.subscribe(
                self, message_class(type_name), topic, lambda msg, t=topic: self.on_message(t, msg), topic,
                qos.INPUTS if profile is qos.EVENTS else profile, callback_group=self.group))
        self.get_logger().info(f"viewer: {self.url}")
        return TransitionCallbackReturn.SUCCESS

    @serialized
    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Show what arrives."""
        self.active, self.state_label = True, "active"
        return super().on_activate(state)

    @serialized
    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop showing (the viewer keeps what it has)."""
        self.active, self.state_label = False, "inactive"
        return super().on_deactivate(state)

    def _release(self) -> None:
        """Cleanup and shutdown: finish the recording, stop the server (the base destroys the subscriptions)."""
        self.active = False
        if self.recording is not None:
            try:        # a server that died would hold an unbounded flush forever
                self.recording.flush(timeout_sec=FLUSH_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 (rerun raises its own error on a timeout)
                self.get_logger().warn(f"the viewer's recording did not flush: {exc}")
            self.recording.disconnect()
        if self.server is not None:
            self.server.stop()
        self.recording, self.mapping, self.server, self.config = None, None, None, None

    def destroy_node(self) -> None:
        """Stop the viewer's server (a child process) before the node goes."""
        if getattr(self, "server", None) is not None:   # a constructor stopped half way has none
            self._release()
        super().destroy_node()

    # ------------------------------------------------------------------ messages and monitoring

    @serialized
    def on_message(self, topic: str, msg: Any) -> None:
        """One message of `topic` into the mapping, at its arrival time (nothing while inactive)."""
        if self.active and self.mapping is not None:
            self.mapping.add(topic, msg, self._receive_clock.now().nanoseconds)
            if not self._eye_set:   # once: a person may move the eye after it
                eye, poseless = self.mapping.eye(), self.mapping.poseless()
                if eye is not None or poseless:
                    self._eye_set = True
                    self.recording.send_blueprint(blueprint(live=True, eye=eye, graph_first=poseless))

    @serialized
    def publish_diagnostics(self) -> None:
        """State, URL, messages shown and malformed per topic; ERROR when the viewer's server has stopped."""
        health = Health({"state": self.state_label, "url": self.url}) + self.inputs.health()
        if self.mapping is not None:
            health = health + self.mapping.health()
        if self.server is not None and self.server.process.poll() is not None:
            health = health + Health(errors=(f"the viewer's server exited ({self.server.process.returncode})",))
        elif self.last_error and self.config is None:
            health = health + Health(errors=(self.last_error,))
        self.diag_pub.publish(health_array(f"{self.get_name()}: viewer", health, self.get_clock().now().to_msg()))


def main(args=None) -> int:
    """`ros2 run brace_audit brace_viewer` (autostart by default; the URL is logged at configure)."""
    return spin_node(ViewerNode, "brace_viewer", args)


if __name__ == "__main__":
    sys.exit(main())
