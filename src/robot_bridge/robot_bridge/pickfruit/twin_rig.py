"""What twin_world runs, ROS-free: the CAN twin of the arm, the task's table world and the /act stand-in, built from
TwinWorldConfig, and the state of one episode on them (plans, outcomes, failures, scene, the arm's step).
The rules (episode reset, faults): docs/piper_twin.md, "twin_world".
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Optional

from brace_common.counters import Counters, Health
from brace_common.episode import EpisodeResult
from brace_common.plan_start import PlanStart, plan_start
from brace_common.vocabulary import Failure
from brace_common.world_state import PlanProgress, WorldState

from ..openvla.act_server import ActServer
from ..piper.piper_twin import PiperTwin, TwinConfig
from ..pusht.pusht_world import PushTConfig, PushTWorld
from ..twin_task import Point, TableWorld, TwinTask
from .pickfruit_world import HOME_GRIPPER_M, HOME_JOINTS, PickFruitConfig, PickFruitWorld
from .scene_render import Scene
from .twin_world_config import TwinWorldConfig

COUNTERS = ("plans", "instructions_anew", "outcomes", "failed_outcomes", "ticks_waiting_for_peers")
"""What the twin world counts (its diagnostics keys)."""


def table_world(cfg: TwinWorldConfig) -> TableWorld:
    """The table of `cfg.task` with its faults."""
    if cfg.task == "pusht":
        return PushTWorld(PushTConfig(contact_loss_probability=cfg.contact_loss_probability))
    return PickFruitWorld(PickFruitConfig(tasks=cfg.tasks, slip_probability=cfg.slip_probability,
                                          hand_probability=cfg.hand_probability,
                                          phantom_probability=cfg.phantom_probability))


def failure_counts() -> Counters:
    """One episode's failed steps by category (Failure label), every category declared."""
    return Counters(f.label for f in Failure)


class TwinRig:
    """The twin, the table and the /act stand-in of one twin_world, and its current episode (`started_at` None
    between episodes)."""

    def __init__(self, cfg: TwinWorldConfig) -> None:
        self.config = cfg
        self.world = table_world(cfg)
        self.task = TwinTask.of(self.world)
        self.twin = PiperTwin(cfg.can_port, cfg.can_interface,
                              TwinConfig(feedback_period_s=cfg.feedback_period_s, initial_joints=list(HOME_JOINTS),
                                         initial_gripper=HOME_GRIPPER_M),
                              grasp=lambda state: self.world.grasp(tuple(state.end_pose[:3]), state.gripper_m))
        self.policy = self.task.policy(self.tool)
        self.act = ActServer(self.policy, host=cfg.act_host, port=cfg.act_port)
        self.counts = Counters(COUNTERS)
        self.failures = failure_counts()
        self.scene: list[str] = []
        self.plan_progress, self.state_step = PlanProgress(cfg.agent_id), 0
        self.started_at: Optional[float] = None

    def start(self) -> None:
        """Start the twin on its CAN bus and the /act stand-in's server."""
        self.twin.start()
        self.act.start()

    def close(self) -> None:
        """Stop the /act server and the twin (idempotent)."""
        self.act.stop()
        self.twin.stop()

    def tool(self) -> Point:
        """The twin's tool point (base_link, m)."""
        return tuple(self.twin.state().end_pose[:3])

    # ------------------------------------------------------------------ the episode

    def elapsed(self) -> float:
        """Seconds since the episode started (0 between episodes)."""
        return time.monotonic() - self.started_at if self.started_at is not None else 0.0

    def start_episode(self, seed: int) -> list[str]:
        """Reset the table (seeded) and the arm (home, gripper open: it would start where the last episode left it);
        the objects of the task."""
        task = self.world.reset(seed)
        self.twin.place(HOME_JOINTS, HOME_GRIPPER_M)
        self.failures, self.scene = failure_counts(), []
        self.state_step = -1
        self.plan_progress.clear()
        self.started_at = time.monotonic()
        return list(task)

    def over(self) -> Optional[float]:
        """The episode's duration when it ends now (the task done, or max_episode_s passed), else None."""
        elapsed = self.elapsed()
        return elapsed if self.world.success() or elapsed > self.config.max_episode_s else None

    def end_episode(self, elapsed: float, episode: int, seed: int, plans: int) -> EpisodeResult:
        """End the episode: the task's record of it (its verdict and metrics: duration, grasps and slips or pushes,
        contact losses and the goal error, failures); the rig is then between episodes."""
        verdict = self.task.episode_metrics(self.world, elapsed, int(elapsed / self.config.period_s), self.failures)
        self.started_at = None
        return EpisodeResult.of(verdict, episode, seed, plans)

    def plan(self, steps: Sequence[tuple[str, str]], trigger_kind: int) -> None:
        """A plan for the arm during an episode: counted; the /act stand-in starts over where the executor gives it
        an instruction anew (brace_common.plan_start: a new step, or a repair of the running one)."""
        self.counts["plans"] += 1
        if plan_start(self.plan_progress.running(), list(steps), trigger_kind) != PlanStart.CONTINUES:
            self.policy.start_over()
            self.counts["instructions_anew"] += 1
        self.plan_progress.plan(list(steps))

    def outcome(self, action: str, success: bool, failure: int) -> bool:
        """An ended step of the arm: counted, a failure by category; False for a failure of no known category."""
        self.counts["outcomes"] += 1
        self.plan_progress.outcome(action, success)
        if success:
            return True
        self.counts["failed_outcomes"] += 1
        try:
            self.failures[Failure(failure).label] += 1
        except ValueError:
            return False
        return True

    def tick(self) -> Optional[list[str]]:
        """One tick of the episode (a step of its world state); the scene's description when it changed."""
        self.state_step += 1
        scene = self.world.describe()
        if scene == self.scene:
            return None
        self.scene = scene
        return scene

    def world_state(self, episode: int) -> WorldState:
        """The world state: the arm (its tool, gripper and step as far as plans and outcomes tell) and the table."""
        twin = self.twin.state()
        return self.task.world_state(self.world, episode, max(self.state_step, 0), self.plan_progress.activity(),
                                     tuple(twin.end_pose[:3]), twin.gripper_m)

    def render(self) -> Scene:
        """The camera's view of the table with the twin's tool and gripper."""
        twin = self.twin.state()
        return self.task.render(tuple(twin.end_pose[:3]), twin.gripper_m)

    def health(self) -> Health:
        """The /act server, the twin's state, the counts and the world's (also once the server stopped)."""
        state = self.twin.state()
        values = {"act_url": self.act.url if self.act.running else "stopped", "twin.enabled": state.enabled,
                  "twin.gripper_m": round(state.gripper_m, 4)}
        return Health(values) + self.counts.health() + \
            Health({f"world.{k}": v for k, v in vars(self.world.counts).items()})
