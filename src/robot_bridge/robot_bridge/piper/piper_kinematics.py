"""PiPER arm kinematics: forward kinematics from the arm's modified (Craig) DH parameters, geometric Jacobian, and a
bounded damped-least-squares inverse kinematics. SI units throughout (m, rad).

The DH table is the one piper_sdk 0.6.2 documents for the arm (kinematics/piper_fk.py): link lengths a, twists
alpha, offsets d, and the joint-angle offsets of joints 2 and 3, which differ by 2 degrees between the arms whose
zero position was offset (`dh_offset=True`, the SDK interface's default `dh_is_offset=0x01`: -172.22 deg and
-102.78 deg) and the original table (`dh_offset=False`: -174.22 deg and -100.78 deg). The end pose is the pose of
the sixth link's frame (the flange), as the SDK's forward kinematics and the arm's end-pose feedback report it,
with Euler angles in the SDK's convention: R = Rz(yaw) Ry(pitch) Rx(roll).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

_A = (0.0, 0.0, 0.28503, -0.02198, 0.0, 0.0)
_ALPHA = (0.0, -math.pi / 2, 0.0, math.pi / 2, -math.pi / 2, math.pi / 2)
_D = (0.123, 0.0, 0.0, 0.25075, 0.0, 0.091)
_THETA_OFFSET_DEG = {True: (0.0, -172.22, -102.78, 0.0, 0.0, 0.0), False: (0.0, -174.22, -100.78, 0.0, 0.0, 0.0)}
_GIMBAL_EPS = 1e-4  # |R20| this close to 1: pitch is +-90 deg, yaw is set to 0 (as the SDK does)


def link_transform(alpha: float, a: float, theta: float, d: float) -> np.ndarray:
    """The 4x4 transform of one modified-DH link: RotX(alpha) TransX(a) RotZ(theta) TransZ(d)."""
    ca, sa, ct, st = math.cos(alpha), math.sin(alpha), math.cos(theta), math.sin(theta)
    return np.array([
        [ct, -st, 0.0, a],
        [st * ca, ct * ca, -sa, -sa * d],
        [st * sa, ct * sa, ca, ca * d],
        [0.0, 0.0, 0.0, 1.0],
    ])


def rotation_to_rpy(rot: np.ndarray) -> tuple[float, float, float]:
    """(roll, pitch, yaw) of a rotation matrix, R = Rz(yaw) Ry(pitch) Rx(roll), with the SDK's gimbal-lock rule."""
    r20 = float(rot[2, 0])
    if r20 < -1.0 + _GIMBAL_EPS:
        return math.atan2(rot[0, 1], rot[1, 1]), math.pi / 2, 0.0
    if r20 > 1.0 - _GIMBAL_EPS:
        return -math.atan2(rot[0, 1], rot[1, 1]), -math.pi / 2, 0.0
    pitch = math.atan2(-r20, math.hypot(rot[0, 0], rot[1, 0]))
    return math.atan2(rot[2, 1], rot[2, 2]), pitch, math.atan2(rot[1, 0], rot[0, 0])


