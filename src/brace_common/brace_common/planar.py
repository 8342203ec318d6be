"""Poses on a plane (a floor, a table top): position and heading, angles wrapped to one turn, and a mobile base's
state from one odometry sample."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .validation import InvalidInput

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


def yaw_of(qx: float, qy: float, qz: float, qw: float) -> float:
    """Heading (rotation about z) of a quaternion; InvalidInput when it is not finite or has no length."""
    norm = math.sqrt(qx * qx + qy * qy + qz * qz + qw * qw)
    if not math.isfinite(norm) or norm < 1e-9:
        raise InvalidInput("bad_orientation", "orientation is not a finite non-zero quaternion")
    qx, qy, qz, qw = qx / norm, qy / norm, qz / norm, qw / norm
    return math.atan2(2.0 * (qw * qz + qx * qy), 1.0 - 2.0 * (qy * qy + qz * qz))


@dataclass(frozen=True)
class BaseState:
    """A mobile base from its odometry: pose in the frame its origin is given in, body-frame speeds."""

    pose: Pose2D
    linear: float   # forward speed (m/s)
    angular: float  # yaw rate (rad/s)


def base_state(origin: Pose2D, position: tuple[float, float, float], orientation: tuple[float, float, float, float],
               linear: tuple[float, float, float], angular: tuple[float, float, float]) -> BaseState:
    """A base's state from one odometry sample (pose relative to `origin`); InvalidInput on non-finite values."""
    for name, values in (("position", position), ("linear", linear), ("angular", angular)):
        if not all(math.isfinite(v) for v in values):
            raise InvalidInput(f"bad_{name}", f"odometry {name} is not finite")
    local = Pose2D(position[0], position[1], yaw_of(*orientation))
    return BaseState(origin.compose(local), linear[0], angular[2])
