"""piper_kinematics: our forward kinematics against piper_sdk's C_PiperForwardKinematics, Jacobian, inverse."""

import math
import random

import numpy as np
import pytest
from piper_sdk.kinematics import C_PiperForwardKinematics

from robot_bridge.piper.piper_kinematics import (
    PiperKinematics,
    matrix_to_pose,
    pose_to_matrix,
    rotation_log,
    rpy_to_rotation,
)
from robot_bridge.piper.piper_units import JOINT_LIMITS_RAD


def random_joints(rng: random.Random) -> list[float]:
    """A joint vector inside the SDK's limits."""
    return [rng.uniform(lo, hi) for lo, hi in JOINT_LIMITS_RAD]


def sdk_pose(sdk: C_PiperForwardKinematics, joints: list[float]) -> list[float]:
    """The SDK's flange pose in SI units (it answers mm and degrees)."""
    x, y, z, r, p, w = sdk.CalFK(joints)[-1]
    return [x / 1000.0, y / 1000.0, z / 1000.0, math.radians(r), math.radians(p), math.radians(w)]


@pytest.mark.parametrize("offset", [True, False])
def test_forward_matches_the_sdk_on_random_joints(offset):
    ours, sdk = PiperKinematics(dh_offset=offset), C_PiperForwardKinematics(0x01 if offset else 0x00)
    rng = random.Random(11 if offset else 12)
    for _ in range(500):
        q = random_joints(rng)
        assert ours.forward_pose(q) == pytest.approx(sdk_pose(sdk, q), abs=1e-6)
    # all six links, too
    q = random_joints(rng)
    for frame, link in zip(ours.link_frames(q), sdk.CalFK(q), strict=True):
        x, y, z, r, p, w = link
        expected = [x / 1000, y / 1000, z / 1000, math.radians(r), math.radians(p), math.radians(w)]
        assert list(matrix_to_pose(frame)) == pytest.approx(expected, abs=1e-6)


def test_zero_pose_is_the_sdks_documented_home():
    # the SDK documents the zero-joint flange pose: 56.128, 0, 213.266 mm, 0, 85, 0 deg (offset table)
    x, y, z, r, p, w = PiperKinematics(True).forward_pose([0.0] * 6)
    assert (x, y, z) == pytest.approx((0.056128, 0.0, 0.213266), abs=1e-6)
    assert (r, p, w) == pytest.approx((0.0, math.radians(85.0), 0.0), abs=1e-6)
    x, _, z, _, p, _ = PiperKinematics(False).forward_pose([0.0] * 6)
    # the original table's home, as the SDK documents it in whole millimetres
    assert (x, z, p) == pytest.approx((0.055, 0.205, math.radians(85.0)), abs=2e-3)


def test_rpy_and_rotation_log():
    rng = random.Random(5)
    for _ in range(200):
        rpy = (rng.uniform(-3.1, 3.1), rng.uniform(-1.5, 1.5), rng.uniform(-3.1, 3.1))
        pose = (0.1, 0.2, 0.3, *rpy)
        assert matrix_to_pose(pose_to_matrix(pose)) == pytest.approx(pose, abs=1e-9)
        rot = rpy_to_rotation(*rpy)
        vec = rotation_log(rot)
        angle = np.linalg.norm(vec)
        axis = vec / angle
        k = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
        assert np.eye(3) + math.sin(angle) * k + (1 - math.cos(angle)) * k @ k == pytest.approx(rot, abs=1e-9)
    assert np.linalg.norm(rotation_log(rpy_to_rotation(math.pi, 0, 0))) == pytest.approx(math.pi)
    assert rotation_log(np.eye(3)) == pytest.approx(np.zeros(3))


def test_jacobian_matches_finite_differences():
    kin = PiperKinematics()
    q = np.array(random_joints(random.Random(2)))
    jac = kin.jacobian(q)
    base = kin.forward(q)
    h = 1e-7
    for i in range(6):
        dq = q.copy()
        dq[i] += h
        moved = kin.forward(dq)
        assert (moved[:3, 3] - base[:3, 3]) / h == pytest.approx(jac[:3, i], abs=1e-5)
        assert rotation_log(moved[:3, :3] @ base[:3, :3].T) / h == pytest.approx(jac[3:, i], abs=1e-5)


def test_inverse_reaches_reachable_poses_within_limits():
    kin = PiperKinematics()
    rng = random.Random(8)
    reached = 0
    for _ in range(30):
        goal = random_joints(rng)
        pose = kin.forward_pose(goal)
        seed = [g + rng.uniform(-0.3, 0.3) for g in goal]
        result = kin.inverse(pose, seed, JOINT_LIMITS_RAD)
        for value, (lo, hi) in zip(result.joints, JOINT_LIMITS_RAD, strict=True):
            assert lo <= value <= hi
        if result.converged:
            reached += 1
            assert kin.forward_pose(result.joints) == pytest.approx(pose, abs=1e-3)
            assert result.position_error <= 1e-5
    assert reached >= 27  # near-singular goals may stall; nearly all must converge from a nearby seed


def test_inverse_reports_an_unreachable_pose():
    kin = PiperKinematics()
    seed = [0.0, 1.0, -1.0, 0.0, 0.5, 0.0]
    result = kin.inverse((1.5, 0.0, 0.3, 0.0, 0.0, 0.0), seed, JOINT_LIMITS_RAD, max_iterations=60, stall_iterations=100)
    assert not result.converged
    assert result.position_error > 0.5
    assert result.iterations == 60  # the bound
    stalled = kin.inverse((1.5, 0.0, 0.3, 0.0, 0.0, 0.0), seed, JOINT_LIMITS_RAD, max_iterations=1000)
    assert not stalled.converged and stalled.iterations < 1000  # gave up once it stopped getting closer
    with pytest.raises(ValueError, match="6 joint"):
        kin.forward([0.0] * 5)
