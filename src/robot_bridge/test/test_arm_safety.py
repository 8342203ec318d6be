"""arm_safety: every command check, its refusal reason, the geometry, the watchdog, the backoff and the gate."""

import dataclasses
import math
import random
from pathlib import Path

import pytest
from ament_index_python.packages import get_package_share_directory

from brace_common.config import ConfigError, config_from_file, load_ros_parameters
from brace_common.validation import Rejections
from robot_bridge.piper import arm_safety as s
from robot_bridge.piper.piper_arm_config import PiperArmConfig
from robot_bridge.piper.piper_units import GRIPPER_RANGE_M, JOINT_LIMITS_RAD

LIMITS = s.SafetyLimits()
HOME = [0.0, 0.5, -0.5, 0.0, 0.3, 0.0]          # inside every joint's limits
POSE = [0.2, 0.0, 0.3, 0.0, math.pi / 2, 0.0]   # inside the default workspace box


def flat(m) -> list[float]:
    return [v for row in m for v in row]


def reason(call, *args) -> str:
    with pytest.raises(s.Refused) as info:
        call(*args)
    return info.value.reason


# ---------------------------------------------------------------------------------------------- limits


def test_default_joint_limits_are_the_sdk_table():
    assert list(zip(LIMITS.joint_lower_rad, LIMITS.joint_upper_rad, strict=True)) == list(JOINT_LIMITS_RAD)
    assert LIMITS.gripper_range_m == GRIPPER_RANGE_M
    LIMITS.validate()


@pytest.mark.parametrize("change, text", [
    ({"joint_lower_rad": (-3.0, 0.0, -2.967, -1.745, -1.22, -2.09439)}, "beyond the SDK"),
    ({"joint_upper_rad": (2.6179, 3.14, 0.0, 1.745, 1.22, 2.2)}, "beyond the SDK"),
    ({"joint_lower_rad": (0.1,) * 5}, "6 values"),
    ({"joint_lower_rad": (1.0, 0.0, -2.967, -1.745, -1.22, -2.09439),
      "joint_upper_rad": (0.5, 3.14, 0.0, 1.745, 1.22, 2.09439)}, "below upper"),
    ({"workspace_min_m": (0.0, 0.0, 1.0)}, "workspace z"),
    ({"workspace_max_m": (0.1, math.nan, 0.5)}, "workspace y"),
    ({"max_joint_step_rad": 0.0}, "max_joint_step_rad"),
    ({"max_translation_step_m": math.inf}, "max_translation_step_m"),
    ({"gripper_range_m": (0.0, 0.1)}, "stroke"),
    ({"gripper_range_m": (0.05, 0.01)}, "increasing"),
    ({"speed_percent": 0}, "speed_percent"),
])
def test_inconsistent_limits_are_named(change, text):
    with pytest.raises(ValueError, match=text):
        dataclasses.replace(LIMITS, **change).validate()


# ---------------------------------------------------------------------------------------------- joints


def test_joint_command_within_limits_and_step_is_accepted_unchanged():
    target = [h + 0.1 for h in HOME]
    target[2] = -0.6
    assert s.check_joints(target, HOME, LIMITS) == target


@pytest.mark.parametrize("joint, value", [(0, 2.7), (1, -0.01), (2, 0.01), (3, -1.8), (4, 1.3), (5, 2.1)])
def test_each_joint_limit_refuses(joint, value):
    target = list(HOME)
    target[joint] = value
    current = list(target)  # no step: only the limit can refuse
    with pytest.raises(s.Refused, match=f"joint{joint + 1}") as info:
        s.check_joints(target, current, LIMITS)
    assert info.value.reason == "joint_limit"


def test_joint_limits_are_inclusive_and_configurable():
    edge = [JOINT_LIMITS_RAD[i][1] for i in range(6)]
    assert s.check_joints(edge, edge, LIMITS) == edge
    narrow = dataclasses.replace(LIMITS, joint_upper_rad=(1.0, 3.14, 0.0, 1.745, 1.22, 2.09439))
    target = list(HOME)
    target[0] = 1.01
    assert reason(s.check_joints, target, target, narrow) == "joint_limit"


