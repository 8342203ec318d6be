"""Isaac robots' skills: the action schema, plan validation, the controllers and step execution (no ROS)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from brace_common.action_schema import Step
from brace_common.planar import Pose2D
from brace_common.validation import InvalidInput
from brace_common.vocabulary import Failure
from sim_bridges.isaac.isaac_contract import BaseState, RobotKind, RobotSpec, RobotState
from sim_bridges.isaac.isaac_skills import (
    ExecLimits,
    RobotExecutor,
    SkillSchema,
    go_to_goal,
    segment_distance,
    step_toward,
)

SCHEMA = SkillSchema.load(Path(__file__).resolve().parents[1] / "config" / "isaac_actions.yaml")
POSES = {"home": (0.0, 0.0), "ready": (1.0, -0.5), "extended": (0.5, 0.5)}
CARTER = RobotSpec("carter_1", RobotKind.MOBILE)
FRANKA = RobotSpec("franka_1", RobotKind.ARM)


def steps(*calls: tuple[str, dict | str]) -> list[tuple[str, str]]:
    return [(a, p if isinstance(p, str) else json.dumps(p)) for a, p in calls]


def test_the_shipped_schema_gives_each_kind_its_skills():
    assert SCHEMA.skills_of(RobotKind.MOBILE) == ("move_to", "stop", "wait")
    assert SCHEMA.skills_of(RobotKind.ARM) == ("move_joints", "stop", "wait")
    assert SCHEMA.pose_choices() == ("home", "ready", "extended")
    assert SCHEMA.signature("move_to") == "move_to(x, y)" and SCHEMA.max_steps == 4


def test_a_valid_plan_becomes_skill_calls_with_numbers_as_floats():
    calls = SCHEMA.validate(RobotKind.MOBILE, steps(("move_to", {"x": 3, "y": -1.5}), ("wait", {"seconds": 2}),
                                                    ("stop", "")), POSES)
    assert calls == [Step("move_to", {"x": 3.0, "y": -1.5}), Step("wait", {"seconds": 2.0}),
                     Step("stop", {})]
    assert calls[0].text() == "move_to(x=3.0, y=-1.5)"
    assert SCHEMA.validate(RobotKind.ARM, steps(("move_joints", {"pose": "ready"})), POSES) == [
        Step("move_joints", {"pose": "ready"})]


@pytest.mark.parametrize("kind, plan, reason", [
    (RobotKind.MOBILE, [], "empty_plan"),
    (RobotKind.MOBILE, steps(*[("stop", "")] * 5), "long_plan"),
    (RobotKind.MOBILE, steps(("fly", {})), "unknown_skill"),
    (RobotKind.MOBILE, steps(("move_joints", {"pose": "ready"})), "skill_not_for_robot"),
    (RobotKind.ARM, steps(("move_to", {"x": 1, "y": 1})), "skill_not_for_robot"),
    (RobotKind.MOBILE, steps(("move_to", {"x": 1})), "missing_parameter"),
    (RobotKind.MOBILE, steps(("move_to", {"x": 1, "y": 1, "z": 2})), "unknown_parameter"),
    (RobotKind.MOBILE, steps(("move_to", {"x": "far", "y": 1})), "bad_parameter_type"),
    (RobotKind.MOBILE, steps(("move_to", {"x": True, "y": 1})), "bad_parameter_type"),
    (RobotKind.MOBILE, steps(("move_to", '{"x": NaN, "y": 1}')), "bad_parameter_value"),
    (RobotKind.MOBILE, steps(("move_to", {"x": 1e6, "y": 1})), "parameter_out_of_range"),
    (RobotKind.MOBILE, steps(("wait", {"seconds": -1})), "parameter_out_of_range"),
    (RobotKind.ARM, steps(("move_joints", {"pose": "dance"})), "unknown_choice"),
    (RobotKind.MOBILE, steps(("move_to", "{x: 1")), "bad_parameters_json"),
    (RobotKind.MOBILE, steps(("move_to", "[1, 2]")), "bad_parameters_json"),
    (RobotKind.MOBILE, steps(("stop", ""), ("move_to", {"x": 1})), "missing_parameter"),  # one bad step: nothing runs
])
def test_a_malformed_plan_is_refused_whole_by_reason(kind, plan, reason):
    with pytest.raises(InvalidInput) as err:
        SCHEMA.validate(kind, plan, POSES)
    assert err.value.reason == reason


def test_a_schema_pose_the_robot_does_not_define_is_refused():
    with pytest.raises(InvalidInput) as err:
        SCHEMA.validate(RobotKind.ARM, steps(("move_joints", {"pose": "extended"})), {"home": (0.0,)})
    assert err.value.reason == "unknown_pose"


@pytest.mark.parametrize("raw, words", [
    ({}, "actions"),
    ({"actions": {"teleport": {}}}, "teleport"),
    ({"actions": {"move_to": {"x": {"type": "number"}}}}, "exactly"),
    ({"actions": {"move_to": {"x": {"type": "vector"}, "y": {}}}}, "vector"),
    ({"actions": {"stop": {}}, "kinds": {"drone": ["stop"]}}, "drone"),
    ({"actions": {"stop": {}}, "kinds": {"arm": ["wait"]}}, "wait"),
    ({"actions": {"move_to": {"x": {}, "y": {}}}, "kinds": {"arm": ["move_to"]}}, "cannot execute"),
    ({"actions": {"stop": {}}, "max_steps": 0}, "max_steps"),
])
def test_a_bad_schema_is_refused_with_what_is_wrong(raw, words):
    with pytest.raises(ValueError, match=words):
        SkillSchema.from_dict(raw)


def test_go_to_goal_turns_toward_a_goal_behind_then_drives_within_its_limits():
    limits = ExecLimits(max_linear_speed=0.5, max_angular_speed=1.0)
    v, w = go_to_goal(Pose2D(0, 0, 0), (-2.0, 0.1), limits)
    assert v == 0.0 and w == pytest.approx(1.0)  # behind: turn in place at the yaw rate limit
    v, w = go_to_goal(Pose2D(0, 0, 0), (10.0, 0.0), limits)
    assert v == pytest.approx(0.5) and w == pytest.approx(0.0)
    v, _ = go_to_goal(Pose2D(0, 0, 0), (0.1, 0.0), limits)
    assert 0.0 < v < 0.5  # slows down near the goal


def test_segment_distance_and_step_toward():
    assert segment_distance((1.0, 1.0), (0.0, 0.0), (2.0, 0.0)) == pytest.approx(1.0)
    assert segment_distance((3.0, 0.0), (0.0, 0.0), (2.0, 0.0)) == pytest.approx(1.0)  # past the end
    assert segment_distance((1.0, 1.0), (0.0, 0.0), (0.0, 0.0)) == pytest.approx(math.sqrt(2))
    assert step_toward((0.0, 1.0), (1.0, 1.05), 0.1) == pytest.approx((0.1, 1.05))


class Unicycle:
    """A base integrating the executor's commands (stuck: never moves)."""

    def __init__(self, stuck: bool = False):
        self.pose, self.stuck = Pose2D(0.0, 0.0, 0.0), stuck

    def state(self) -> RobotState:
        return RobotState(base=BaseState(self.pose, 0.0, 0.0))

    def apply(self, twist, dt: float) -> None:
        if self.stuck or twist is None:
            return
        v, w = twist
        p = self.pose
        self.pose = Pose2D(p.x + v * math.cos(p.yaw) * dt, p.y + v * math.sin(p.yaw) * dt, p.yaw + w * dt)


