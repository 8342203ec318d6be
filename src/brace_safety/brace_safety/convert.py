"""The only place brace_safety turns messages into its core's dataclasses and back."""

from __future__ import annotations

import math
from typing import Optional

from brace_msgs.msg import CollisionMonitorState, EndEffectorDelta, ExecutionOutcome
from builtin_interfaces.msg import Time
from geometry_msgs.msg import PoseStamped, Twist
from nav_msgs.msg import Odometry

from brace_common.planar import Pose2D, base_state
from brace_common.validation import InvalidInput
from brace_common.vocabulary import Failure, ZoneAction

from .monitor import Sensed
from .zones import Motion, Vec3, Verdict


def sensed_from_odom(msg: Odometry, origin: Pose2D, now_s: float) -> Sensed:
    """A base's odometry (pose from where it started, body-frame twist) as the monitor senses it in the world
    frame; InvalidInput on non-finite values or a degenerate orientation."""
    p, q, lin, ang = msg.pose.pose.position, msg.pose.pose.orientation, msg.twist.twist.linear, msg.twist.twist.angular
    base = base_state(origin, (p.x, p.y, p.z), (q.x, q.y, q.z, q.w), (lin.x, lin.y, lin.z), (ang.x, ang.y, ang.z))
    vx, vy = base.pose.rotate((lin.x, lin.y))
    return Sensed((base.pose.x, base.pose.y, 0.0), base.pose.yaw, (vx, vy, 0.0), now_s)


def sensed_from_pose(msg: PoseStamped, last: Optional[tuple[Vec3, float]], now_s: float) -> Sensed:
    """An end pose as the monitor senses the end effector (its velocity from the `last` (position, time) sensed);
    InvalidInput on non-finite values."""
    p = msg.pose.position
    position = (float(p.x), float(p.y), float(p.z))
    if not all(map(math.isfinite, position)):
        raise InvalidInput("non_finite", f"end pose {position} is not finite")
    velocity = (0.0, 0.0, 0.0)
    if last is not None and now_s > last[1]:
        velocity = tuple((a - b) / (now_s - last[1]) for a, b in zip(position, last[0], strict=True))
    return Sensed(position, 0.0, velocity, now_s)


def ee_delta_let_through(msg: EndEffectorDelta, motion: Motion | None, verdict: Verdict) -> EndEffectorDelta:
    """The command sent to the arm: the one received when it passed; its translation and rotation scaled by the
    verdict's ratio (zero when stopped or when the end effector could not be checked); the gripper always passes
    (opening or closing it moves the end effector nowhere)."""
    if motion is not None and verdict.speed_ratio >= 1.0:
        return msg
    ratio = verdict.speed_ratio if motion is not None else 0.0
    out = EndEffectorDelta(header=msg.header, gripper=msg.gripper)
    for part in ("translation", "rotation"):
        src, dst = getattr(msg, part), getattr(out, part)
        dst.x, dst.y, dst.z = src.x * ratio, src.y * ratio, src.z * ratio
    return out


def twist_let_through(msg: Twist, motion: Motion | None, verdict: Verdict) -> Twist:
    """The command sent to the motors: the one received when it passed, scaled by the verdict's ratio (every axis:
    Nav2 scales the whole command), zero when the agent could not be checked."""
    if motion is not None and verdict.speed_ratio >= 1.0:
        return msg
    ratio = verdict.speed_ratio if motion is not None else 0.0
    out = Twist()
    for part in ("linear", "angular"):
        src, dst = getattr(msg, part), getattr(out, part)
        dst.x, dst.y, dst.z = src.x * ratio, src.y * ratio, src.z * ratio
    return out


def state_msg(agent: str, verdict: Verdict, stamp: Time) -> CollisionMonitorState:
    """CollisionMonitorState of one agent's latest verdict."""
    msg = CollisionMonitorState(agent_id=agent, action=int(verdict.action), obstacle=verdict.obstacle,
                                speed_ratio=float(verdict.speed_ratio), detail=verdict.detail)
    msg.header.stamp = stamp
    msg.distance_m = float(verdict.distance_m) if math.isfinite(verdict.distance_m) else math.nan
    return msg


def stop_outcome(agent: str, verdict: Verdict, stamp: Time, action: str) -> ExecutionOutcome:
    """The outcome a stop reports to the trigger monitor (a HAZARD trigger; not a failed step)."""
    msg = ExecutionOutcome(agent_id=agent, action=action, success=False, failure=int(Failure.SAFETY_STOP),
                           detail=f"collision monitor: {ZoneAction.STOP.label}: {verdict.detail}")
    msg.header.stamp = stamp
    return msg