def test_joint_step_refuses_a_far_target_and_names_the_joint():
    target = list(HOME)
    target[4] = HOME[4] + LIMITS.max_joint_step_rad + 1e-6
    with pytest.raises(s.Refused, match="joint5") as info:
        s.check_joints(target, HOME, LIMITS)
    assert info.value.reason == "joint_step"
    target[4] = HOME[4] + LIMITS.max_joint_step_rad  # exactly one step is allowed
    assert s.check_joints(target, HOME, LIMITS) == target


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_joint_targets_are_refused_before_anything_else(bad):
    target = list(HOME)
    target[3] = bad
    assert reason(s.check_joints, target, HOME, LIMITS) == "non_finite"
    assert reason(s.check_joints, target, None, LIMITS) == "non_finite"


def test_joint_command_without_feedback_or_of_wrong_length_is_refused():
    assert reason(s.check_joints, HOME, None, LIMITS) == "no_feedback"
    assert reason(s.check_joints, HOME[:5], HOME, LIMITS) == "malformed"


def test_random_targets_are_accepted_exactly_when_within_limits_and_step():
    rng = random.Random(7)
    accepted = refused = 0
    for _ in range(2000):
        current = [rng.uniform(lo, hi) for lo, hi in JOINT_LIMITS_RAD]
        target = [c + rng.uniform(-0.3, 0.3) for c in current]
        ok = all(lo <= t <= hi for t, (lo, hi) in zip(target, JOINT_LIMITS_RAD, strict=True)) and \
            all(abs(t - c) <= LIMITS.max_joint_step_rad for t, c in zip(target, current, strict=True))
        try:
            s.check_joints(target, current, LIMITS)
            accepted += 1
            assert ok
        except s.Refused as exc:
            refused += 1
            assert not ok and exc.reason in ("joint_limit", "joint_step")
    assert accepted > 50 and refused > 50


# ---------------------------------------------------------------------------------------------- joint commands by name


def test_named_joints_fill_the_rest_from_the_measured_angles():
    joints, gripper = s.resolve_joint_targets(["joint3", "joint1"], [-0.4, 0.1], HOME)
    assert joints == [0.1, 0.5, -0.4, 0.0, 0.3, 0.0] and gripper is None
    joints, gripper = s.resolve_joint_targets(["gripper", "joint6"], [0.03, 0.2], HOME)
    assert joints == [0.0, 0.5, -0.5, 0.0, 0.3, 0.2] and gripper == 0.03


def test_gripper_only_and_unnamed_commands():
    assert s.resolve_joint_targets(["gripper"], [0.02], None) == (None, 0.02)
    assert s.resolve_joint_targets([], HOME, HOME) == (HOME, None)
    assert s.resolve_joint_targets([], HOME + [0.05], HOME) == (HOME, 0.05)


@pytest.mark.parametrize("names, positions, why", [
    (["joint1", "joint2"], [0.1], "malformed"),
    (["joint1", "joint1"], [0.1, 0.2], "malformed"),
    ([], [0.1] * 5, "malformed"),
    (["joint7"], [0.1], "unknown_joint"),
    (["joint1"], [math.nan], "non_finite"),
    (["joint2"], [0.5], "no_feedback"),
])
def test_bad_joint_commands_are_refused_with_their_reason(names, positions, why):
    current = None if why == "no_feedback" else HOME
    assert reason(s.resolve_joint_targets, names, positions, current) == why


def test_an_unknown_name_is_shortened_in_the_message():
    with pytest.raises(s.Refused) as info:
        s.resolve_joint_targets(["x" * 10_000], [0.0], HOME)
    assert len(str(info.value)) < 200


# ---------------------------------------------------------------------------------------------- gripper


