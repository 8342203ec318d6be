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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from brace_common.validation import InvalidInput, parse_json_object, shorten
from brace_common.vocabulary import Failure

from .isaac_contract import Pose2D, RobotKind, RobotSpec, RobotState, wrap_angle

MOVE_TO, MOVE_JOINTS, STOP, WAIT = "move_to", "move_joints", "stop", "wait"
SKILLS = (MOVE_TO, MOVE_JOINTS, STOP, WAIT)
"""The skills the bridge can execute (a schema may offer a subset)."""
_TYPES = {"string": (str,), "number": (int, float), "integer": (int,), "boolean": (bool,)}


@dataclass(frozen=True)
class ParamRule:
    """One parameter of a skill: JSON type, allowed values, required, range of a number."""

    type: str = "string"
    choices: Optional[tuple] = None
    required: bool = True
    low: Optional[float] = None
    high: Optional[float] = None


@dataclass(frozen=True)
class SkillCall:
    """One validated plan step."""

    action: str
    params: dict[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        """`move_to(x=1.0, y=2.0)` as context entries write it."""
        return f"{self.action}({', '.join(f'{k}={v}' for k, v in self.params.items())})"


@dataclass(frozen=True)
class SkillSchema:
    """Which skills exist, with which parameters, and which robot kind may call which."""

    actions: dict[str, dict[str, ParamRule]]
    kinds: dict[RobotKind, tuple[str, ...]]
    max_steps: int = 4

    @classmethod
    def from_dict(cls, raw: Any) -> SkillSchema:
        """{'max_steps', 'kinds': {kind: [skill]}, 'actions': {skill: {param: {type, choices, required, low, high}}}};
        ValueError naming what is wrong."""
        if not isinstance(raw, dict) or not isinstance(raw.get("actions"), dict) or not raw["actions"]:
            raise ValueError("the schema needs an 'actions' mapping with at least one skill")
        actions: dict[str, dict[str, ParamRule]] = {}
        for name, params in raw["actions"].items():
            if name not in SKILLS:
                raise ValueError(f"skill '{name}' is not one the bridge executes ({', '.join(SKILLS)})")
            rules = {}
            for pname, p in (params or {}).items():
                p = p or {}
                if p.get("type", "string") not in _TYPES:
                    raise ValueError(f"{name}.{pname}: type '{p.get('type')}' is not one of {', '.join(_TYPES)}")
                choices = tuple(p["choices"]) if p.get("choices") is not None else None
                rules[pname] = ParamRule(p.get("type", "string"), choices, bool(p.get("required", True)),
                                         p.get("low"), p.get("high"))
            actions[name] = rules
        for name, needed in ((MOVE_TO, ("x", "y")), (MOVE_JOINTS, ("pose",)), (WAIT, ("seconds",))):
            if name in actions and set(actions[name]) != set(needed):
                raise ValueError(f"skill '{name}' takes exactly ({', '.join(needed)}), the schema gives "
                                 f"({', '.join(actions[name])})")
        kinds: dict[RobotKind, tuple[str, ...]] = {}
        for kind, skills in (raw.get("kinds") or {}).items():
            try:
                kind = RobotKind(kind)
            except ValueError:
                raise ValueError(f"kinds: '{kind}' is not a robot kind (mobile, arm)") from None
            unknown = [s for s in skills or [] if s not in actions]
            if unknown:
                raise ValueError(f"kinds.{kind.value}: {unknown} are not skills of the schema")
            wrong = [s for s in skills or [] if s == (MOVE_JOINTS if kind == RobotKind.MOBILE else MOVE_TO)]
            if wrong:
                raise ValueError(f"kinds.{kind.value}: a {kind.value} robot cannot execute {wrong[0]}")
            kinds[kind] = tuple(skills or ())
        max_steps = raw.get("max_steps", 4)
        if not isinstance(max_steps, int) or not 1 <= max_steps <= 64:
            raise ValueError(f"max_steps {max_steps!r} is not an integer in [1, 64]")
        return cls(actions, kinds, max_steps)

    @classmethod
    def load(cls, path: str | Path) -> SkillSchema:
        """The schema in YAML file `path`; ValueError (OSError when unreadable) naming what is wrong."""
        try:
            raw = yaml.safe_load(Path(path).read_text())
        except yaml.YAMLError as exc:
            raise ValueError(f"{path} is not YAML: {exc}") from None
        return cls.from_dict(raw)

    def skills_of(self, kind: RobotKind) -> tuple[str, ...]:
        """The skills a robot of `kind` may call."""
        return self.kinds.get(kind, ())

    def pose_choices(self) -> tuple[str, ...]:
        """The pose names move_joints offers the planner ('' when it offers none or has no move_joints)."""
        rule = self.actions.get(MOVE_JOINTS, {}).get("pose")
        return tuple(rule.choices) if rule is not None and rule.choices else ()

    def signature(self, skill: str) -> str:
        """`move_to(x, y)` as the constraints entry shows a skill."""
        return f"{skill}({', '.join(self.actions[skill])})"

    def validate(self, kind: RobotKind, steps: list[tuple[str, str]], poses: dict[str, tuple]) -> list[SkillCall]:
        """Skill calls from a plan's (action, parameters_json) pairs for a robot of `kind` whose named poses are
        `poses`; InvalidInput naming what is wrong (nothing of a plan with one bad step is executed)."""
        if not steps:
            raise InvalidInput("empty_plan", "the plan has no steps")
        if len(steps) > self.max_steps:
            raise InvalidInput("long_plan", f"plan has {len(steps)} steps (at most {self.max_steps})")
        return [self._call(kind, action, params_json, poses) for action, params_json in steps]

    def _call(self, kind: RobotKind, action: str, params_json: str, poses: dict[str, tuple]) -> SkillCall:
        if action not in self.actions:
            raise InvalidInput("unknown_skill", f"skill '{shorten(action)}' is not in the action schema")
        if action not in self.skills_of(kind):
            raise InvalidInput("skill_not_for_robot", f"a {kind.value} robot cannot {action}")
        params = parse_json_object("parameters_json", params_json)
        rules = self.actions[action]
        unknown = [k for k in params if k not in rules]
        if unknown:
            raise InvalidInput("unknown_parameter", f"{action} has no parameter {shorten(unknown[0])}")
        out: dict[str, Any] = {}
        for name, rule in rules.items():
            if name not in params:
                if rule.required:
                    raise InvalidInput("missing_parameter", f"{action} needs '{name}'")
                continue
            out[name] = _checked(action, name, params[name], rule)
        if action == MOVE_JOINTS and out["pose"] not in poses:
            raise InvalidInput("unknown_pose", f"pose '{shorten(out['pose'])}' is not a named pose of this robot")
        return SkillCall(action, out)


def _checked(action: str, name: str, value: Any, rule: ParamRule) -> Any:
    types = _TYPES[rule.type]
    if isinstance(value, bool) and rule.type != "boolean" or not isinstance(value, types):
        raise InvalidInput("bad_parameter_type", f"{action}.{name} must be a {rule.type}")
    if rule.type == "number":
        value = float(value)
        if not math.isfinite(value):
            raise InvalidInput("bad_parameter_value", f"{action}.{name} is not finite")
    if rule.type in ("number", "integer") and (rule.low is not None and value < rule.low
                                               or rule.high is not None and value > rule.high):
        raise InvalidInput("parameter_out_of_range", f"{action}.{name}={value} is outside [{rule.low}, {rule.high}]")
    if rule.choices is not None and value not in rule.choices:
        raise InvalidInput("unknown_choice", f"{action}.{name}={shorten(str(value))} is not one of the schema's")
    return value


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
    call: SkillCall
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
        self.plan: list[SkillCall] = []
        self.cursor = 0
        self.started: Optional[float] = None              # ROS time the current step started
        self.segment: Optional[tuple[tuple[float, float], tuple[float, float]]] = None  # move_to: start, goal
        self.setpoint: Optional[tuple[float, ...]] = None  # move_joints: the commanded positions
        self.last_tick: Optional[float] = None
        self.tracking_error = math.nan

    @property
    def current(self) -> Optional[SkillCall]:
        """The step being executed (None when idle)."""
        return self.plan[self.cursor] if self.cursor < len(self.plan) else None

    @property
    def has_goal(self) -> bool:
        """A plan with unfinished steps."""
        return self.current is not None

    def set_plan(self, plan_id: str, steps: list[SkillCall]) -> None:
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

    def _start(self, call: SkillCall, now: float, state: RobotState) -> None:
        self.started = now
        if call.action == MOVE_TO and state.base is not None:
            self.segment = ((state.base.pose.x, state.base.pose.y), (call.params["x"], call.params["y"]))
        if call.action == MOVE_JOINTS and state.joints is not None:
            self.setpoint = state.joints

    def _run(self, call: SkillCall, now: float, dt: float, state: RobotState):
        """(command, None) while running; (command, (success, failure, detail)) when the step ended."""
        elapsed = now - self.started
        lim = self.limits
        if call.action == STOP:
            return self.hold(state), (True, Failure.NONE, "stopped")
        if call.action == WAIT:
            done = elapsed >= call.params["seconds"]
            return self._idle(), (True, Failure.NONE, f"waited {call.params['seconds']:g} s") if done else None
        if call.action == MOVE_TO:
            goal = (call.params["x"], call.params["y"])
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
        target = self.poses[call.params["pose"]]
        self.setpoint = step_toward(self.setpoint, target, lim.max_joint_speed * dt)
        error = joint_error(state.joints, target)
        self.tracking_error = math.dist(self.setpoint, state.joints)
        if error <= lim.joint_tolerance_rad:
            return Command(joints=target), (True, Failure.NONE, f"at pose {call.params['pose']} (largest joint "
                                                                f"error {error:.3f} rad) in {elapsed:.1f} s")
        if elapsed > lim.joints_timeout_s:
            return self.hold(state), (False, Failure.TIMEOUT, f"not at pose {call.params['pose']} after "
                                                              f"{lim.joints_timeout_s:g} s: largest joint error "
                                                              f"{error:.3f} rad")
        return Command(joints=self.setpoint), None

    def _idle(self) -> Command:
        """Nothing to do: zero velocity for a base (ROS2 Subscribe Twist keeps the last one), nothing for an arm."""
        return ZERO_TWIST if self.robot.kind == RobotKind.MOBILE else Command()
