"""Skills of Isaac Sim robots: the action schema, plan validation, and execution of plan steps. ROS-free.

A mobile base takes `move_to(x, y)` (a go-to-goal velocity controller on its
odometry, finished within `goal_tolerance_m`), `stop()` and `wait(seconds)`;
an arm takes `move_joints(pose)` (a named joint configuration, commanded as
joint positions moving toward it at most `max_joint_speed` rad/s, finished when
every joint is within `joint_tolerance_rad`), `stop()` and `wait(seconds)`.
A step that does not finish within its timeout fails with Failure.TIMEOUT and
abandons the rest of its plan. Times are seconds of ROS time (Isaac's /clock
under `use_sim_time`).

The schema file (config/isaac_actions.yaml) is the planner's action schema
(`max_steps`, `actions`: parameter type, choices, required) plus what only the
bridge reads: `kinds` (the skills each robot kind may call) and a number's
`low` / `high`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from brace_common.action_schema import ActionSchema, Fault, PlanError, Step
from brace_common.planar import Pose2D, wrap_angle
from brace_common.validation import shorten
from brace_common.vocabulary import Failure

from .isaac_contract import RobotKind, RobotSpec, RobotState

MOVE_TO, MOVE_JOINTS, STOP, WAIT = "move_to", "move_joints", "stop", "wait"
SKILLS = (MOVE_TO, MOVE_JOINTS, STOP, WAIT)
"""The skills the bridge can execute (a schema may offer a subset)."""
ISAAC_REASONS = {Fault.SKILL_NOT_FOR_KIND: "skill_not_for_robot"}
"""The bridge's counter key for a skill the robot's kind may not call."""
_PARAMETERS = {MOVE_TO: ("x", "y"), MOVE_JOINTS: ("pose",), WAIT: ("seconds",)}
"""The parameters the bridge reads of each skill that takes any."""


@dataclass(frozen=True)
class SkillSchema(ActionSchema):
    """The action schema of Isaac robots; its `kinds` are robot kinds (RobotKind values).

    A subclass for what only this bridge knows: at load, that every skill is one it executes with exactly the
    parameters it reads and every kind a robot kind; at intake, that a pose is one of the robot's named poses.
    """

    @classmethod
    def from_dict(cls, raw: Any) -> SkillSchema:
        """{'max_steps', 'kinds': {kind: [skill]}, 'actions': {skill: {param: {type, choices, required, low, high}}}};
        ValueError naming what is wrong."""
        schema = super().from_dict(raw)
        for name, spec in schema.actions.items():
            if name not in SKILLS:
                raise ValueError(f"skill '{name}' is not one the bridge executes ({', '.join(SKILLS)})")
            needed = _PARAMETERS.get(name, ())
            if name in _PARAMETERS and set(spec.parameters) != set(needed):
                raise ValueError(f"skill '{name}' takes exactly ({', '.join(needed)}), the schema gives "
                                 f"({', '.join(spec.parameters)})")
        for kind, skills in schema.kinds.items():
            try:
                kind = RobotKind(kind)
            except ValueError:
                raise ValueError(f"kinds: '{kind}' is not a robot kind (mobile, arm)") from None
            wrong = [s for s in skills if s == (MOVE_JOINTS if kind == RobotKind.MOBILE else MOVE_TO)]
            if wrong:
                raise ValueError(f"kinds.{kind.value}: a {kind.value} robot cannot execute {wrong[0]}")
        if schema.max_steps > 64:
            raise ValueError(f"max_steps {schema.max_steps!r} is not an integer in [1, 64]")
        return schema

    def skills_of(self, kind: RobotKind) -> tuple[str, ...]:
        """The skills a robot of `kind` may call (none when the schema's kinds do not name it)."""
        return self.kinds.get(kind.value, ())

    def pose_choices(self) -> tuple[str, ...]:
        """The pose names move_joints offers the planner ('' when it offers none or has no move_joints)."""
        spec = self.actions.get(MOVE_JOINTS)
        rule = spec.parameters.get("pose") if spec is not None else None
        return tuple(rule.choices) if rule is not None and rule.choices else ()

    def validate(self, kind: RobotKind, steps: list[tuple[str, str]], poses: dict[str, tuple]) -> list[Step]:
        """Skill calls from a plan's (action, parameters_json) pairs for a robot of `kind` whose named poses are
        `poses`; InvalidInput naming what is wrong (nothing of a plan with one bad step is executed)."""
        try:
            calls = self.plan_from_pairs(steps, kind=kind.value)
        except PlanError as exc:
            raise exc.renamed(ISAAC_REASONS) from None
        for index, call in enumerate(calls):
            if call.action == MOVE_JOINTS and call.parameters["pose"] not in poses:
                raise PlanError("unknown_pose", f"step {index}: pose '{shorten(call.parameters['pose'])}' is not a "
                                                "named pose of this robot", index, "pose")
        return calls


# ---------------------------------------------------------------------- controllers


@dataclass(frozen=True)
class ExecLimits:
    """How skills are executed: the base controller's gains and limits, tolerances and timeouts."""

    goal_tolerance_m: float = 0.15
    max_linear_speed: float = 0.6     # m/s
    max_angular_speed: float = 1.2    # rad/s
    linear_gain: float = 0.8          # 1/s: forward speed per metre to the goal
    angular_gain: float = 2.0         # 1/s: yaw rate per radian of heading error
    turn_in_place_rad: float = 0.8    # heading error above which the base turns without driving
    move_timeout_s: float = 60.0
    joint_tolerance_rad: float = 0.03
    max_joint_speed: float = 0.8      # rad/s of the commanded positions
    joints_timeout_s: float = 20.0


def go_to_goal(pose: Pose2D, goal: tuple[float, float], limits: ExecLimits) -> tuple[float, float]:
    """(forward speed, yaw rate) that drive a unicycle at `pose` toward `goal`, within the limits.

    Proportional in distance and heading error; it turns in place while the goal is more than `turn_in_place_rad`
    off its heading and never drives backwards.
    """
    dx, dy = goal[0] - pose.x, goal[1] - pose.y
    distance = math.hypot(dx, dy)
    heading_error = wrap_angle(math.atan2(dy, dx) - pose.yaw)
    angular = max(-limits.max_angular_speed, min(limits.max_angular_speed, limits.angular_gain * heading_error))
    if abs(heading_error) > limits.turn_in_place_rad:
        return 0.0, angular
    linear = min(limits.max_linear_speed, limits.linear_gain * distance) * math.cos(heading_error)
    return max(0.0, linear), angular


def segment_distance(p: tuple[float, float], a: tuple[float, float], b: tuple[float, float]) -> float:
    """Distance from point `p` to the segment from `a` to `b`."""
    ax, ay = b[0] - a[0], b[1] - a[1]
    length2 = ax * ax + ay * ay
    t = 0.0 if length2 < 1e-12 else max(0.0, min(1.0, ((p[0] - a[0]) * ax + (p[1] - a[1]) * ay) / length2))
    return math.hypot(p[0] - (a[0] + t * ax), p[1] - (a[1] + t * ay))


def step_toward(current: tuple[float, ...], target: tuple[float, ...], max_step: float) -> tuple[float, ...]:
    """`current` moved toward `target`, each joint by at most `max_step`."""
    return tuple(c + max(-max_step, min(max_step, t - c)) for c, t in zip(current, target, strict=True))


def joint_error(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """Largest absolute joint difference."""
    return max((abs(x - y) for x, y in zip(a, b, strict=True)), default=0.0)


# ---------------------------------------------------------------------- execution


@dataclass(frozen=True)
class Command:
    """What to send a robot now: a velocity (mobile) or joint positions (arm); None = send nothing."""

    twist: Optional[tuple[float, float]] = None       # (forward m/s, yaw rate rad/s)
    joints: Optional[tuple[float, ...]] = None        # positions of the configured joint names (rad)


ZERO_TWIST = Command(twist=(0.0, 0.0))


@dataclass(frozen=True)
class Outcome:
    """A plan step finished (success) or failed (with its category)."""

    agent_id: str
    plan_id: str
    index: int
    call: Step
    success: bool
    failure: Failure
    detail: str


class RobotExecutor:
    """Executes one robot's plan step by step from its state; `tick` returns the command and finished steps."""

    def __init__(self, robot: RobotSpec, limits: ExecLimits, poses: dict[str, tuple[float, ...]]):
        self.robot = robot
        self.limits = limits
        self.poses = poses
        self.plan_id = ""
        self.plan: list[Step] = []
        self.cursor = 0
        self.started: Optional[float] = None              # ROS time the current step started
        self.segment: Optional[tuple[tuple[float, float], tuple[float, float]]] = None  # move_to: start, goal
        self.setpoint: Optional[tuple[float, ...]] = None  # move_joints: the commanded positions
        self.last_tick: Optional[float] = None
        self.tracking_error = math.nan

    @property
    def current(self) -> Optional[Step]:
        """The step being executed (None when idle)."""
        return self.plan[self.cursor] if self.cursor < len(self.plan) else None

    @property
    def has_goal(self) -> bool:
        """A plan with unfinished steps."""
        return self.current is not None

    def set_plan(self, plan_id: str, steps: list[Step]) -> None:
        """Replace the plan (a running step is abandoned without an outcome; the next tick starts the new one)."""
        self.plan_id, self.plan, self.cursor = plan_id, list(steps), 0
        self._reset_step()

    def clear(self) -> None:
        """Drop the plan."""
        self.set_plan("", [])

    def _reset_step(self) -> None:
        self.started, self.segment, self.setpoint = None, None, None
        self.tracking_error = math.nan

    def hold(self, state: RobotState) -> Command:
        """The safe hold: zero velocity for a base; the measured joints for an arm (nothing before any arrived)."""
        if self.robot.kind == RobotKind.MOBILE:
            return ZERO_TWIST
        return Command(joints=state.joints) if state.joints is not None else Command()

    def tick(self, now: float, state: RobotState) -> tuple[Command, list[Outcome]]:
        """Advance the plan at ROS time `now` from `state`; the command to send and the steps that ended."""
        dt = 0.0 if self.last_tick is None else max(0.0, min(0.5, now - self.last_tick))
        self.last_tick = now
        outcomes: list[Outcome] = []
        if (state.base if self.robot.kind == RobotKind.MOBILE else state.joints) is None:
            return self.hold(state), outcomes  # nothing measured yet: nothing to execute from
        last = self._idle()  # a finished step's last command (an arm's final target, a stop's hold) is sent too
        while (call := self.current) is not None:
            if self.started is None:
                self._start(call, now, state)
            command, result = self._run(call, now, dt, state)
            if result is None:
                return command, outcomes
            last = command
            success, failure, detail = result
            outcomes.append(Outcome(self.robot.name, self.plan_id, self.cursor, call, success, failure, detail))
            self.cursor += 1
            self._reset_step()
            if not success:
                self.plan, self.cursor = [], 0  # a failed step abandons the rest of its plan
        return last, outcomes

    def _start(self, call: Step, now: float, state: RobotState) -> None:
        self.started = now
        if call.action == MOVE_TO and state.base is not None:
            self.segment = ((state.base.pose.x, state.base.pose.y), (call.parameters["x"], call.parameters["y"]))
        if call.action == MOVE_JOINTS and state.joints is not None:
            self.setpoint = state.joints

    def _run(self, call: Step, now: float, dt: float, state: RobotState):
        """(command, None) while running; (command, (success, failure, detail)) when the step ended."""
        elapsed = now - self.started
        lim = self.limits
        if call.action == STOP:
            return self.hold(state), (True, Failure.NONE, "stopped")
        if call.action == WAIT:
            done = elapsed >= call.parameters["seconds"]
            return self._idle(), (True, Failure.NONE, f"waited {call.parameters['seconds']:g} s") if done else None
        if call.action == MOVE_TO:
            goal = (call.parameters["x"], call.parameters["y"])
            pose = state.base.pose
            distance = math.hypot(goal[0] - pose.x, goal[1] - pose.y)
            self.tracking_error = segment_distance((pose.x, pose.y), *self.segment)
            if distance <= lim.goal_tolerance_m:
                return ZERO_TWIST, (True, Failure.NONE, f"reached ({goal[0]:.2f}, {goal[1]:.2f}) within "
                                                        f"{distance:.2f} m in {elapsed:.1f} s")
            if elapsed > lim.move_timeout_s:
                return ZERO_TWIST, (False, Failure.TIMEOUT, f"not at ({goal[0]:.2f}, {goal[1]:.2f}) after "
                                                            f"{lim.move_timeout_s:g} s: {distance:.2f} m away at "
                                                            f"({pose.x:.2f}, {pose.y:.2f})")
            return Command(twist=go_to_goal(pose, goal, lim)), None
        # MOVE_JOINTS
        target = self.poses[call.parameters["pose"]]
        self.setpoint = step_toward(self.setpoint, target, lim.max_joint_speed * dt)
        error = joint_error(state.joints, target)
        self.tracking_error = math.dist(self.setpoint, state.joints)
        if error <= lim.joint_tolerance_rad:
            return Command(joints=target), (True, Failure.NONE, f"at pose {call.parameters['pose']} (largest joint "
                                                                f"error {error:.3f} rad) in {elapsed:.1f} s")
        if elapsed > lim.joints_timeout_s:
            return self.hold(state), (False, Failure.TIMEOUT, f"not at pose {call.parameters['pose']} after "
                                                              f"{lim.joints_timeout_s:g} s: largest joint error "
                                                              f"{error:.3f} rad")
        return Command(joints=self.setpoint), None

    def _idle(self) -> Command:
        """Nothing to do: zero velocity for a base (ROS2 Subscribe Twist keeps the last one), nothing for an arm."""
        return ZERO_TWIST if self.robot.kind == RobotKind.MOBILE else Command()