def run(executor: RobotExecutor, body, seconds: float, dt: float = 0.05):
    """Tick `executor` for `seconds` of simulated time; every outcome and the commands sent."""
    outcomes, commands = [], []
    for i in range(int(seconds / dt)):
        command, done = executor.tick(i * dt, body.state())
        commands.append(command)
        outcomes += done
        body.apply(command, dt)
        if done and not executor.has_goal:
            break
    return outcomes, commands


def test_move_to_reaches_its_goal_close_to_the_straight_segment():
    executor, body = RobotExecutor(CARTER, ExecLimits(), POSES), Unicycle()
    executor.set_plan("p1", [Step("move_to", {"x": 2.0, "y": 1.0})])
    errors = []
    for i in range(600):
        command, outcomes = executor.tick(i * 0.05, body.state())
        body.apply(command.twist, 0.05)
        if math.isfinite(executor.tracking_error):
            errors.append(executor.tracking_error)
        if outcomes:
            break
    assert [(o.success, o.failure, o.plan_id, o.index) for o in outcomes] == [(True, Failure.NONE, "p1", 0)]
    assert math.dist((body.pose.x, body.pose.y), (2.0, 1.0)) <= ExecLimits().goal_tolerance_m
    assert max(errors) < 0.2 and not executor.has_goal and math.isnan(executor.tracking_error)
    assert command.twist == (0.0, 0.0)


