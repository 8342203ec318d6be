"""The ROS 2 topic contract of Isaac Sim's ROS 2 bridge, and the robot state the isaac_bridge reads from it. ROS-free.

Isaac Sim publishes and subscribes what the user's OmniGraph builds; this module
names what the isaac_bridge expects of it, per robot namespace (OmniGraph's
`nodeNamespace`, absolute: robot `carter_1` -> `/carter_1/odom`):

- a mobile base: `odom` (nav_msgs/Odometry from Isaac Compute Odometry: pose
  relative to where the robot started, twist in the body frame) in, `cmd_vel`
  (geometry_msgs/Twist into ROS2 Subscribe Twist -> Differential Controller) out;
- an arm: `joint_states` (sensor_msgs/JointState) in, `joint_command`
  (sensor_msgs/JointState into ROS2 Subscribe Joint State -> Articulation
  Controller) out;
- a robot with a camera: `camera/rgb` (sensor_msgs/Image) and
  `camera/camera_info` (sensor_msgs/CameraInfo) from ROS2 Camera Helper, for
  liveness and observations (images are never decoded);
- `/clock` (rosgraph_msgs/Clock) from ROS2 Publish Clock, read by the node's
  clock (`use_sim_time`).

`Liveness` tells which of these topics never arrived or went stale.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Optional

from brace_common.planar import BaseState, Pose2D, base_state, yaw_of  # noqa: F401 - the contract's names
from brace_common.validation import InvalidInput

ODOMETRY = "nav_msgs/msg/Odometry"
JOINT_STATE = "sensor_msgs/msg/JointState"
IMAGE = "sensor_msgs/msg/Image"
CAMERA_INFO = "sensor_msgs/msg/CameraInfo"
TWIST = "geometry_msgs/msg/Twist"
CLOCK = "rosgraph_msgs/msg/Clock"

# Roles of a robot's contract topics (the keys of a topic-name mapping; the config's `<role>_topic` parameters).
ODOM, JOINT_STATES, RGB, CAMERA_INFO_ROLE, CMD_VEL, JOINT_COMMAND = (
    "odom", "joint_states", "rgb", "camera_info", "cmd_vel", "joint_command")
DEFAULT_TOPICS: dict[str, str] = {ODOM: "odom", JOINT_STATES: "joint_states", RGB: "camera/rgb",
                                  CAMERA_INFO_ROLE: "camera/camera_info", CMD_VEL: "cmd_vel",
                                  JOINT_COMMAND: "joint_command"}
"""Topic names relative to a robot's namespace, as Isaac Sim's OmniGraph examples name them."""


class RobotKind(str, enum.Enum):
    """What a robot is, for the skills it takes and the topics it speaks."""

    MOBILE = "mobile"  # a differential-drive base: odometry in, velocity out
    ARM = "arm"        # an articulated arm: joint states in, joint position commands out


@dataclass(frozen=True)
class RobotSpec:
    """One robot of the scene: its namespace (= agent id), kind, odometry origin / base pose, camera."""

    name: str
    kind: RobotKind
    origin: Pose2D = Pose2D(0.0, 0.0, 0.0)  # a base's odometry start / an arm's base, in the bridge's frame
    camera: bool = False


@dataclass(frozen=True)
class ContractTopic:
    """One topic of a robot's contract."""

    topic: str       # resolved name, e.g. /carter_1/odom
    msg_type: str    # e.g. nav_msgs/msg/Odometry
    role: str        # odom | joint_states | rgb | camera_info | cmd_vel | joint_command
    subscribed: bool  # True: Isaac Sim publishes it, the bridge reads it; False: the bridge publishes it

    @property
    def controls(self) -> bool:
        """A topic the robot cannot be driven without (a stale one holds the robot)."""
        return self.role in (ODOM, JOINT_STATES)


def robot_topic(robot: str, relative: str) -> str:
    """The absolute name of topic `relative` in robot namespace `robot`."""
    return f"/{robot.strip('/')}/{relative.strip('/')}"


def robot_contract(robot: RobotSpec, topics: Mapping[str, str] = DEFAULT_TOPICS) -> list[ContractTopic]:
    """The topics the bridge reads and writes for `robot` (names relative to its namespace in `topics`)."""
    def topic(role: str, msg_type: str, subscribed: bool) -> ContractTopic:
        return ContractTopic(robot_topic(robot.name, topics[role]), msg_type, role, subscribed)

    if robot.kind == RobotKind.MOBILE:
        out = [topic(ODOM, ODOMETRY, True), topic(CMD_VEL, TWIST, False)]
    else:
        out = [topic(JOINT_STATES, JOINT_STATE, True), topic(JOINT_COMMAND, JOINT_STATE, False)]
    if robot.camera:
        out += [topic(RGB, IMAGE, True), topic(CAMERA_INFO_ROLE, CAMERA_INFO, True)]
    return out


def joint_positions(names: Iterable[str], positions: Iterable[float], wanted: tuple[str, ...]) -> tuple[float, ...]:
    """The positions of joints `wanted` from a JointState's names and positions (others ignored).

    InvalidInput when names and positions differ in length, a wanted joint is missing or a position is not finite.
    """
    names, positions = list(names), list(positions)
    if len(names) != len(positions):
        raise InvalidInput("bad_joint_state", f"{len(names)} names but {len(positions)} positions")
    by_name = dict(zip(names, positions, strict=True))
    missing = [j for j in wanted if j not in by_name]
    if missing:
        raise InvalidInput("missing_joint", f"joint_states lacks {', '.join(missing[:3])}")
    values = tuple(float(by_name[j]) for j in wanted)
    if not all(math.isfinite(v) for v in values):
        raise InvalidInput("bad_joint_position", "a joint position is not finite")
    return values


@dataclass(frozen=True)
class CameraStatus:
    """What the bridge knows of a camera: its resolution (camera_info) and how many images arrived.

    Images are counted, never decoded (the bridge reads them serialized): the planner reads text.
    """

    width: int = 0
    height: int = 0
    frame_id: str = ""
    images: int = 0

    def text(self) -> str:
        """The camera as an observation reads it."""
        size = f"{self.width}x{self.height}" if self.width and self.height else "of unknown size"
        return f"camera {size}, {self.images} images" if self.images else "camera: no image yet"


@dataclass
class RobotState:
    """The latest of one robot's inputs (what has arrived so far)."""

    base: Optional[BaseState] = None
    joints: Optional[tuple[float, ...]] = None
    camera: CameraStatus = CameraStatus()


class Liveness:
    """When each contract topic last delivered a message (steady seconds), and which are missing or stale."""

    def __init__(self, topics: Iterable[str], stale_after_s: float):
        self.stale_after_s = stale_after_s
        self.last: dict[str, Optional[float]] = dict.fromkeys(topics)

    def seen(self, topic: str, now: float) -> None:
        """A message of `topic` arrived at steady time `now`."""
        if topic in self.last:
            self.last[topic] = now

    def missing(self) -> list[str]:
        """Topics that never delivered a message."""
        return [t for t, at in self.last.items() if at is None]

    def stale(self, now: float) -> list[str]:
        """Topics that delivered, but not within `stale_after_s` of `now`."""
        return [t for t, at in self.last.items() if at is not None and now - at > self.stale_after_s]

    def age(self, topic: str, now: float) -> float:
        """Seconds since `topic` last delivered (inf when never)."""
        at = self.last.get(topic)
        return math.inf if at is None else now - at
