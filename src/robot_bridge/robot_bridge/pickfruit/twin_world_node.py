"""twin_world node: PickFruit episodes on the PiPER CAN twin, with the twin's /act stand-in for OpenVLA.

The world of the real-robot graph without hardware. It runs, in one process,
the CAN-level twin of the arm (the piper_arm node talks to it over
`can_interface` / `can_port` through the real piper_sdk), the PickFruit table
beside it (robot_bridge.pickfruit.pickfruit_world: the twin's gripper closes on a fruit,
grasps slip on the carry) and an HTTP server speaking the OpenVLA deploy
server's `POST /act` whose answers steer the tool toward the instructed fruit
or bowl (the protocol-level stand-in for the 7B model; the executor calls it
as it would call the real server).

Names are relative (the stack's namespace comes from launch).

Publishes   episode (Episode: start / end with the verdict), context (ContextEntry: the task, the scene after
            every grasp, slip or release), world_state (WorldState: arm, fruits, bowl, tasks; every `period_s`
            tick and on a plan or an outcome; the arm's step as far as plans and outcomes tell), /diagnostics
Subscribes  plan (Plan: counted per episode), outcomes (ExecutionOutcome: failure categories per episode)

Readiness: the first episode starts once the nodes in `wait_for_nodes` are in
the graph and the `replan_action` server answers (any start order).

An episode ends when every fruit of the task is in the bowl (success) or after
`max_duration_s`. Between episodes the fruits are reset (seeded); the arm
starts the next episode where it is, as a real arm would.

Parameters: see TwinWorldConfig (config/twin_world.yaml, docs/parameters.md).
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import Optional

from brace_msgs.action import Replan
from brace_msgs.msg import ContextEntry, Episode, ExecutionOutcome, Plan, WorldState
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.action import ActionClient
from rclpy.node import Node

from brace_common import names, qos
from brace_common.clock import steady_timer
from brace_common.config import ConfigError, check_agent_ids, param
from brace_common.counted_inputs import CountedInputs
from brace_common.diagnostics import diagnostic_array, nonzero
from brace_common.episode import EpisodeResult, episode_msg
from brace_common.params import declare_config, reject_undeclared
from brace_common.readiness import PeerWait
from brace_common.spin import spin_node
from brace_common.validation import shorten
from brace_common.vocabulary import Block, EntryKind, EpisodeEvent, Failure
from brace_common.world_state import PlanProgress, StatePublication, world_state_msg

from ..openvla.act_server import ActServer
from ..piper.piper_twin import PiperTwin, TwinConfig
from .pickfruit_world import (
    HOME_JOINTS,
    SKILLS_TEXT,
    WORLD,
    PickFruitConfig,
    PickFruitWorld,
    TwinPolicy,
    episode_metrics,
    scene_text,
    task_text,
    world_state,
)


@dataclass
class TwinWorldConfig:
    """Parameters of the twin_world node."""

    can_port: str = param("piper_twin", "CAN channel the twin answers on (a udp_multicast group across processes)")
    can_interface: str = param("virtual", "python-can interface of the twin: 'virtual' (one process: brace-run) or "
                                          "'udp_multicast' (separate processes: launch)")
    agent_id: str = param("arm_0", "agent id of the arm (context entries, plans counted)")
    episodes: int = param(3, "episodes to run", 1, 100000)
    seed: int = param(0, "seed of episode 0 (episode e uses seed + e)", 0, 2**31 - 1)
    tasks: int = param(1, "fruits to put in the bowl per episode", 1, 3)
    slip_probability: float = param(0.35, "probability that a grasp slips on the carry", 0.0, 1.0)
    twin_rate_hz: float = param(200.0, "the twin's feedback frames per second (the real arm's: 200)", 1.0, 1000.0)
    max_duration_s: float = param(60.0, "an episode that has not succeeded by then fails", 1.0, 3600.0)
    act_host: str = param("127.0.0.1", "address of the /act stand-in server")
    act_port: int = param(8765, "port of the /act stand-in server (0 = any free port)", 0, 65535)
    variant: str = param("", "the run's variant label, copied into Episode messages")
    period_s: float = param(0.1, "how often the episode is judged (s)", 0.01, 1.0)
    shutdown_when_done: bool = param(False, "exit the node's process after the last episode")
    wait_for_nodes: list[str] = param([], "nodes (in this namespace) that must be up before the first episode")
    replan_action: str = param("replan", "Replan action that must answer before the first episode ('' = none)")
    wait_settle_s: float = param(1.0, "the graph must have been complete this long", 0.0, 60.0)
    wait_timeout_s: float = param(120.0, "diagnostics ERROR after waiting this long for peers", 1.0, 3600.0)

    def validate(self) -> None:
        """ConfigError naming the first invalid parameter."""
        if not self.can_port:
            raise ConfigError("can_port", "must not be empty")
        if self.can_interface not in ("virtual", "udp_multicast", "socketcan"):
            raise ConfigError("can_interface", f"'{self.can_interface}' is not virtual, udp_multicast or socketcan")
        check_agent_ids("agent_id", self.agent_id)


class TwinWorldNode(Node):
    """Thin rclpy shell around the CAN twin, the PickFruit world and the /act stand-in."""

    def __init__(self, **kwargs) -> None:
        super().__init__("twin_world", **kwargs)
        self.config = declare_config(self, TwinWorldConfig)
        reject_undeclared(self)
        cfg = self.config
        self.world = PickFruitWorld(PickFruitConfig(tasks=cfg.tasks, slip_probability=cfg.slip_probability))
        self.twin = PiperTwin(cfg.can_port, cfg.can_interface,
                              TwinConfig(rate_hz=cfg.twin_rate_hz, initial_joints=list(HOME_JOINTS), initial_gripper=0.07),
                              grasp=lambda state: self.world.grasp(tuple(state.end_pose[:3]), state.gripper_m))
        self.policy = TwinPolicy(self.world, tool=lambda: tuple(self.twin.state().end_pose[:3]))
        self.act = ActServer(self.policy, host=cfg.act_host, port=cfg.act_port)
        self.twin.start()
        self.act.start()
        self.get_logger().info(f"CAN twin on {cfg.can_interface}:{cfg.can_port}; /act stand-in at {self.act.url}")

        self.episode = -1
        self.done = False
        self.results: list[EpisodeResult] = []
        self.started_at: Optional[float] = None
        self.plans = 0
        self.failures: Counter = Counter()
        self.scene: list[str] = []
        self.counts = {"plans": 0, "outcomes": 0, "failed_outcomes": 0, "ticks_waiting_for_peers": 0}

        self.context_pub = self.create_publisher(ContextEntry, names.CONTEXT, qos.EVENTS)
        self.episode_pub = self.create_publisher(Episode, names.EPISODE, qos.EVENTS)
        self.diag_pub = self.create_publisher(DiagnosticArray, names.DIAGNOSTICS, qos.DIAGNOSTICS)
        self.world_state_pub = self.create_publisher(WorldState, names.WORLD_STATE, qos.WORLD_STATE)
        self.world_states, self.progress, self.state_step = StatePublication(), PlanProgress(cfg.agent_id), 0
        self.create_subscription(Plan, names.PLAN, self.on_plan, qos.PLANS)
        self.inputs = CountedInputs()
        self.inputs.subscribe(self, ExecutionOutcome, names.OUTCOMES, self.on_outcome, "outcome")
        actions = {cfg.replan_action: ActionClient(self, Replan, cfg.replan_action)} if cfg.replan_action else {}
        self.peers = PeerWait(self, cfg.wait_for_nodes, actions, cfg.wait_settle_s, cfg.wait_timeout_s)
        self.timer = steady_timer(self, cfg.period_s, self.tick)
        steady_timer(self, 1.0, self.publish_diagnostics)

    # ------------------------------------------------------------------ inputs

    def on_plan(self, msg: Plan) -> None:
        """Count the plans of this episode for the arm."""
        if msg.agent_id == self.config.agent_id and self.started_at is not None:
            self.plans += 1
            self.counts["plans"] += 1
            self.progress.plan((step.action, step.parameters_json) for step in msg.steps)
            self._publish_world_state()

    def on_outcome(self, msg: ExecutionOutcome) -> None:
        """Count failed steps by category."""
        if msg.agent_id != self.config.agent_id or self.started_at is None:
            return
        self.counts["outcomes"] += 1
        self.progress.outcome(msg.action, msg.success)
        self._publish_world_state()
        if not msg.success:
            self.counts["failed_outcomes"] += 1
            try:
                self.failures[Failure(msg.failure).label] += 1
            except ValueError:
                self.get_logger().warning(f"outcome with unknown failure {msg.failure} ({shorten(msg.detail)})",
                                          throttle_duration_sec=5.0)

    # ------------------------------------------------------------------ the episode loop

    def progress(self) -> str:
        """Where the run is ('episode e/N t s'): brace-run's progress line."""
        elapsed = time.monotonic() - self.started_at if self.started_at is not None else 0.0
        return f"episode {max(self.episode, 0) + 1}/{self.config.episodes} {elapsed:5.1f} s"

    def tick(self) -> None:
        """Wait for the peers, start an episode, publish scene changes, or close the episode."""
        if self.done:
            return
        if self.peers.waiting(self.counts, self.get_logger()):
            return
        if self.started_at is None:
            self.start_episode()
            return
        self._publish_scene_changes()
        elapsed = time.monotonic() - self.started_at
        if self.world.success() or elapsed > self.config.max_duration_s:
            self.end_episode(elapsed)

    def start_episode(self) -> None:
        """Reset the fruits, announce the episode, publish the task and the scene."""
        self.episode += 1
        seed = self.config.seed + self.episode
        task = self.world.reset(seed)
        self.plans, self.failures, self.scene = 0, Counter(), []
        self.state_step = -1
        self.progress.clear()
        self.episode_pub.publish(self._episode_msg(EpisodeEvent.START, seed))
        self.started_at = time.monotonic()
        for fruit in task:
            self._entry(Block.TASK, EntryKind.TASK, task_text(fruit))
        self._entry(Block.CONSTRAINTS, EntryKind.CONSTRAINT, SKILLS_TEXT)
        self._publish_scene_changes()

    def end_episode(self, elapsed: float) -> None:
        """Publish the verdict; stop after the last episode."""
        seed = self.config.seed + self.episode
        verdict = episode_metrics(self.world, elapsed, int(elapsed / self.config.period_s), self.failures)
        result = EpisodeResult.of(verdict, self.episode, seed, self.plans)
        self.results.append(result)
        self.episode_pub.publish(self._episode_msg(EpisodeEvent.END, seed, result))
        self.get_logger().info(f"episode {self.episode}: success={result.success} {elapsed:.1f} s plans={self.plans} "
                               f"grasps={self.world.counts.grasps} slips={self.world.counts.slips} "
                               f"failures={dict(self.failures)}")
        self.started_at = None
        if self.episode + 1 >= self.config.episodes:
            self.done = True
            self.timer.cancel()

    # ------------------------------------------------------------------ outputs

    def _publish_world_state(self) -> None:
        twin = self.twin.state()
        state = world_state(self.world, self.episode, max(self.state_step, 0), self.progress.activity(),
                            tuple(twin.end_pose[:3]), twin.gripper_m)
        if self.world_states.due(state):
            self.world_state_pub.publish(world_state_msg(state, self.get_clock().now().to_msg(), "base_link"))

    def _publish_scene_changes(self) -> None:
        self.state_step += 1  # one tick of the episode: a step of its world state
        self._publish_world_state()
        scene = self.world.describe()
        if scene != self.scene:
            self.scene = scene
            self._entry(Block.STATE, EntryKind.OBSERVATION, scene_text(scene))

    def _entry(self, block: Block, kind: EntryKind, text: str) -> None:
        msg = ContextEntry(agent_id=self.config.agent_id, step=0, block=int(block), kind=kind.value, text=text)
        msg.header.stamp = self.get_clock().now().to_msg()
        self.context_pub.publish(msg)

    def _episode_msg(self, event: EpisodeEvent, seed: int, result: Optional[EpisodeResult] = None) -> Episode:
        return episode_msg(event, self.episode, seed, 1, WORLD, self.config.variant,
                           self.get_clock().now().to_msg(), result)

    def publish_diagnostics(self) -> None:
        """Episode, twin state, /act server and counts on /diagnostics."""
        state = self.twin.state()
        values = {"episode": self.episode, "act_url": self.act.url, "twin.enabled": state.enabled,
                  "twin.gripper_m": round(state.gripper_m, 4), **self.counts,
                  **{f"world.{k}": v for k, v in vars(self.world.counts).items()}, **self.inputs.counts}
        errors = self.peers.errors("episodes do not start")
        self.diag_pub.publish(diagnostic_array(f"{self.get_name()}: PickFruit on the PiPER twin", values,
                                               self.get_clock().now().to_msg(),
                                               nonzero(self.inputs.counts, self.inputs.counts), errors))

    def close(self) -> None:
        """Stop the /act server and the twin (idempotent; also after a constructor that failed half way)."""
        for part in (getattr(self, "act", None), getattr(self, "twin", None)):
            if part is not None:
                part.stop()

    def destroy_node(self) -> None:
        """Stop the /act server and the twin, then the node."""
        self.close()
        super().destroy_node()


def main(args=None) -> int:
    """`ros2 run robot_bridge twin_world`; with `shutdown_when_done` it exits after the last episode."""
    return spin_node(TwinWorldNode, "twin_world", args, on_exit=TwinWorldNode.close,
                     until=lambda node: node.done and node.config.shutdown_when_done)


if __name__ == "__main__":
    sys.exit(main())
