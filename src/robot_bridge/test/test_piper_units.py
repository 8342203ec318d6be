"""piper_units: SI <-> piper_sdk integer units, exact pi, rounding and the out-of-range policy."""

import math
import random

import pytest

from robot_bridge.piper import piper_units as u


def test_known_values_use_exact_pi():
    assert u.joint_to_sdk(math.pi) == 180_000
    assert u.joint_to_sdk(-math.pi / 2) == -90_000
    assert u.joint_to_sdk(1.0) == round(1000 * 180 / math.pi) == 57_296
    assert u.joint_from_sdk(180_000) == pytest.approx(math.pi, abs=1e-15)
    assert u.joint_from_sdk(90_000) == math.pi / 2
    # 3.14 instead of pi would be off by 91 units here
    assert u.joint_to_sdk(3.14) == 179_909


def test_position_gripper_effort_known_values():
    assert u.position_to_sdk(0.25) == 250_000
    assert u.position_to_sdk(-0.0000004) == 0
    assert u.position_from_sdk(123_456) == pytest.approx(0.123456)
    assert u.gripper_to_sdk(0.07) == 70_000
    assert u.gripper_from_sdk(35_000) == pytest.approx(0.035)
    assert u.gripper_effort_to_sdk(1.0) == 1000
    assert u.gripper_effort_from_sdk(2500) == 2.5
    assert u.milli_to_sdk16(-1.5, "speed") == -1500


def test_pose_round_trip_order_and_units():
    pose = [0.1, -0.2, 0.3, math.pi / 2, -math.pi / 4, math.pi]
    sdk = u.pose_to_sdk(pose)
    assert sdk == [100_000, -200_000, 300_000, 90_000, -45_000, 180_000]
    assert u.pose_from_sdk(sdk) == pytest.approx(pose, abs=1e-12)


def test_round_trips_within_half_a_unit():
    rng = random.Random(7)
    for _ in range(1000):
        a = rng.uniform(-math.pi, math.pi)
        assert abs(u.joint_from_sdk(u.joint_to_sdk(a)) - a) <= 0.5 / u.MILLIDEG_PER_RAD + 1e-15
        p = rng.uniform(-1.0, 1.0)
        assert abs(u.position_from_sdk(u.position_to_sdk(p)) - p) <= 0.5e-6 + 1e-15
        n = rng.randint(-3_000_000, 3_000_000)
        assert u.joint_to_sdk(u.joint_from_sdk(n)) == n
        assert u.position_to_sdk(u.position_from_sdk(n)) == n


def test_joints_vector_and_count():
    assert u.joints_to_sdk([0, math.pi / 2, -math.pi / 2, 0, 0, 0.001]) == [0, 90_000, -90_000, 0, 0, 57]
    assert u.joints_from_sdk([0, 90_000]) == [0.0, math.pi / 2]
    with pytest.raises(u.UnitRangeError, match="expected 6"):
        u.joints_to_sdk([0.0] * 5)


def test_out_of_range_and_non_finite_raise_naming_the_quantity():
    with pytest.raises(u.UnitRangeError, match="joint angle"):
        u.joint_to_sdk(1e9)
    with pytest.raises(u.UnitRangeError, match="joint3"):
        u.joints_to_sdk([0, 0, float("nan"), 0, 0, 0])
    with pytest.raises(u.UnitRangeError, match="gripper effort"):
        u.gripper_effort_to_sdk(-0.1)
    with pytest.raises(u.UnitRangeError, match="gripper effort"):
        u.gripper_effort_to_sdk(70.0)
    with pytest.raises(u.UnitRangeError, match="X"):
        u.pose_to_sdk([3000.0, 0, 0, 0, 0, 0])
    with pytest.raises(u.UnitRangeError):
        u.milli_to_sdk16(40.0, "speed")
    assert issubclass(u.UnitRangeError, ValueError)


def test_sdk_limit_table_and_clamp():
    from piper_sdk.piper_param import C_PiperParamManager

    origin = C_PiperParamManager().GetPiperParamOrigin()
    for i, (lo, hi) in enumerate(u.JOINT_LIMITS_RAD):
        assert tuple(origin["joint_limit"][f"j{i + 1}"]) == (lo, hi)
    assert tuple(origin["gripper_range"]) == u.GRIPPER_RANGE_M
    assert u.clamp_joints([5.0, -1.0, 1.0, 0.0, -9.0, 0.5]) == [2.6179, 0.0, 0.0, 0.0, -1.22, 0.5]
    assert u.joint_limit_millideg(0) == (-149_995, 149_995)  # 2.6179 rad = 149.9947 deg
