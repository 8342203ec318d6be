"""Planar poses: composing, the two frames' points and directions, wrapped angles."""

import math

import pytest

from brace_common.planar import Pose2D, wrap_angle


def test_wrap_angle_lands_in_one_turn():
    assert wrap_angle(3 * math.pi / 2) == pytest.approx(-math.pi / 2)
    assert wrap_angle(-math.pi) == pytest.approx(-math.pi) and wrap_angle(math.pi) == pytest.approx(-math.pi)
    assert wrap_angle(0.25) == 0.25


def test_points_go_between_the_frames_and_compose_agrees():
    pose = Pose2D(1.0, 2.0, math.pi / 2)
    assert pose.to_world((1.0, 0.0)) == pytest.approx((1.0, 3.0))          # the pose's x is the frame's y
    assert pose.to_block(pose.to_world((0.3, -0.2))) == pytest.approx((0.3, -0.2))
    assert pose.rotate((1.0, 0.0)) == pytest.approx((0.0, 1.0))
    moved = pose.compose(Pose2D(1.0, 0.0, math.pi))
    assert (moved.x, moved.y, moved.yaw) == pytest.approx((1.0, 3.0, -math.pi / 2))