def test_a_base_that_cannot_move_times_out_and_abandons_the_rest_of_its_plan():
    executor = RobotExecutor(CARTER, ExecLimits(move_timeout_s=2.0), POSES)
    executor.set_plan("p", [Step("move_to", {"x": 2.0, "y": 0.0}), Step("wait", {"seconds": 1.0})])
    body = Unicycle(stuck=True)
    outcomes = []
    for i in range(100):
        command, done = executor.tick(i * 0.05, body.state())
        outcomes += done
        if done:
            break
    assert [(o.call.action, o.success, o.failure) for o in outcomes] == [("move_to", False, Failure.TIMEOUT)]
    assert "after 2 s" in outcomes[0].detail and not executor.has_goal and command.twist == (0.0, 0.0)


class Arm:
    """An arm tracking its commanded joints with a first-order lag."""

    def __init__(self, joints=(0.0, 0.0), lag: float = 0.3):
        self.joints, self.lag = tuple(joints), lag

    def state(self) -> RobotState:
        return RobotState(joints=self.joints)

    def apply(self, joints, dt: float) -> None:
        if joints is not None:
            self.joints = tuple(q + self.lag * (c - q) for q, c in zip(self.joints, joints, strict=True))


def test_move_joints_commands_bounded_steps_until_the_pose_is_within_tolerance():
    limits = ExecLimits(max_joint_speed=1.0)
    executor, arm = RobotExecutor(FRANKA, limits, POSES), Arm()
    executor.set_plan("p", [Step("move_joints", {"pose": "ready"})])
    previous, outcomes = (0.0, 0.0), []
    for i in range(400):
        command, outcomes = executor.tick(i * 0.05, arm.state())
        if not outcomes:
            assert max(abs(a - b) for a, b in zip(command.joints, previous, strict=True)) <= 0.05 + 1e-9
            previous = command.joints
        arm.apply(command.joints, 0.05)
        if outcomes:
            break
    assert [(o.success, o.call.parameters["pose"]) for o in outcomes] == [(True, "ready")]
    assert command.joints == POSES["ready"]  # the final target is sent as well
    assert max(abs(a - b) for a, b in zip(arm.joints, POSES["ready"], strict=True)) <= limits.joint_tolerance_rad


def test_an_arm_that_does_not_follow_times_out_and_is_held_where_it_is():
    executor = RobotExecutor(FRANKA, ExecLimits(joints_timeout_s=1.0), POSES)
    executor.set_plan("p", [Step("move_joints", {"pose": "ready"})])
    arm = Arm(joints=(0.2, 0.1), lag=0.0)
    for i in range(60):
        command, outcomes = executor.tick(i * 0.05, arm.state())
        if outcomes:
            break
    assert outcomes[0].failure == Failure.TIMEOUT and command.joints == (0.2, 0.1)


def test_stop_wait_and_a_new_plan():
    arm = Arm(joints=(0.3, 0.2))
    executor = RobotExecutor(FRANKA, ExecLimits(), POSES)
    executor.set_plan("p", [Step("stop", {})])
    command, outcomes = executor.tick(0.0, arm.state())
    assert command.joints == (0.3, 0.2) and outcomes[0].success  # stop holds the measured joints
    executor.set_plan("w", [Step("wait", {"seconds": 1.0})])
    assert executor.tick(1.0, arm.state())[1] == [] and executor.has_goal
    command, outcomes = executor.tick(2.0, arm.state())
    assert outcomes[0].detail == "waited 1 s" and command.joints is None and not executor.has_goal
    executor.set_plan("m", [Step("move_joints", {"pose": "ready"})])
    executor.set_plan("h", [Step("move_joints", {"pose": "home"})])  # replaces the plan before it ran
    assert executor.current == Step("move_joints", {"pose": "home"}) and executor.plan_id == "h"


def test_nothing_runs_before_the_robot_has_a_state():
    executor = RobotExecutor(CARTER, ExecLimits(), POSES)
    executor.set_plan("p", [Step("move_to", {"x": 1.0, "y": 0.0})])
    command, outcomes = executor.tick(0.0, RobotState())
    assert command.twist == (0.0, 0.0) and outcomes == [] and executor.has_goal
    assert RobotExecutor(FRANKA, ExecLimits(), POSES).hold(RobotState()).joints is None
