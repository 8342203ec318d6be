"""The twin's tasks without ROS and without the twin's dynamics: plans executed step by step as openvla_executor does.

ROS-free. `PickFruitRollout` runs the executor's loop on a `PickFruitWorld` (or a `PushTWorld`):
each tick the step monitor judges the step, the stand-in policy answers the
step's instruction (the executor's template table), the action is scaled and
clipped as the executor does, and the tool point and the gripper follow it at
once (a kinematic arm: no joint dynamics, no CAN). The world closes the
gripper on a fruit and lets grasps slip as on the twin. Every ended step
gives the history entry the executor publishes, and every scene change the
state entry the twin world publishes: the planner's context of a closed-loop
episode, at a fraction of its cost (planner training and evaluation data).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Optional

import numpy as np

from brace_common.vocabulary import Block, EntryKind

from ..openvla.executor_config import ExecutorConfig
from ..openvla.instructions import with_entries
from ..openvla.step_monitor import Observation, StepMonitor, StepResult, describe_step, outcome_text
from ..openvla.vla_action import ActionError, to_arm
from ..piper.piper_kinematics import PiperKinematics
from ..twin_task import TableWorld, TwinTask
from .pickfruit_world import HOME_JOINTS, Point

Halt = Callable[[], Optional[str]]
"""Asked after every control tick: a reason to halt the running step, or None."""

HOME_TOOL: Point = tuple(PiperKinematics().forward_pose(HOME_JOINTS)[:3])  # type: ignore[assignment]
"""The tool point of the twin world's home joints (m)."""


@dataclass(frozen=True)
class ContextLine:
    """One context entry as a node would publish it: block, kind, text and the publisher's step."""

    block: Block
    kind: EntryKind
    text: str
    step: int = 0


@dataclass(frozen=True)
class StepRecord:
    """An executed plan step: the call, how it ended, the history text."""

    action: str
    parameters: Mapping[str, Any]
    result: StepResult
    text: str


class PickFruitRollout:
    """The executor, the arm and the camera of a PickFruit episode, collapsed into one kinematic loop."""

    def __init__(self, world: TableWorld, executor: Optional[ExecutorConfig] = None,
                 tool: Point = HOME_TOOL) -> None:
        """`executor` defaults to the executor's defaults with the task's locations (the bowl, the goal)."""
        self.world = world
        self.task = TwinTask.of(world)
        if executor is None:
            executor = ExecutorConfig(locations=list(self.task.locations))
            executor = replace(executor, instruction_templates=with_entries(executor.instruction_templates,
                                                                            self.task.instruction_templates))
        self.templates = executor.templates()
        self.monitor = StepMonitor(executor.monitor_config())
        self.scaling = executor.scaling()
        self.gripper_map = executor.gripper()
        self.period_s = executor.control_period_s
        self.tool: Point = tool
        self.commanded_m = math.nan
        self.opening_m = self.gripper_map.open_m
        self.policy = self.task.policy(lambda: self.tool)
        self.t = 0.0
        self.ticks = 0
        self.scene: list[str] = []
        self.lines: list[ContextLine] = []

    # ------------------------------------------------------------------ the episode's context

    def start(self, seed: int) -> tuple[str, ...]:
        """A new episode on the same arm: the task, skills and scene entries; returns the task's objects."""
        task = self.world.reset(seed)
        self.scene = []
        self.lines.extend(ContextLine(Block.TASK, EntryKind.TASK, self.task.task_text(f)) for f in task)
        self.lines.append(ContextLine(Block.CONSTRAINTS, EntryKind.CONSTRAINT, self.task.skills_text))
        self._scene_changes()
        return task

    def _scene_changes(self) -> None:
        scene = self.world.describe()
        if scene != self.scene:
            self.scene = scene
            self.lines.append(ContextLine(Block.STATE, EntryKind.OBSERVATION, self.task.scene_text(scene)))

    # ------------------------------------------------------------------ executing plans

    def execute(self, plan: Sequence[tuple[str, Mapping[str, Any]]], max_steps: Optional[int] = None,
                halt: Optional[Halt] = None) -> list[StepRecord]:
        """Execute plan steps in order until one fails (the executor abandons the plan) or `max_steps` ended."""
        records = []
        for action, parameters in plan[:max_steps]:
            record = self.step(action, parameters, halt)
            records.append(record)
            if not record.result.success:
                break
        return records

    def step(self, action: str, parameters: Mapping[str, Any], halt: Optional[Halt] = None) -> StepRecord:
        """Run one plan step to its end; ValueError for a step the executor would reject. `halt` is asked after every
        tick (the visual verifier beside the executor): a reason it returns halts the step (FAILURE_PREEMPTED)."""
        instruction = self.templates.instruction(action, parameters)
        self.policy.start_over()              # as the twin's stand-in is told at a new plan's step
        self.monitor.start(self.monitor.spec(action, parameters), self.t)
        result = None
        while result is None:
            self.ticks += 1
            self.t += self.period_s
            result = self.monitor.observe(Observation(self.t, self.opening_m, self.tool, self.commanded_m,
                                                      self.t, self.t))
            if result is None:
                result = self._act(instruction)
            self._scene_changes()
            reason = halt() if halt is not None and result is None else None
            if reason:
                result = self.monitor.preempt(self.t, reason)
        self.monitor.stop()
        text = outcome_text(describe_step(action, parameters), result)
        kind = EntryKind.ACTION_OUTCOME if result.success else EntryKind.FAILURE_TRACE
        self.lines.append(ContextLine(Block.HISTORY, kind, text, self.ticks))
        return StepRecord(action, dict(parameters), result, text)

    def _act(self, instruction: str) -> Optional[StepResult]:
        try:
            arm = to_arm(self.policy(np.zeros((1, 1, 3), np.uint8), instruction), self.scaling, self.gripper_map)
        except (ActionError, ValueError) as exc:
            return self.monitor.vla_error(self.t, str(exc))
        self.monitor.action_sent()
        self.tool = tuple(a + d for a, d in zip(self.tool, arm.translation_m, strict=True))  # type: ignore[assignment]
        self.commanded_m = arm.gripper_m
        width = self.world.grasp(self.tool, arm.gripper_m)
        self.opening_m = arm.gripper_m if width is None or arm.gripper_m > width else width
        return None
