"""Poses on a plane (a floor, a table top): position and heading, and angles wrapped to one turn."""

from __future__ import annotations

import math
from dataclasses import dataclass

Vec = tuple[float, float]


def wrap_angle(angle: float) -> float:
    """`angle` in [-pi, pi)."""
    return (angle + math.pi) % (2.0 * math.pi) - math.pi


@dataclass(frozen=True)
class Pose2D:
    """A planar pose: position (m) and heading `yaw` (rad) in some frame."""

    x: float
    y: float
    yaw: float

    def compose(self, local: Pose2D) -> Pose2D:
        """`local` (given in this pose's frame) in the frame this pose is given in."""
        x, y = self.to_world((local.x, local.y))
        return Pose2D(x, y, wrap_angle(self.yaw + local.yaw))

    def to_world(self, p: Vec) -> Vec:
        """A point of this pose's frame in the frame the pose is given in."""
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        return (self.x + c * p[0] - s * p[1], self.y + s * p[0] + c * p[1])

    def to_block(self, p: Vec) -> Vec:
        """A point of the frame the pose is given in, in this pose's frame."""
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        dx, dy = p[0] - self.x, p[1] - self.y
        return (c * dx + s * dy, -s * dx + c * dy)

    def rotate(self, v: Vec) -> Vec:
        """A direction of this pose's frame in the frame the pose is given in."""
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        return (c * v[0] - s * v[1], s * v[0] + c * v[1])
