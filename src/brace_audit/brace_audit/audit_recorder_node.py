"""audit_recorder node: records every /brace/* topic into a rosbag2 directory in MCAP storage (what a killed
recorder keeps: docs/nodes.md, "audit_recorder")."""

from __future__ import annotations

import importlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.clock import Clock, ClockType
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import QoSProfile

from brace_common import names, qos
from brace_common.clock import steady_timer
from brace_common.config import ConfigError, check_fields, param
from brace_common.counted_inputs import CountedInputs
from brace_common.counters import Health
from brace_common.diagnostics import health_array
from brace_common.params import declare_config, reject_undeclared
from brace_common.spin import spin_node

from .bag import BagWriter, qos_profile_dict

DRAIN_PASSES = 10_000
"""The most callbacks a stopping recorder runs to write what already arrived (bounds a graph that keeps talking)."""
DRAIN_IDLE = 3
"""Passes in a row that write nothing before a stopping recorder's drain ends."""

# topic (as the nodes name it) -> (type, QoS the publishers offer)
TOPICS: dict[str, tuple[str, QoSProfile]] = {
    names.TRIGGERS: ("brace_msgs/msg/TriggerEvent", qos.EVENTS),
    names.DECISIONS: ("brace_msgs/msg/ReplanDecision", qos.EVENTS),
    names.REPLAN_CALLS: ("brace_msgs/msg/ReplanCall", qos.EVENTS),
    names.PLAN: ("brace_msgs/msg/Plan", qos.PLANS),
    names.CONTEXT: ("brace_msgs/msg/ContextEntry", qos.EVENTS),
    names.AGENT_STATES: ("brace_msgs/msg/AgentState", qos.STATE),
    names.OUTCOMES: ("brace_msgs/msg/ExecutionOutcome", qos.EVENTS),
    names.VERDICTS: ("brace_msgs/msg/VerifierVerdict", qos.EVENTS),
    names.EPISODE: ("brace_msgs/msg/Episode", qos.EVENTS),
    names.WORLD_STATE: ("brace_msgs/msg/WorldState", qos.WORLD_STATE),
    names.WORLD_INFO: ("brace_msgs/msg/WorldInfo", qos.WORLD_INFO),
    names.CONTROLLER_STATE: ("brace_msgs/msg/ControllerState", qos.STATE),
    names.SERVER_LOAD: ("brace_msgs/msg/ServerLoad", qos.STATE),
    names.MARKERS: ("visualization_msgs/msg/MarkerArray", qos.MARKERS),
    names.COLLISION_MONITOR_STATE: ("brace_msgs/msg/CollisionMonitorState", qos.EVENTS),
    names.CLOCK: ("rosgraph_msgs/msg/Clock", qos.CLOCK),
}


def qos_profiles(profile: QoSProfile) -> list[dict]:
    """The offered_qos_profiles entry rosbag2 writes for a topic (every key, as metadata version 9 spells them)."""
    return [qos_profile_dict(profile.history.name.lower(), profile.depth, profile.reliability.name.lower(),
                             profile.durability.name.lower())]


def message_class(type_name: str) -> type:
    """The Python class of 'pkg/msg/Name'."""
    pkg, kind, name = type_name.split("/")
    return getattr(importlib.import_module(f"{pkg}.{kind}"), name)


