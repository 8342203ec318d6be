"""twin_world node: PickFruit or PushT episodes on the PiPER CAN twin, with the twin's /act stand-in for OpenVLA.

The world of the real-robot graph without hardware. It runs, in one process,
the CAN-level twin of the arm (the piper_arm node talks to it over
`can_interface` / `can_port` through the real piper_sdk), the table of `task`
beside it (robot_bridge.pickfruit.pickfruit_world: the twin's gripper closes on
a fruit, grasps slip on the carry; robot_bridge.pusht.pusht_world: the closed
gripper pushes a T block to a goal pose, contacts may be lost) and an HTTP
server speaking the OpenVLA deploy server's `POST /act` whose answers steer the
tool (toward the instructed fruit or bowl; around and against the T block) as
the protocol-level stand-in for the 7B model (the executor calls it as it would
call the real server).

Names are relative (the stack's namespace comes from launch).

Publishes   episode (Episode: start / end with the verdict), context (ContextEntry: the task, the scene after
            every grasp, slip or release, or as the block moves), world_state (WorldState: arm, fruits, bowl or
            block, goal, tasks; every `period_s`
            tick and on a plan or an outcome; the arm's step as far as plans and outcomes tell),
            <camera_name>/color/image_raw (rgb8), <camera_name>/depth/image_raw (16UC1 mm, aligned to colour) and
            both camera_info topics, every `camera_period_s` (sensor QoS, frame <camera_name>_color_optical_frame):
            the table rendered from the twin's state through `camera_calibration` (scene_render), the layout of a
            real Orbbec camera, /diagnostics
Subscribes  plan (Plan: counted per episode), outcomes (ExecutionOutcome: failure categories per episode)

Readiness: the first episode starts once the nodes in `wait_for_nodes` are in
the graph and the `replan_action` server answers (any start order).

Faults for the visual verifier: `slip_probability` (a grasp slips on the carry), `hand_probability` (a hand takes
the task's fruit away during the approach, in view of the camera) and `phantom_probability` (a grasp closes at the
fruit's width holding nothing); PushT's `contact_loss_probability` (the fingertips ride over the block's edge).

An episode ends when the task is done (every fruit of the task in the bowl; the
T block within the goal's tolerances) or after `max_episode_s`. Between
episodes the table is reset (seeded) and the arm is put back at its home joints
with the gripper open: a twin arm left where an episode ended drifts, episode
after episode, into joint configurations from which its IK reaches nothing
nearby (each end-pose command keeps the measured orientation, which joint-space
moves turn a little).

Parameters: see TwinWorldConfig (config/twin_world.yaml, docs/parameters.md).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Optional

from brace_msgs.msg import ExecutionOutcome, Plan
from rclpy.node import Node

from brace_common import names
from brace_common.clock import steady_timer
from brace_common.config import ConfigError, ReadinessConfig, check_agent_ids, param
from brace_common.counters import Counters, Health
from brace_common.episode import EpisodeResult
from brace_common.params import declare_config, reject_undeclared
from brace_common.plan_start import PlanStart, plan_start
from brace_common.spin import spin_node
from brace_common.validation import shorten
from brace_common.vocabulary import Block, EntryKind, Failure
from brace_common.world_node import WorldNode
from brace_common.world_state import PlanProgress

from ..openvla.act_server import ActServer
from ..orbbec.calibration import load_calibration
from ..orbbec.camera_config import NAME_PATTERN
from ..piper.piper_twin import PiperTwin, TwinConfig
from ..pusht.pusht_world import PushTConfig, PushTWorld
from ..twin_task import TASKS, TwinTask
from .camera_publisher import TwinCamera
from .pickfruit_world import HOME_GRIPPER_M, HOME_JOINTS, PickFruitConfig, PickFruitWorld


@dataclass
class TwinWorldConfig(ReadinessConfig):
    """Parameters of the twin_world node."""

    can_port: str = param("piper_twin", "CAN channel the twin answers on (a udp_multicast group across processes)")
    can_interface: str = param("virtual", "python-can interface of the twin: 'virtual' (one process: brace-run) or "
                                          "'udp_multicast' (separate processes: launch)")
    agent_id: str = param("arm_0", "agent id of the arm (context entries, plans counted)")
    task: str = param("pickfruit", "the task on the table: 'pickfruit' (fruits into the bowl) or 'pusht' (the T "
                      "block onto the goal)")
    episodes: int = param(3, "episodes to run", 1, 100000)
    seed: int = param(0, "seed of episode 0 (episode e uses seed + e)", 0, 2**31 - 1)
    tasks: int = param(1, "fruits to put in the bowl per episode", 1, 3)
    slip_probability: float = param(0.35, "probability that a grasp slips on the carry", 0.0, 1.0)
    hand_probability: float = param(0.0, "probability per episode that a hand takes the task's fruit away as the "
                                    "tool comes near it", 0.0, 1.0)
    phantom_probability: float = param(0.0, "probability per grasp that the gripper stops at the fruit's width "
                                       "holding nothing (the fruit stays)", 0.0, 1.0)
    contact_loss_probability: float = param(0.1, "PushT: probability per contact that the fingertips ride over the "
                                            "block's edge and lose it", 0.0, 1.0)
    camera_name: str = param("front_camera", "the rendered camera's topic prefix ('' = no camera images)")
    camera_calibration: str = param("package://robot_bridge/config/twin_front_camera.yaml",
                                    "calibration (with pose_in_base_link) of the rendered camera")
    camera_period_s: float = param(0.2, "seconds between rendered frames (the executor's and the verifier's period)",
                                   0.02, 10.0)
    feedback_period_s: float = param(0.005, "seconds between the twin's feedback frames (the real arm's: 0.005, "
                                     "200 Hz)", 0.001, 1.0)
    max_episode_s: float = param(60.0, "an episode that has not succeeded by then fails", 1.0, 3600.0)
    act_host: str = param("127.0.0.1", "address of the /act stand-in server")
    act_port: int = param(8765, "port of the /act stand-in server (0 = any free port)", 0, 65535)
    variant: str = param("", "the run's variant label, copied into Episode messages")
    period_s: float = param(0.1, "how often the episode is judged (s)", 0.01, 1.0)
    shutdown_when_done: bool = param(False, "exit the node's process after the last episode")
    replan_action: str = param(names.REPLAN, "Replan action whose server must answer before the first episode "
                               "starts ('' = do not wait for a planner)")

    def validate(self) -> None:
        """ConfigError naming the first invalid parameter."""
        if not self.can_port:
            raise ConfigError("can_port", "must not be empty")
        if self.can_interface not in ("virtual", "udp_multicast", "socketcan"):
            raise ConfigError("can_interface", f"'{self.can_interface}' is not virtual, udp_multicast or socketcan")
        check_agent_ids("agent_id", self.agent_id)
        if self.task not in TASKS:
            raise ConfigError("task", f"'{self.task}' is not one of {', '.join(TASKS)}")
        if self.camera_name and not NAME_PATTERN.fullmatch(self.camera_name):
            raise ConfigError("camera_name", f"'{self.camera_name}' is not a relative ROS name")


class TwinWorldNode(WorldNode, Node):
    """Thin rclpy shell around the CAN twin, the task's world and the /act stand-in."""

    world_name = "pickfruit"   # the instance's: its task's
    ends_with_process = False  # the twin and the /act stand-in stay up until the process ends (end_with_process)

    def __init__(self, **kwargs) -> None:
        super().__init__("twin_world", **kwargs)
        self.config = declare_config(self, TwinWorldConfig)
        reject_undeclared(self)
        cfg = self.config
        if cfg.task == "pusht":
            self.world = PushTWorld(PushTConfig(contact_loss_probability=cfg.contact_loss_probability))
        else:
            self.world = PickFruitWorld(PickFruitConfig(tasks=cfg.tasks, slip_probability=cfg.slip_probability,
                                                        hand_probability=cfg.hand_probability,
                                                        phantom_probability=cfg.phantom_probability))
        self.task = TwinTask.of(self.world)
        self.world_name = self.task.name
        self.camera = TwinCamera(self, cfg.camera_name, load_calibration(cfg.camera_calibration), cfg.seed) \
            if cfg.camera_name else None
        self.twin = PiperTwin(cfg.can_port, cfg.can_interface,
                              TwinConfig(feedback_period_s=cfg.feedback_period_s, initial_joints=list(HOME_JOINTS),
                                         initial_gripper=HOME_GRIPPER_M),
                              grasp=lambda state: self.world.grasp(tuple(state.end_pose[:3]), state.gripper_m))
        self.policy = self.task.policy(lambda: tuple(self.twin.state().end_pose[:3]))
        self.act = ActServer(self.policy, host=cfg.act_host, port=cfg.act_port)
        self.twin.start()
        self.act.start()
        self.get_logger().info(f"{self.task.name} on the CAN twin on {cfg.can_interface}:{cfg.can_port}; /act stand-in "
                               f"at {self.act.url}; the executor's locations: {', '.join(self.task.locations)}")

        self.init_world(("context", "episode", "diagnostics", "world_states", "world_info"), cfg.episodes, cfg.seed)
        self.started_at: Optional[float] = None
        self.failures = failure_counts()
        self.scene: list[str] = []
        self.counts = Counters(("plans", "instructions_anew", "outcomes", "failed_outcomes", "ticks_waiting_for_peers"))

        self.plan_progress, self.state_step = PlanProgress(cfg.agent_id), 0
        self.subscribe_plans(self.on_plan)
        self.inputs.subscribe(self, ExecutionOutcome, names.OUTCOMES, self.on_outcome, "outcome")
        self.wait_for_peers(cfg)
        self.timer = steady_timer(self, cfg.period_s, self.tick)
        if self.camera is not None:
            steady_timer(self, cfg.camera_period_s, self.publish_frame)
        steady_timer(self, 1.0, self.publish_diagnostics)

    # ------------------------------------------------------------------ inputs

    def on_plan(self, msg: Plan) -> None:
        """Count the plans of this episode for the arm; the /act stand-in starts over where the executor gives it an
        instruction anew (brace_common.plan_start: a new step, or a repair of the running one)."""
        if msg.agent_id == self.config.agent_id and self.started_at is not None:
            self.book.count_plan()
            self.counts["plans"] += 1
            steps = [(step.action, step.parameters_json) for step in msg.steps]
            if plan_start(self.plan_progress.running(), steps, msg.trigger_kind) != PlanStart.CONTINUES:
                self.policy.start_over()
                self.counts["instructions_anew"] += 1
            self.plan_progress.plan(steps)
            self._publish_world_state()

    def on_outcome(self, msg: ExecutionOutcome) -> None:
        """Count failed steps by category."""
        if msg.agent_id != self.config.agent_id or self.started_at is None:
            return
        self.counts["outcomes"] += 1
        self.plan_progress.outcome(msg.action, msg.success)
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
        return f"{self.book.progress()} {elapsed:5.1f} s"

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
        if self.world.success() or elapsed > self.config.max_episode_s:
            self.end_episode(elapsed)

    def start_episode(self) -> None:
        """Reset the table and the arm (home, gripper open), announce the episode, publish the task and the scene."""
        self.announce_start()
        task = self.world.reset(self.book.seed)
        self.twin.place(HOME_JOINTS, HOME_GRIPPER_M)   # the arm too: it would start where the last episode left it
        self.failures, self.scene = failure_counts(), []
        self.state_step = -1
        self.plan_progress.clear()
        self.started_at = time.monotonic()
        for name in task:
            self.publish_entry(self.config.agent_id, Block.TASK, EntryKind.TASK, self.task.task_text(name))
        self.publish_entry(self.config.agent_id, Block.CONSTRAINTS, EntryKind.CONSTRAINT, self.task.skills_text)
        self._publish_scene_changes()

    def episode_result(self, elapsed: float) -> EpisodeResult:
        """The task's record of the episode that ends: its verdict and metrics (duration, grasps and slips or pushes,
        contact losses and the goal error, failures)."""
        verdict = self.task.episode_metrics(self.world, elapsed, int(elapsed / self.config.period_s), self.failures)
        return EpisodeResult.of(verdict, self.episode, self.book.seed, self.plans)

    def end_episode(self, elapsed: float) -> None:
        """Publish the verdict; stop after the last episode."""
        result = self.episode_result(elapsed)
        last = self.announce_end(result)
        self.get_logger().info(f"episode {self.episode}: success={result.success} {elapsed:.1f} s plans={self.plans} "
                               f"{vars(self.world.counts)} failures={dict((k, v) for k, v in self.failures.items() if v)}")
        self.started_at = None
        if last:
            self.timer.cancel()

    # ------------------------------------------------------------------ outputs

    def _publish_world_state(self) -> None:
        twin = self.twin.state()
        self.publish_state(self.task.world_state(self.world, self.episode, max(self.state_step, 0),
                                                 self.plan_progress.activity(), tuple(twin.end_pose[:3]),
                                                 twin.gripper_m), "base_link")

    def _publish_scene_changes(self) -> None:
        self.state_step += 1  # one tick of the episode: a step of its world state
        self._publish_world_state()
        scene = self.world.describe()
        if scene != self.scene:
            self.scene = scene
            self.publish_entry(self.config.agent_id, Block.STATE, EntryKind.OBSERVATION, self.task.scene_text(scene))

    def publish_frame(self) -> None:
        """Render the front camera from the twin's state and publish colour, depth and their camera_info."""
        twin = self.twin.state()
        self.camera.publish(self.task.render(tuple(twin.end_pose[:3]), twin.gripper_m))

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
        state = self.twin.state()
        values = {"episode": self.episode, "act_url": self.act.url if self.act.running else "stopped",
                  "twin.enabled": state.enabled, "twin.gripper_m": round(state.gripper_m, 4)}
        health = Health(values) + self.counts.health() + (self.camera.health() if self.camera is not None else Health())
        health += Health({f"world.{k}": v for k, v in vars(self.world.counts).items()}) + self.inputs.health()
        self.publish_world_health(f"{self.task.name} on the PiPER twin", health + Health(errors=tuple(self.peer_errors())))

    def close(self) -> None:
        """Stop the /act server and the twin (idempotent; also after a constructor that failed half way)."""
        for part in (getattr(self, "act", None), getattr(self, "twin", None)):
            if part is not None:
                part.stop()

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


def failure_counts() -> Counters:
    """One episode's failed steps by category (Failure label), every category declared."""
    return Counters(f.label for f in Failure)
