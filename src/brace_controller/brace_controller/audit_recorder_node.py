"""audit_recorder node: records every /brace/* topic into a rosbag2 directory in MCAP storage.

Subscribes  the topics in `topics` (default: every /brace/* topic and /clock), as serialized
            messages with each topic's QoS (best-effort topics best-effort, plans latched)
Writes      `output_dir`: metadata.yaml + <name>_0.mcap, readable by `ros2 bag info/play`,
            Foxglove and the rosbags / mcap readers
Publishes   /diagnostics

The bag is finished (MCAP summary written, metadata.yaml written) on shutdown,
SIGINT or SIGTERM, so nothing received is lost; chunks are small (`chunk_kb`)
so a killed recorder leaves a readable prefix (see `brace-audit report`).
"""

from __future__ import annotations

import importlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node
from rclpy.qos import QoSProfile

from . import qos
from .bag import BagWriter
from .config import ConfigError, check_fields, param
from .ros_params import declare_config
from .spin import spin_node

# topic -> (type, QoS the publishers offer)
TOPICS: dict[str, tuple[str, QoSProfile]] = {
    "/brace/triggers": ("brace_msgs/msg/TriggerEvent", qos.EVENTS),
    "/brace/decisions": ("brace_msgs/msg/ReplanDecision", qos.EVENTS),
    "/brace/replan_calls": ("brace_msgs/msg/ReplanCall", qos.EVENTS),
    "/brace/plan": ("brace_msgs/msg/Plan", qos.PLANS),
    "/brace/context": ("brace_msgs/msg/ContextEntry", qos.EVENTS),
    "/brace/agent_states": ("brace_msgs/msg/AgentState", qos.STATE),
    "/brace/outcomes": ("brace_msgs/msg/ExecutionOutcome", qos.EVENTS),
    "/brace/verdicts": ("brace_msgs/msg/VerifierVerdict", qos.EVENTS),
    "/brace/episode": ("brace_msgs/msg/Episode", qos.EVENTS),
    "/brace/controller_state": ("brace_msgs/msg/ControllerState", qos.STATE),
    "/brace/markers": ("visualization_msgs/msg/MarkerArray", QoSProfile(depth=10)),
    "/clock": ("rosgraph_msgs/msg/Clock", QoSProfile(depth=10)),
}


def qos_yaml(profile: QoSProfile) -> str:
    """The offered_qos_profiles entry rosbag2 writes for a topic."""
    return (f"- history: {int(profile.history)}\n  depth: {profile.depth}\n"
            f"  reliability: {int(profile.reliability)}\n  durability: {int(profile.durability)}\n")


def message_class(type_name: str) -> type:
    """The Python class of 'pkg/msg/Name'."""
    pkg, kind, name = type_name.split("/")
    return getattr(importlib.import_module(f"{pkg}.{kind}"), name)


@dataclass
class RecorderConfig:
    """Parameters of audit_recorder."""

    output_dir: str = param("", "bag directory to create (must not exist or be empty); '' = ./brace_audit_<time>")
    topics: list[str] = param(list(TOPICS), "topics to record (each must be one of the known BRACE topics)")
    chunk_kb: int = param(64, "MCAP chunk size (KiB): what a killed recorder can lose at most", 1, 1 << 20)

    def validate(self) -> None:
        """ConfigError naming the first invalid parameter."""
        check_fields(self)
        unknown = [t for t in self.topics if t not in TOPICS]
        if unknown:
            raise ConfigError("topics", f"unknown topic(s) {unknown}; known: {sorted(TOPICS)}")
        if not self.topics:
            raise ConfigError("topics", "nothing to record")


class AuditRecorderNode(Node):
    """Serialized subscriptions -> BagWriter."""

    def __init__(self, **kwargs) -> None:
        super().__init__("audit_recorder", **kwargs)
        self.writer: Optional[BagWriter] = None  # none when configuration fails: shutdown must still work
        self.config = declare_config(self, RecorderConfig)
        out = self.config.output_dir or f"brace_audit_{time.strftime('%Y%m%d_%H%M%S')}"
        try:
            self.writer = BagWriter(Path(out), chunk_size=self.config.chunk_kb * 1024)
        except (OSError, RuntimeError) as exc:
            raise ConfigError("output_dir", str(exc)) from None
        self.path = self.writer.directory
        for topic in self.config.topics:
            type_name, profile = TOPICS[topic]
            self.writer.add_topic(topic, type_name, qos_yaml(profile))
            self.create_subscription(message_class(type_name), topic,
                                     lambda data, t=topic: self.on_message(t, data), profile, raw=True)
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", qos.DIAGNOSTICS)
        self.create_timer(1.0, self.publish_diagnostics)
        self.get_logger().info(f"recording {len(self.config.topics)} topics to {self.path}")

    def on_message(self, topic: str, data: bytes) -> None:
        """Append one serialized message, stamped with its receive time."""
        if self.writer is not None and not self.writer.closed:
            self.writer.write(topic, data, self.get_clock().now().nanoseconds)

    def close(self) -> None:
        """Finish the bag (idempotent)."""
        if self.writer is not None and not self.writer.closed:
            self.writer.close()
            total = sum(t.count for t in self.writer.topics.values())
            self.get_logger().info(f"bag {self.path} closed: {total} messages")

    def destroy_node(self) -> None:
        """Close the bag, then destroy the node."""
        self.close()
        super().destroy_node()

    def publish_diagnostics(self) -> None:
        """Messages recorded per topic on /diagnostics."""
        status = DiagnosticStatus(name=f"{self.get_name()}: audit bag", hardware_id="brace",
                                  level=DiagnosticStatus.OK, message=str(self.path))
        status.values = [KeyValue(key=t, value=str(i.count)) for t, i in self.writer.topics.items()]
        array = DiagnosticArray(status=[status])
        array.header.stamp = self.get_clock().now().to_msg()
        self.diag_pub.publish(array)


def main(args=None) -> int:
    """`ros2 run brace_controller audit_recorder`; the bag is finished on SIGINT / SIGTERM."""
    return spin_node(AuditRecorderNode, "audit_recorder", args, on_exit=AuditRecorderNode.close)


if __name__ == "__main__":
    sys.exit(main())