def rpy_to_rotation(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """Rz(yaw) Ry(pitch) Rx(roll)."""
    cr, sr, cp, sp, cy, sy = math.cos(roll), math.sin(roll), math.cos(pitch), math.sin(pitch), math.cos(yaw), math.sin(yaw)
    return np.array([
        [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
        [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
        [-sp, cp * sr, cp * cr],
    ])


def pose_to_matrix(pose: Sequence[float]) -> np.ndarray:
    """A 4x4 transform from (x, y, z, roll, pitch, yaw)."""
    out = np.eye(4)
    out[:3, :3] = rpy_to_rotation(pose[3], pose[4], pose[5])
    out[:3, 3] = pose[:3]
    return out


def matrix_to_pose(transform: np.ndarray) -> tuple[float, float, float, float, float, float]:
    """(x, y, z, roll, pitch, yaw) of a 4x4 transform."""
    roll, pitch, yaw = rotation_to_rpy(transform[:3, :3])
    x, y, z = (float(v) for v in transform[:3, 3])
    return x, y, z, roll, pitch, yaw


def rotation_log(rot: np.ndarray) -> np.ndarray:
    """The rotation vector (axis * angle, rad) of a rotation matrix."""
    cos_angle = max(-1.0, min(1.0, (float(np.trace(rot)) - 1.0) / 2.0))
    angle = math.acos(cos_angle)
    if angle < 1e-9:
        return np.zeros(3)
    if math.pi - angle < 1e-6:
        # near pi: the axis from the largest diagonal entry of (R + I) / 2
        sym = (rot + np.eye(3)) / 2.0
        k = int(np.argmax(np.diag(sym)))
        axis = sym[:, k] / math.sqrt(max(sym[k, k], 1e-12))
        return axis / np.linalg.norm(axis) * angle
    axis = np.array([rot[2, 1] - rot[1, 2], rot[0, 2] - rot[2, 0], rot[1, 0] - rot[0, 1]]) / (2.0 * math.sin(angle))
    return axis * angle


@dataclass(frozen=True)
class IkResult:
    """An inverse-kinematics answer: the joints (rad), whether they reach the pose within tolerance, the remaining
    position (m) and rotation (rad) errors, and the iterations used."""

    joints: tuple[float, ...]
    converged: bool
    position_error: float
    rotation_error: float
    iterations: int


class PiperKinematics:
    """Forward kinematics, Jacobian and inverse kinematics of the PiPER arm (see the module docstring)."""

    def __init__(self, dh_offset: bool = True) -> None:
        self.theta_offset = tuple(math.radians(v) for v in _THETA_OFFSET_DEG[bool(dh_offset)])

    def link_frames(self, joints: Sequence[float]) -> list[np.ndarray]:
        """The base-frame transforms of links 1-6 for joint angles `joints` (rad)."""
        if len(joints) != 6:
            raise ValueError(f"expected 6 joint angles, got {len(joints)}")
        frames, current = [], np.eye(4)
        for i in range(6):
            current = current @ link_transform(_ALPHA[i], _A[i], float(joints[i]) + self.theta_offset[i], _D[i])
            frames.append(current)
        return frames

    def forward(self, joints: Sequence[float]) -> np.ndarray:
        """The flange's 4x4 base-frame transform."""
        return self.link_frames(joints)[-1]

    def forward_pose(self, joints: Sequence[float]) -> tuple[float, float, float, float, float, float]:
        """The end pose (x, y, z m, roll, pitch, yaw rad) for joint angles `joints` (rad)."""
        return matrix_to_pose(self.forward(joints))

    def jacobian(self, joints: Sequence[float]) -> np.ndarray:
        """The 6x6 geometric Jacobian (rows: linear then angular velocity, base frame)."""
        frames = self.link_frames(joints)
        end = frames[-1][:3, 3]
        jac = np.zeros((6, 6))
        for i, frame in enumerate(frames):
            axis = frame[:3, 2]  # each joint turns about its own frame's z axis (modified DH)
            jac[:3, i] = np.cross(axis, end - frame[:3, 3])
            jac[3:, i] = axis
        return jac

    def inverse(self, pose: Sequence[float], seed: Sequence[float],
                limits: Sequence[tuple[float, float]] | None = None, max_iterations: int = 150,
                position_tolerance: float = 1e-5, rotation_tolerance: float = 1e-4, damping: float = 0.02,
                max_step: float = 0.3, stall_iterations: int = 20) -> IkResult:
        """Joint angles that put the flange at `pose`, by damped least squares from `seed` within `limits`.

        Bounded: at most `max_iterations` steps, each at most `max_step` rad per joint; joints are clamped to
        `limits` after every step; it gives up early when the error has not shrunk by 0.1 % in `stall_iterations`
        steps (an unreachable pose: the arm reached as close as it gets). `converged` is False when the pose is
        not reached within tolerance (out of reach, or blocked by the limits).
        """
        target = pose_to_matrix(pose)
        lows = np.array([lo for lo, _ in limits]) if limits else np.full(6, -np.inf)
        highs = np.array([hi for _, hi in limits]) if limits else np.full(6, np.inf)
        q = np.clip(np.array(seed, dtype=float), lows, highs)
        eye = np.eye(6)
        pos_err = rot_err = math.inf
        best, best_at, iterations = math.inf, 0, max_iterations
        for iteration in range(1, max_iterations + 1):
            current = self.forward(q)
            dp = target[:3, 3] - current[:3, 3]
            dr = rotation_log(target[:3, :3] @ current[:3, :3].T)
            pos_err, rot_err = float(np.linalg.norm(dp)), float(np.linalg.norm(dr))
            if pos_err <= position_tolerance and rot_err <= rotation_tolerance:
                return IkResult(tuple(float(v) for v in q), True, pos_err, rot_err, iteration - 1)
            if pos_err + rot_err < best * 0.999:
                best, best_at = pos_err + rot_err, iteration
            elif iteration - best_at >= stall_iterations:
                iterations = iteration
                break
            jac = self.jacobian(q)
            error = np.concatenate([dp, dr])
            step = jac.T @ np.linalg.solve(jac @ jac.T + damping ** 2 * eye, error)
            biggest = float(np.max(np.abs(step)))
            if biggest > max_step:
                step *= max_step / biggest
            q = np.clip(q + step, lows, highs)
        current = self.forward(q)
        pos_err = float(np.linalg.norm(target[:3, 3] - current[:3, 3]))
        rot_err = float(np.linalg.norm(rotation_log(target[:3, :3] @ current[:3, :3].T)))
        converged = pos_err <= position_tolerance and rot_err <= rotation_tolerance
        return IkResult(tuple(float(v) for v in q), converged, pos_err, rot_err, iterations)
