"""twin_world node: PickFruit or PushT episodes on the PiPER CAN twin, with the twin's /act stand-in for OpenVLA.

Publishes episode, context, world_state, the rendered <camera_name> colour and depth with camera_info, and
/diagnostics; takes plan and outcomes. The twin, the table and the episode's state live in twin_rig; topics, faults
and episodes: docs/piper_twin.md ("twin_world") and docs/nodes.md.
"""

from __future__ import annotations

import os
import sys

from brace_msgs.msg import ExecutionOutcome, Plan
from rclpy.node import Node

from brace_common import names
from brace_common.clock import steady_timer
from brace_common.counters import Health
from brace_common.params import declare_config, reject_undeclared
from brace_common.spin import spin_node
from brace_common.validation import shorten
from brace_common.vocabulary import Block, EntryKind
from brace_common.world_node import WorldNode

from ..orbbec.calibration import load_calibration
from .camera_publisher import TwinCamera
from .twin_rig import TwinRig
from .twin_world_config import TwinWorldConfig


class TwinWorldNode(WorldNode, Node):
    """Thin rclpy shell around TwinRig: the CAN twin, the task's world and the /act stand-in."""

    world_name = "pickfruit"   # the instance's: its task's
    ends_with_process = False  # the twin and the /act stand-in stay up until the process ends (end_with_process)

    def __init__(self, **kwargs) -> None:
        super().__init__("twin_world", **kwargs)
        self.config = declare_config(self, TwinWorldConfig)
        reject_undeclared(self)
        cfg = self.config
        self.rig = TwinRig(cfg)
        self.task = self.rig.task
        self.world_name = self.task.name
        self.camera = TwinCamera(self, cfg.camera_name, load_calibration(cfg.camera_calibration), cfg.seed) \
            if cfg.camera_name else None
        self.rig.start()
        self.get_logger().info(f"{self.task.name} on the CAN twin on {cfg.can_interface}:{cfg.can_port}; /act stand-in "
                               f"at {self.rig.act.url}; the executor's locations: {', '.join(self.task.locations)}")

        self.init_world(("context", "episode", "diagnostics", "world_states", "world_info"), cfg.episodes, cfg.seed)
        self.subscribe_plans(self.on_plan)
        self.subscribe_monitor_states()
        self.inputs.subscribe(self, ExecutionOutcome, names.OUTCOMES, self.on_outcome, "outcome")
        self.wait_for_peers(cfg)
        self.timer = steady_timer(self, cfg.period_s, self.tick)
        if self.camera is not None:
            steady_timer(self, cfg.camera_period_s, self.publish_frame)
        steady_timer(self, 1.0, self.publish_diagnostics)

    # The rig's parts, for callers and tests: they live in TwinRig.
    world = property(lambda self: self.rig.world, doc="The task's table world.")
    twin = property(lambda self: self.rig.twin, doc="The CAN twin of the arm.")
    policy = property(lambda self: self.rig.policy, doc="The /act stand-in's policy.")
    counts = property(lambda self: self.rig.counts, doc="The twin world's event counters.")
    started_at = property(lambda self: self.rig.started_at, doc="When the episode started (None between episodes).")

    # ------------------------------------------------------------------ inputs

    def on_plan(self, msg: Plan) -> None:
        """Count the plans of this episode for the arm (the /act stand-in starts over on an instruction anew)."""
        if msg.agent_id == self.config.agent_id and self.rig.started_at is not None:
            self.book.count_plan()
            self.rig.plan([(step.action, step.parameters_json) for step in msg.steps], msg.trigger_kind)
            self._publish_world_state()

    def on_outcome(self, msg: ExecutionOutcome) -> None:
        """Count failed steps by category."""
        if msg.agent_id != self.config.agent_id or self.rig.started_at is None:
            return
        known = self.rig.outcome(msg.action, msg.success, msg.failure)
        self._publish_world_state()
        if not known:
            self.get_logger().warning(f"outcome with unknown failure {msg.failure} ({shorten(msg.detail)})",
                                      throttle_duration_sec=5.0)

    # ------------------------------------------------------------------ the episode loop

    def progress(self) -> str:
        """Where the run is ('episode e/N t s'): brace-run's progress line."""
        return f"{self.book.progress()} {self.rig.elapsed():5.1f} s"

    def tick(self) -> None:
        """Wait for the peers, start an episode, publish scene changes, or close the episode."""
        if self.done:
            return
        if self.peers.waiting(self.rig.counts, self.get_logger()):
            return
        if self.rig.started_at is None:
            self.start_episode()
            return
        self._publish_scene_changes()
        elapsed = self.rig.over()
        if elapsed is not None:
            self.end_episode(elapsed)

    def start_episode(self) -> None:
        """Reset the table and the arm (home, gripper open), announce the episode, publish the task and the scene."""
        self.announce_start()
        for name in self.rig.start_episode(self.book.seed):
            self.publish_entry(self.config.agent_id, Block.TASK, EntryKind.TASK, self.task.task_text(name))
        self.publish_entry(self.config.agent_id, Block.CONSTRAINTS, EntryKind.CONSTRAINT, self.task.skills_text)
        self._publish_scene_changes()

    def end_episode(self, elapsed: float) -> None:
        """Publish the verdict; stop after the last episode."""
        failures = {k: v for k, v in self.rig.failures.items() if v}
        result = self.rig.end_episode(elapsed, self.episode, self.book.seed, self.plans)
        last = self.announce_end(result)
        self.get_logger().info(f"episode {self.episode}: success={result.success} {elapsed:.1f} s plans={self.plans} "
                               f"{vars(self.world.counts)} failures={failures}")
        if last:
            self.timer.cancel()

    # ------------------------------------------------------------------ outputs

    def _publish_world_state(self) -> None:
        self.publish_state(self.rig.world_state(self.episode), "base_link")

    def _publish_scene_changes(self) -> None:
        scene = self.rig.tick()
        self._publish_world_state()
        if scene is not None:
            self.publish_entry(self.config.agent_id, Block.STATE, EntryKind.OBSERVATION, self.task.scene_text(scene))

    def publish_frame(self) -> None:
        """Render the front camera from the twin's state and publish colour, depth and their camera_info."""
        self.camera.publish(self.rig.render())

    def num_agents(self) -> int:
        """One arm."""
        return 1

    def world_agents(self) -> list[str]:
        """The arm. The world has no action schema of its own (world_schema: None, WorldInfo's is empty): the
        arm's skills are the robot stack's, named by the planner's action_schema_file."""
        return [self.config.agent_id]

    def publish_diagnostics(self) -> None:
        """Episode, twin state, /act server and counts on /diagnostics (also while the node shuts down: the server
        may have stopped already)."""
        health = Health({"episode": self.episode}) + self.rig.health() + \
            (self.camera.health() if self.camera is not None else Health()) + self.inputs.health()
        self.publish_world_health(f"{self.task.name} on the PiPER twin", health + Health(errors=tuple(self.peer_errors())))

    def close(self) -> None:
        """Stop the /act server and the twin (idempotent; also after a constructor that failed half way)."""
        if getattr(self, "rig", None) is not None:
            self.rig.close()

    def destroy_node(self) -> None:
        """Stop the /act server and the twin (unless they end with the process: `end_with_process`), then the
        node."""
        if not self.ends_with_process:
            self.close()
        super().destroy_node()

    def end_with_process(self) -> None:
        """Leave the twin and the /act stand-in up until the process ends (their threads are daemons)."""
        self.ends_with_process = True


def main(args=None) -> int:
    """`ros2 run robot_bridge twin_world`; with `shutdown_when_done` it exits after the last episode.

    Then the twin and the /act stand-in end with the process, and the process ends at once (os._exit) once the node
    is destroyed and its context shut down: Python and rclpy take ~0.3 s more to tear a process down, and the arm
    node and the executor would see the twin vanish in that time (can_silent, /act unreachable) before the launch,
    told by this exit, stops them. On a signal every node stops at the same time: the twin is stopped here.
    """
    nodes: list[TwinWorldNode] = []

    def build() -> TwinWorldNode:
        nodes.append(TwinWorldNode())
        return nodes[-1]

    def finish(node: TwinWorldNode) -> None:
        if node.done and node.config.shutdown_when_done:
            node.end_with_process()
        else:
            node.close()

    code = spin_node(build, "twin_world", args, on_exit=finish,
                     until=lambda node: node.done and node.config.shutdown_when_done)
    if nodes and nodes[0].ends_with_process:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
