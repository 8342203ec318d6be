"""A stand-in for Isaac Sim's ROS 2 bridge: the topics an Isaac stage's OmniGraphs publish and subscribe.

Isaac Sim needs an RTX GPU; this rclpy node speaks the same contract with the
same message types, names and default QoS (reliable, keep last 10, the
OmniGraph nodes' `defaultPubSub`) so the isaac_bridge can be tested as it
would meet Isaac:

- /clock (rosgraph_msgs/Clock, ROS2 Publish Clock): simulated time from `start_time_s`, `time_scale` x wall time;
- per mobile robot: /<robot>/odom (nav_msgs/Odometry, Isaac Compute Odometry -> ROS2 Publish Odometry: pose
  relative to the start pose in frame `odom`, body-frame twist, child `base_link`), integrating the latest
  /<robot>/cmd_vel (geometry_msgs/Twist, ROS2 Subscribe Twist -> Differential Controller) as a unicycle;
- per arm: /<robot>/joint_states (sensor_msgs/JointState, ROS2 Publish Joint State: the arm's joints and two
  finger joints) tracking the latest /<robot>/joint_command (ROS2 Subscribe Joint State -> Articulation
  Controller, positions by name) with a first-order lag of `tau_s`;
- per camera robot: /<robot>/camera/rgb (sensor_msgs/Image rgb8) and /<robot>/camera/camera_info
  (sensor_msgs/CameraInfo) from ROS2 Camera Helper, every `camera_every` ticks.

Faults for tests: `frozen` topics are not published (a stalled graph), `stuck` robots ignore their commands.
"""

from __future__ import annotations

import math

from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock as RclClock
from rclpy.clock import ClockType
from rclpy.node import Node
from rclpy.qos import QoSProfile
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CameraInfo, Image, JointState

from brace_common.clock import stamp_of

ISAAC_QOS = QoSProfile(depth=10)  # reliable, volatile, keep last 10: the OmniGraph ROS 2 nodes' default
FRANKA_JOINTS = tuple(f"panda_joint{i}" for i in range(1, 8))
FINGERS = ("panda_finger_joint1", "panda_finger_joint2")


INITIAL_JOINTS = (0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785)  # where an arm starts