def test_gripper_range():
    assert s.check_gripper(0.0, LIMITS) == 0.0
    assert s.check_gripper(0.07, LIMITS) == 0.07
    assert reason(s.check_gripper, 0.0701, LIMITS) == "gripper_range"
    assert reason(s.check_gripper, -0.001, LIMITS) == "gripper_range"
    assert reason(s.check_gripper, math.nan, LIMITS) == "non_finite"
    narrow = dataclasses.replace(LIMITS, gripper_range_m=(0.01, 0.05))
    assert reason(s.check_gripper, 0.005, narrow) == "gripper_range"


# ---------------------------------------------------------------------------------------------- end-effector deltas


def test_ee_delta_translates_in_the_base_frame():
    target = s.check_ee_delta(POSE, [0.01, -0.02, 0.03], [0.0, 0.0, 0.0], LIMITS)
    assert target[:3] == pytest.approx([0.21, -0.02, 0.33])
    assert flat(s.rpy_to_matrix(*target[3:])) == pytest.approx(flat(s.rpy_to_matrix(*POSE[3:])), abs=1e-12)


def test_ee_delta_rotation_composes_in_the_base_frame():
    pose = [0.2, 0.0, 0.3, 0.1, 0.2, 0.3]
    target = s.check_ee_delta(pose, [0, 0, 0], [0.0, 0.0, 0.15], LIMITS)
    # a yaw delta about the base z axis only adds to yaw with this convention
    assert target[3:] == pytest.approx([0.1, 0.2, 0.45])
    target = s.check_ee_delta(pose, [0, 0, 0], [0.1, 0.0, 0.0], LIMITS)
    expected = s.matmul(s.rpy_to_matrix(0.1, 0, 0), s.rpy_to_matrix(0.1, 0.2, 0.3))
    assert flat(s.rpy_to_matrix(*target[3:])) == pytest.approx(flat(expected), abs=1e-12)


def test_ee_delta_step_limits():
    assert reason(s.check_ee_delta, POSE, [0.04, 0.04, 0.0], [0, 0, 0], LIMITS) == "translation_step"
    assert reason(s.check_ee_delta, POSE, [0, 0, 0], [0.15, 0.15, 0.0], LIMITS) == "rotation_step"
    assert s.check_ee_delta(POSE, [0.05, 0, 0], [0.2, 0, 0], LIMITS)  # exactly one step


def test_ee_delta_outside_the_workspace_is_refused():
    limits = dataclasses.replace(LIMITS, workspace_max_m=(0.6, 0.6, 0.32))
    assert s.check_ee_delta(POSE, [0, 0, 0.02], [0, 0, 0], limits)
    with pytest.raises(s.Refused, match="z = 0.3300") as info:
        s.check_ee_delta(POSE, [0, 0, 0.03], [0, 0, 0], limits)
    assert info.value.reason == "workspace"


@pytest.mark.parametrize("translation, rotation", [([math.nan, 0, 0], [0, 0, 0]), ([0, 0, 0], [0, math.inf, 0])])
def test_non_finite_ee_delta_is_refused(translation, rotation):
    assert reason(s.check_ee_delta, POSE, translation, rotation, LIMITS) == "non_finite"


def test_ee_delta_without_an_end_pose_is_refused():
    assert reason(s.check_ee_delta, None, [0.01, 0, 0], [0, 0, 0], LIMITS) == "no_feedback"


# ---------------------------------------------------------------------------------------------- geometry


def test_rpy_round_trips_through_matrices_and_quaternions():
    rng = random.Random(3)
    for _ in range(500):
        rpy = (rng.uniform(-math.pi, math.pi), rng.uniform(-1.5, 1.5), rng.uniform(-math.pi, math.pi))
        m = s.rpy_to_matrix(*rpy)
        assert s.matrix_to_rpy(m) == pytest.approx(rpy, abs=1e-9)
        x, y, z, w = s.rpy_to_quaternion(*rpy)
        assert x * x + y * y + z * z + w * w == pytest.approx(1.0)
        # the quaternion's rotation matrix is the same rotation
        q = ((1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)),
             (2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)),
             (2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)))
        assert flat(q) == pytest.approx(flat(m), abs=1e-9)