@dataclass
class RecorderConfig:
    """Parameters of audit_recorder."""

    output_dir: str = param("", "bag directory to create (must not exist or be empty); '' = ./brace_audit_<time>")
    topics: list[str] = param(list(TOPICS), "topics to record, as the nodes name them (each one of the stack's "
                              "topics; relative ones resolve in this node's namespace)")
    chunk_kb: int = param(64, "MCAP chunk size (KiB): a killed recorder loses at most one chunk", 1, 1 << 20)
    metadata_period_s: float = param(1.0, "how often the chunk in progress is written out and metadata.yaml "
                                     "rewritten (s): a killed recorder loses at most the messages of one period",
                                     0.1, 3600.0)

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
        self.flushed = 0  # messages in the file as of the last write_metadata()
        self._metadata_written = False
        self.config = declare_config(self, RecorderConfig)
        reject_undeclared(self)
        # Receive times are system time, as rosbag2 records them, whether or not the stack runs on /clock
        # (a simulator holding its clock while planning would put a whole step's messages at one instant).
        self._receive_clock = Clock(clock_type=ClockType.SYSTEM_TIME)
        out = self.config.output_dir or f"brace_audit_{time.strftime('%Y%m%d_%H%M%S')}"
        try:
            self.writer = BagWriter(Path(out), chunk_size=self.config.chunk_kb * 1024)
        except (OSError, RuntimeError) as exc:
            raise ConfigError("output_dir", str(exc)) from None
        self.path = self.writer.directory
        self.inputs = CountedInputs()  # what never reached the bag, per topic
        for topic in self.config.topics:
            type_name, profile = TOPICS[topic]
            resolved = self.resolve_topic_name(topic)
            self.writer.add_topic(resolved, type_name, qos_profiles(profile))
            self.inputs.subscribe(self, message_class(type_name), topic, lambda data, t=resolved: self.on_message(t, data),
                                  topic.strip("/"), qos.INPUTS if profile is qos.EVENTS else profile, raw=True)
        self.diag_pub = self.create_publisher(DiagnosticArray, names.DIAGNOSTICS, qos.DIAGNOSTICS)
        steady_timer(self, 1.0, self.publish_diagnostics)
        steady_timer(self, self.config.metadata_period_s, self.write_metadata)
        self.get_logger().info(f"recording {len(self.config.topics)} topics to {self.path}")

    def on_message(self, topic: str, data: bytes) -> None:
        """Append one serialized message, stamped with its receive time."""
        if self.writer is not None and not self.writer.closed:
            self.writer.write(topic, data, self._receive_clock.now().nanoseconds)

    def write_metadata(self) -> None:
        """Write out the chunk in progress and rewrite metadata.yaml (what a killed recorder keeps), unless nothing
        arrived since the last time (an idle graph costs the recorder nothing)."""
        if self.writer is not None and not self.writer.closed:
            total = self.writer.total
            if total == self.flushed and self._metadata_written:
                return
            self.writer.write_metadata()
            self.flushed, self._metadata_written = total, True

    def drain(self) -> None:
        """Write what arrived but was not taken before the spin stopped (an END published just before the stop):
        spin the node alone until DRAIN_IDLE passes in a row write nothing (a timer's pass writes nothing either),
        at most DRAIN_PASSES."""
        if self.writer is None or self.writer.closed or not self.context.ok():
            return
        executor = SingleThreadedExecutor(context=self.context)
        executor.add_node(self)
        try:
            idle = 0
            for _ in range(DRAIN_PASSES):
                before = self.writer.total
                executor.spin_once(timeout_sec=0.0)
                idle = idle + 1 if self.writer.total == before else 0
                if idle == DRAIN_IDLE:
                    break
        finally:
            executor.remove_node(self)
            executor.shutdown()

    def finish(self) -> None:
        """The recorder's end: what already arrived is written, then the bag is finished."""
        self.drain()
        self.close()

    def close(self) -> None:
        """Finish the bag (idempotent; also for a node whose constructor stopped half way)."""
        writer = getattr(self, "writer", None)
        if writer is not None and not writer.closed:
            writer.close()
            self.get_logger().info(f"bag {self.path} closed: {writer.total} messages")

    def destroy_node(self) -> None:
        """Close the bag, then destroy the node."""
        self.close()
        super().destroy_node()

    def publish_diagnostics(self) -> None:
        """Messages recorded per topic, and how many of them are written out, on /diagnostics."""
        recorded = self.writer.health() if self.writer is not None else Health()
        health = recorded + Health({"written_out": self.flushed}) + self.inputs.health()
        self.diag_pub.publish(health_array(f"{self.get_name()}: audit bag", health, self.get_clock().now().to_msg(),
                                           message=str(self.path)))


def main(args=None) -> int:
    """`ros2 run brace_audit audit_recorder`; the bag is finished on SIGINT / SIGTERM, also one that comes while
    the node is being built (its first subscriptions may already have taken messages in)."""
    return spin_node(AuditRecorderNode, "audit_recorder", args, on_exit=AuditRecorderNode.finish,
                     interrupt_start=False)


if __name__ == "__main__":
    sys.exit(main())