class IsaacStandIn(Node):
    """Isaac Sim's side of the contract for `robots` ({namespace: 'mobile' | 'arm'})."""

    def __init__(self, robots: dict[str, str], cameras: tuple[str, ...] = (), start_time_s: float = 0.0,
                 time_scale: float = 1.0, period_s: float = 0.02, tau_s: float = 0.1,
                 initial_joints: tuple[float, ...] = INITIAL_JOINTS,
                 camera_every: int = 5) -> None:
        super().__init__("isaac_sim_standin")
        self.robots = dict(robots)
        self.sim_time = start_time_s
        self.time_scale, self.period_s, self.tau_s, self.camera_every = time_scale, period_s, tau_s, camera_every
        self.frozen: set[str] = set()   # topic names not published
        self.stuck: set[str] = set()    # robots that ignore their commands
        self.ticks = 0
        self.pose = {r: [0.0, 0.0, 0.0] for r in robots}            # x, y, yaw in the robot's odom frame
        self.twist = {r: (0.0, 0.0) for r in robots}                # latest cmd_vel: forward, yaw rate
        self.joints = {r: list(initial_joints) for r in robots}
        self.target = {r: list(initial_joints) for r in robots}
        self.cmd_vel: dict[str, list[tuple[float, float]]] = {r: [] for r in robots}
        self.joint_commands: dict[str, list[JointState]] = {r: [] for r in robots}
        group = MutuallyExclusiveCallbackGroup()
        self.clock_pub = self.create_publisher(Clock, "/clock", ISAAC_QOS)
        self.pubs: dict[str, object] = {}
        for robot, kind in robots.items():
            if kind == "mobile":
                self.pubs[f"/{robot}/odom"] = self.create_publisher(Odometry, f"/{robot}/odom", ISAAC_QOS)
                self.create_subscription(Twist, f"/{robot}/cmd_vel", lambda m, r=robot: self._on_twist(r, m),
                                         ISAAC_QOS, callback_group=group)
            else:
                self.pubs[f"/{robot}/joint_states"] = self.create_publisher(JointState, f"/{robot}/joint_states",
                                                                            ISAAC_QOS)
                self.create_subscription(JointState, f"/{robot}/joint_command",
                                         lambda m, r=robot: self._on_joint_command(r, m), ISAAC_QOS,
                                         callback_group=group)
        for robot in cameras:
            self.pubs[f"/{robot}/camera/rgb"] = self.create_publisher(Image, f"/{robot}/camera/rgb", ISAAC_QOS)
            self.pubs[f"/{robot}/camera/camera_info"] = self.create_publisher(
                CameraInfo, f"/{robot}/camera/camera_info", ISAAC_QOS)
        self.cameras = tuple(cameras)
        self.create_timer(period_s, self.tick, callback_group=group, clock=RclClock(clock_type=ClockType.STEADY_TIME))

    def _on_twist(self, robot: str, msg: Twist) -> None:
        self.cmd_vel[robot].append((msg.linear.x, msg.angular.z))
        if robot not in self.stuck:
            self.twist[robot] = (msg.linear.x, msg.angular.z)

    def _on_joint_command(self, robot: str, msg: JointState) -> None:
        self.joint_commands[robot].append(msg)
        if robot in self.stuck:
            return
        for name, position in zip(msg.name, msg.position, strict=False):
            if name in FRANKA_JOINTS:
                self.target[robot][FRANKA_JOINTS.index(name)] = position

    def tick(self) -> None:
        """One physics step: advance time, move the robots, publish what Isaac's graphs publish."""
        dt = self.period_s * self.time_scale
        self.sim_time += dt
        self.ticks += 1
        stamp = stamp_of(self.sim_time)
        clock = Clock()
        clock.clock = stamp
        self.clock_pub.publish(clock)
        lag = 1.0 - math.exp(-dt / self.tau_s)
        for robot, kind in self.robots.items():
            if kind == "mobile":
                v, w = self.twist[robot] if robot not in self.stuck else (0.0, 0.0)
                pose = self.pose[robot]
                pose[0] += v * math.cos(pose[2]) * dt
                pose[1] += v * math.sin(pose[2]) * dt
                pose[2] = (pose[2] + w * dt + math.pi) % (2 * math.pi) - math.pi
                self._publish(f"/{robot}/odom", self._odometry(pose, v, w, stamp))
            else:
                q, target = self.joints[robot], self.target[robot]
                for i in range(len(q)):
                    q[i] += lag * (target[i] - q[i])
                msg = JointState(name=[*FRANKA_JOINTS, *FINGERS], position=[*q, 0.04, 0.04])
                msg.header.stamp = stamp
                self._publish(f"/{robot}/joint_states", msg)
        if self.ticks % self.camera_every == 0:
            for robot in self.cameras:
                image = Image(height=6, width=8, encoding="rgb8", step=24, data=bytes(144))
                image.header.stamp, image.header.frame_id = stamp, "sim_camera"
                self._publish(f"/{robot}/camera/rgb", image)
                info = CameraInfo(height=6, width=8, distortion_model="plumb_bob")
                info.header.stamp, info.header.frame_id = stamp, "sim_camera"
                self._publish(f"/{robot}/camera/camera_info", info)

    @staticmethod
    def _odometry(pose: list[float], v: float, w: float, stamp) -> Odometry:
        msg = Odometry()
        msg.header.stamp, msg.header.frame_id, msg.child_frame_id = stamp, "odom", "base_link"
        msg.pose.pose.position.x, msg.pose.pose.position.y = pose[0], pose[1]
        msg.pose.pose.orientation.z, msg.pose.pose.orientation.w = math.sin(pose[2] / 2), math.cos(pose[2] / 2)
        msg.twist.twist.linear.x, msg.twist.twist.angular.z = v, w
        return msg

    def _publish(self, topic: str, msg) -> None:
        if topic not in self.frozen:
            self.pubs[topic].publish(msg)