def test_gimbal_lock_keeps_the_rotation():
    m = s.rpy_to_matrix(0.3, math.pi / 2, 0.0)
    assert flat(s.rpy_to_matrix(*s.matrix_to_rpy(m))) == pytest.approx(flat(m), abs=1e-9)


def test_rotation_angle():
    assert s.rotation_angle(s.rpy_to_matrix(0, 0, 0)) == 0.0
    assert s.rotation_angle(s.rpy_to_matrix(0.3, 0, 0)) == pytest.approx(0.3)
    assert s.rotation_angle(s.rpy_to_matrix(0, 0, -2.0)) == pytest.approx(2.0)


# ---------------------------------------------------------------------------------------------- timing


def test_watchdog_fires_once_per_lapse():
    dog = s.CommandWatchdog(0.5)
    assert not dog.expired(100.0) and not dog.commanding(100.0)  # nothing commanded: nothing to hold
    dog.feed(100.0)
    assert dog.commanding(100.4) and not dog.expired(100.4)
    assert dog.expired(100.5)
    assert not dog.expired(100.6) and not dog.commanding(100.6)
    dog.feed(101.0)
    dog.feed(101.4)
    assert not dog.expired(101.8)
    assert dog.expired(101.9) and dog.lapses == 2
    dog.feed(102.0)
    dog.reset()
    assert not dog.expired(103.0)
    with pytest.raises(ValueError):
        s.CommandWatchdog(0.0)


# ---------------------------------------------------------------------------------------------- gate


def test_latest_commands_run_the_newest_and_count_the_superseded():
    box = s.LatestCommands(["joint_cmd", "gripper_cmd"])
    assert box.pop() is None and not box.pending()
    box.put("joint_cmd", "j1")
    box.put("gripper_cmd", "g1")
    box.put("joint_cmd", "j2")  # replaces j1, which never ran
    assert box.pending()
    assert box.pop() == ("gripper_cmd", "g1")  # the input put longest ago first
    assert box.pop() == ("joint_cmd", "j2") and box.pop() is None
    box.put("joint_cmd", "j3")
    assert box.pop() == ("joint_cmd", "j3")  # run before the next came: nothing superseded
    assert box.counts == {"taken.joint_cmd": 3, "dropped.joint_cmd.superseded": 1, "lost.joint_cmd.sequence_gap": 0,
                          "taken.gripper_cmd": 1, "dropped.gripper_cmd.superseded": 0, "lost.gripper_cmd.sequence_gap": 0}
    with pytest.raises(KeyError):
        box.put("ee_delta_cmd", "x")


def test_latest_commands_count_sequence_gaps_per_publisher_as_lost():
    box = s.LatestCommands(["joint_cmd"])
    box.put("joint_cmd", 0, b"a", 7)   # the first seen from a publisher only starts its count
    box.put("joint_cmd", 1, b"a", 8)
    box.put("joint_cmd", 2, b"b", 1)
    box.put("joint_cmd", 3, b"a", 12)  # 9, 10, 11 never taken
    box.put("joint_cmd", 4, b"b", 3)   # 2 never taken
    box.put("joint_cmd", 5, b"a", 11)  # out of order: no gap, no negative count
    box.put("joint_cmd", 6, b"a", 13)
    box.put("joint_cmd", 7, None, 99)  # no publisher: nothing to compare
    assert box.counts["lost.joint_cmd.sequence_gap"] == 4
    assert box.counts["taken.joint_cmd"] == 8 and box.counts["dropped.joint_cmd.superseded"] == 7
    assert box.dropped() == 11
    for n in range(s.LatestCommands.MAX_PUBLISHERS + 10):  # memory stays bounded under many publishers
        box.put("joint_cmd", n, n.to_bytes(4, "big"), 1)
    assert box._gaps["joint_cmd"].publishers == s.LatestCommands.MAX_PUBLISHERS


