"""Isaac Sim's side of isaac_bridge: each robot's contract topics on the node, their messages into IsaacFleet calls
and the fleet's commands into messages (the stack's side is brace_common.world_io.WorldPublishers)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Optional

from builtin_interfaces.msg import Time
from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from sensor_msgs.msg import CameraInfo, Image, JointState

from brace_common import qos
from brace_common.acks import ACK_WAIT_S, unacknowledged
from brace_common.validation import InvalidInput, Rejections

from . import isaac_contract as contract
from .isaac_contract import RobotKind, RobotSpec
from .isaac_fleet import IsaacFleet
from .isaac_skills import Command

SUBSCRIBED = {contract.ODOM: Odometry, contract.JOINT_STATES: JointState, contract.RGB: Image,
              contract.CAMERA_INFO_ROLE: CameraInfo}
"""The message type of each contract role the bridge reads."""


def take_input(fleet: IsaacFleet, robot: str, role: str, topic: str, msg: Any, mono: float) -> None:
    """One sample of `robot`'s contract topic of `role` into the fleet at steady time `mono` (InvalidInput when it is
    malformed)."""
    if role == contract.ODOM:
        p, q = msg.pose.pose.position, msg.pose.pose.orientation
        lin, ang = msg.twist.twist.linear, msg.twist.twist.angular
        fleet.odom(robot, topic, (p.x, p.y, p.z), (q.x, q.y, q.z, q.w), (lin.x, lin.y, lin.z), (ang.x, ang.y, ang.z),
                   mono)
    elif role == contract.JOINT_STATES:
        fleet.joint_states(robot, topic, msg.name, msg.position, mono)
    elif role == contract.RGB:
        fleet.image(robot, topic, mono)
    else:
        fleet.camera_info(robot, topic, int(msg.width), int(msg.height), msg.header.frame_id, mono)


def command_msg(kind: RobotKind, command: Command, joint_names: list[str], stamp: Time) -> Optional[Any]:
    """The Twist of a base's command or the JointState (stamped `stamp`) of an arm's; None when the command has
    nothing for the robot's kind."""
    if kind == RobotKind.MOBILE and command.twist is not None:
        msg = Twist()
        msg.linear.x, msg.angular.z = float(command.twist[0]), float(command.twist[1])
        return msg
    if kind == RobotKind.ARM and command.joints is not None:
        msg = JointState(name=list(joint_names), position=[float(v) for v in command.joints])
        msg.header.stamp = stamp
        return msg
    return None


class RobotTopics:
    """The contract topics of `fleet`'s robots on `node`: a subscription per topic it reads (a malformed sample is
    rejected and does not count as alive) and a command publisher per robot, each given to `keep` (the lifecycle
    node's `configured`: its cleanup destroys them)."""

    def __init__(self, node: Any, fleet: IsaacFleet, keep: Callable[[Any], Any], rejections: Rejections,
                 callback_group: Any = None) -> None:
        self.node, self.fleet, self.rejections = node, fleet, rejections
        self.publishers: dict[str, Any] = {}
        self.live = True  # False once released: a sample already on its way is dropped
        for name, spec in fleet.robots.items():  # an exception: the lifecycle base says why and releases
            for t in fleet.contract[name]:
                if not t.subscribed:
                    msg_type = Twist if spec.kind == RobotKind.MOBILE else JointState
                    self.publishers[name] = keep(node.create_publisher(msg_type, t.topic, qos.SIM_COMMANDS))
                elif t.role in SUBSCRIBED:  # images are counted for liveness, never decoded: raw
                    keep(node.create_subscription(SUBSCRIBED[t.role], t.topic, self._taker(name, t.role, t.topic),
                                                  qos.STATE, callback_group=callback_group, raw=t.role == contract.RGB))
                else:
                    raise ValueError(f"no subscription for contract role '{t.role}'")

    def _taker(self, robot: str, role: str, topic: str) -> Callable[[Any], None]:
        def take(msg: Any) -> None:
            if not self.live:
                return
            try:
                take_input(self.fleet, robot, role, topic, msg, time.monotonic())
            except InvalidInput as exc:
                self.rejections.reject(role, exc, robot)
        return take

    def send(self, spec: RobotSpec, command: Command) -> None:
        """Publish a command on the robot's cmd_vel / joint_command."""
        msg = command_msg(spec.kind, command, self.fleet.cfg.joint_names, self.node.get_clock().now().to_msg())
        if msg is not None and spec.name in self.publishers:
            self.publishers[spec.name].publish(msg)

    def hold(self, why: str) -> None:
        """Zero velocity to every base and the measured joints to every arm (nothing raised: this runs on exit).

        On exit the holds are waited for until the simulator acknowledged them (at most acks.ACK_WAIT_S for all): a
        process that ends right after publishing may take an unsent sample with it.
        """
        logger = self.node.get_logger()
        sent = {}
        for spec, command in self.fleet.hold_commands():
            try:
                self.send(spec, command)
                if spec.name in self.publishers:
                    sent[spec.name] = self.publishers[spec.name]
            except Exception as exc:  # noqa: BLE001 - a publisher of a dying context; the next robot still matters
                logger.warning(f"{spec.name}: could not send the hold on {why}: {exc}")
        if why != "exit":
            return
        try:
            waiting = unacknowledged(sent)
        except Exception as exc:  # noqa: BLE001 - the context went down under the wait: nothing more can be sent
            logger.warning(f"could not wait for the holds on exit: {exc}")
            return
        if waiting:
            logger.warning(f"the hold on exit was not acknowledged in {ACK_WAIT_S:.0f} s: {', '.join(waiting)}")