def test_gate_reasons_in_order_of_precedence():
    gate = s.CommandGate()
    assert gate.refusal().reason == "inactive"
    gate.active = True
    assert gate.refusal() is None
    gate.check()
    gate.faults = ("collision",)
    assert gate.refusal().reason == "fault" and "collision" in str(gate.refusal())
    gate.stopped = True
    with pytest.raises(s.Refused) as info:
        gate.check()
    assert info.value.reason == "stopped"


def test_refusals_count_by_reason_as_the_node_reports_them():
    rejections = Rejections()
    for call, args in [(s.check_gripper, (math.nan, LIMITS)), (s.check_gripper, (1.0, LIMITS)),
                       (s.check_joints, ([9.0] * 6, HOME, LIMITS))]:
        try:
            call(*args)
        except s.Refused as exc:
            rejections.reject("cmd", exc)
    assert rejections.counts == {"cmd.non_finite": 1, "cmd.gripper_range": 1, "cmd.joint_limit": 1}
    assert set(s.REASONS) >= {key.split(".")[1] for key in rejections.counts}


# ---------------------------------------------------------------------------------------------- node configuration


def test_config_defaults_are_valid_and_give_the_default_limits():
    cfg = PiperArmConfig()
    cfg.validate()
    assert cfg.limits() == LIMITS


@pytest.mark.parametrize("change, parameter", [
    ({"can_interface": "nonsense"}, "can_interface"),
    ({"can_port": " "}, "can_port"),
    ({"agent_id": ""}, "agent_id"),
    ({"feedback_period_s": 0.0}, "feedback_period_s"),
    ({"command_timeout_s": math.nan}, "command_timeout_s"),
    ({"speed_percent": 101}, "speed_percent"),
    ({"joint_lower_rad": [-3.0, 0.0, -2.967, -1.745, -1.22, -2.09]}, "joint_lower_rad"),
    ({"joint_upper_rad": [1.0, 1.0, 0.0]}, "joint_upper_rad"),
    ({"joint_lower_rad": [0.5, 0.0, -2.967, -1.745, -1.22, -2.09], "joint_upper_rad": [0.4, 3.14, 0.0, 1.745, 1.22,
                                                                                           2.09]}, "joint_upper_rad"),
    ({"workspace_min_m": [0.0, 0.0]}, "workspace_min_m"),
    ({"workspace_max_m": [0.5, 0.5, -0.1]}, "workspace_max_m"),
    ({"gripper_max_m": 0.08}, "gripper_max_m"),
    ({"gripper_min_m": 0.05, "gripper_max_m": 0.04}, "gripper_max_m"),
    ({"reconnect_initial_s": 5.0, "reconnect_max_s": 1.0}, "reconnect_max_s"),
    ({"silence_timeout_s": 0.0}, "silence_timeout_s"),
    ({"silence_timeout_s": 0.02, "supervision_period_s": 0.05}, "silence_timeout_s"),
    ({"silence_recovery_s": -1.0}, "silence_recovery_s"),
    ({"agent_id": "arm_0/../x"}, "agent_id"),
])
def test_invalid_config_names_the_parameter(change, parameter):
    with pytest.raises(ConfigError) as info:
        dataclasses.replace(PiperArmConfig(), **change).validate()
    assert info.value.parameter == parameter


def test_the_parameter_file_sets_every_parameter_to_its_default():
    path = Path(get_package_share_directory("brace_bringup")) / "params" / "piper_arm.yaml"
    values = load_ros_parameters(path, "piper_arm")
    assert set(values) == {f.name for f in dataclasses.fields(PiperArmConfig)}
    assert config_from_file(PiperArmConfig, path, "piper_arm") == PiperArmConfig()
