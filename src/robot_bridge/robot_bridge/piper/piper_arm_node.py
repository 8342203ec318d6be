"""piper_arm lifecycle node: one AgileX PiPER arm, every command through arm_control's gate and arm_safety's checks.

Publishes joint_states, end_pose, agent_states and /diagnostics; takes joint_cmd, ee_delta_cmd, gripper_cmd;
serves ~/enable, ~/stop, ~/resume. Topics, parameters, lifecycle and safety layers: docs/piper_arm.md.
"""

from __future__ import annotations

import math
import sys
import time
from functools import partial
from typing import Any, Optional

from brace_msgs.msg import AgentState, EndEffectorDelta
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.duration import Duration
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64
from std_srvs.srv import Trigger

from brace_common import names, qos
from brace_common.clock import steady_timer
from brace_common.config import ConfigError
from brace_common.counters import Health
from brace_common.diagnostics import health_array
from brace_common.lifecycle import ReleasingLifecycleNode, serialized
from brace_common.params import declare_parameters, read_config, reject_undeclared
from brace_common.spin import spin_node

from . import arm_safety as safety
from .arm_control import ArmControl
from .arm_safety import GRIPPER_NAME, JOINT_NAMES
from .piper_arm_config import PiperArmConfig
from .piper_driver import DriverError

EXECUTOR_THREADS = 6  # feedback, supervision (a reconnection blocks it), taking commands, running them, services,
#                      reports


class PiperArmNode(ReleasingLifecycleNode):
    """Thin lifecycle shell around ArmControl: parameters, messages, services and transitions."""

    def __init__(self, **kwargs) -> None:
        super().__init__("piper_arm", **kwargs)
        declare_parameters(self, PiperArmConfig, enforce_ranges=False)
        self.config: Optional[PiperArmConfig] = None
        self.control = ArmControl(self.get_logger())
        self.hardware_fault = False  # the last transition failed on the CAN bus or the arm (brace_common.spin)
        self.agent_step = 0
        self._published_joint_frames = -1
        # Diagnostics live as long as the node, in every lifecycle state (they say which).
        self.diag_pub = self.create_publisher(DiagnosticArray, names.DIAGNOSTICS, qos.DIAGNOSTICS)
        period = self.get_parameter("diagnostics_period_s").value
        steady_timer(self, period if isinstance(period, float) and 0.05 <= period <= 60.0 else 1.0,
                     self.publish_diagnostics, MutuallyExclusiveCallbackGroup())

    # The arm's state, for callers and tests: it lives in ArmControl.
    driver = property(lambda self: self.control.driver, doc="The connected PiperDriver, None when not configured.")
    counts = property(lambda self: self.control.counts, doc="The arm's event counters.")
    rejections = property(lambda self: self.control.rejections, doc="Refused commands by input and reason.")
    commands = property(lambda self: self.control.commands, doc="The newest-only command mailbox.")
    gate = property(lambda self: self.control.gate, doc="Whether commands may pass now.")
    backoff = property(lambda self: self.control.backoff, doc="The reconnection backoff.")

    # ------------------------------------------------------------------ lifecycle

    def _fail(self, what: str, exc: Exception) -> TransitionCallbackReturn:
        self.hardware_fault = isinstance(exc, DriverError)  # the CAN bus or the arm, not the parameters
        self.last_error = f"{what}: {exc}"
        self.get_logger().error(self.last_error)
        return TransitionCallbackReturn.FAILURE

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Validate the parameters, connect to the CAN bus (no frame is sent to the arm), create topics and timers."""
        try:
            cfg = self.config = read_config(self, PiperArmConfig)
            reject_undeclared(self)
            self.control.connect(cfg, cfg.limits())
        except (ConfigError, ValueError, DriverError) as exc:
            return self._fail("configure failed", exc)
        self.last_error = ""
        self.joint_pub = self.configured(self.create_lifecycle_publisher(JointState, names.JOINT_STATES,
                                                                         qos.ROBOT_FEEDBACK))
        self.pose_pub = self.configured(self.create_lifecycle_publisher(PoseStamped, names.END_POSE, qos.ROBOT_FEEDBACK))
        self.agent_pub = self.configured(self.create_lifecycle_publisher(AgentState, names.AGENT_STATES, qos.EVENTS))
        self.configured(steady_timer(self, cfg.feedback_period_s, self.publish_feedback,
                                     MutuallyExclusiveCallbackGroup()))
        self.configured(steady_timer(self, cfg.supervision_period_s, self.supervise, MutuallyExclusiveCallbackGroup()))
        self.configured(steady_timer(self, cfg.agent_state_period_s, self.publish_agent_state,
                                     MutuallyExclusiveCallbackGroup()))
        # Taking a command only files it (cheap, in order); a guard condition then runs the newest of each input in
        # its own group, so a command stream faster than the arm is counted, not lost unseen.
        self._runner = self.configured(self.create_guard_condition(self.run_commands, MutuallyExclusiveCallbackGroup()))
        takes, services = MutuallyExclusiveCallbackGroup(), MutuallyExclusiveCallbackGroup()
        for kind, topic, name in ((EndEffectorDelta, names.EE_DELTA_CMD, "ee_delta_cmd"),
                                  (JointState, names.JOINT_CMD, "joint_cmd"), (Float64, names.GRIPPER_CMD, "gripper_cmd")):
            self.configured(self.create_subscription(kind, topic, partial(self.take_command, name), qos.ROBOT_COMMANDS,
                                                     callback_group=takes))
        for service, request in (("enable", self.control.enable), ("stop", self.control.stop),
                                 ("resume", self.control.resume)):
            self.configured(self.create_service(Trigger, f"~/{service}", partial(self.answer, request),
                                                callback_group=services))
        self.state_label = "inactive"
        self.get_logger().info(f"connected to CAN port '{cfg.can_port}' ({cfg.can_interface})")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Wait for the arm's frames, enable the motors (bounded retry), select MOVE J and hold the measured joints."""
        try:
            attempt = self.control.activate()
        except DriverError as exc:
            return self._fail("activate failed", exc)
        self.last_error = ""
        self.state_label = "active"
        self.get_logger().info(f"arm enabled (attempt {attempt}); holding the measured joints")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Refuse commands and hold the measured joints; the motors stay enabled (a disabled arm drops)."""
        self.control.deactivate("deactivate")
        self.state_label = "inactive"
        return super().on_deactivate(state)

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Hold if active, then disconnect."""
        if self.control.gate.active:
            self.control.deactivate("shutdown")
        return super().on_shutdown(state)

    def _release(self) -> None:
        """Cleanup, shutdown and error: disconnect from the CAN bus (the arm is left as it is)."""
        self.control.release()
        self._published_joint_frames = -1

    def release(self) -> None:
        """Process exit, whatever the lifecycle state: hold if active, then disconnect (no ROS call)."""
        self.control.exit()

    # ------------------------------------------------------------------ feedback

    @serialized
    def publish_feedback(self) -> None:
        """joint_states and end_pose once per new joint feedback frame, stamped when it arrived (nothing while silent)."""
        feedback = self.control.read()
        if feedback is None or not feedback.can_ok or not self.joint_pub.is_activated:
            return
        if feedback.joint_frames == self._published_joint_frames or not math.isfinite(feedback.joints_age_s):
            return  # nothing new from the arm: a republished state would pass stale joints off as fresh
        self._published_joint_frames = feedback.joint_frames
        stamp = (self.get_clock().now() - Duration(nanoseconds=round(feedback.joints_age_s * 1e9))).to_msg()
        joints = JointState(name=[*JOINT_NAMES, GRIPPER_NAME], position=[*feedback.joints_rad, feedback.gripper_m],
                            effort=[*feedback.joint_effort_nm, feedback.gripper_effort_nm])
        joints.header.stamp, joints.header.frame_id = stamp, self.config.frame_id
        self.joint_pub.publish(joints)
        pose = PoseStamped()
        pose.header.stamp, pose.header.frame_id = stamp, self.config.frame_id
        x, y, z, roll, pitch, yaw = feedback.end_pose
        pose.pose.position.x, pose.pose.position.y, pose.pose.position.z = x, y, z
        q = safety.rpy_to_quaternion(roll, pitch, yaw)
        pose.pose.orientation.x, pose.pose.orientation.y, pose.pose.orientation.z, pose.pose.orientation.w = q
        self.pose_pub.publish(pose)

    @serialized
    def publish_agent_state(self) -> None:
        """The arm as an agent: end-effector position; has_goal while commands arrive."""
        feedback = self.control.feedback
        if self.control.driver is None or feedback is None or not feedback.can_ok or not self.agent_pub.is_activated:
            return
        self.agent_step += 1
        msg = AgentState(agent_id=self.config.agent_id, step=self.agent_step, tracking_error=math.nan,
                         has_goal=self.control.commanding(time.monotonic()))
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.header.frame_id = self.config.frame_id
        msg.position.x, msg.position.y, msg.position.z = feedback.end_pose[:3]
        self.agent_pub.publish(msg)

    @serialized
    def supervise(self) -> None:
        """Faults, the command watchdog, and reconnection while the CAN bus is silent (ArmControl.supervise)."""
        self.control.supervise()

    # ------------------------------------------------------------------ commands and services

    @serialized
    def take_command(self, name: str, msg: Any, info: dict) -> None:
        """File a command taken from input `name` (its publisher and sequence number reveal commands never taken)."""
        # rclpy passes the message info only to a callback with exactly two required parameters
        if self.control.driver is None:
            return  # cleanup is destroying this subscription
        gid = info.get("publisher_gid")
        publisher = bytes(gid["data"]) if isinstance(gid, dict) and gid.get("data") is not None else None
        self.control.commands.put(name, msg, publisher, info.get("publication_sequence_number"))
        self._runner.trigger()

    @serialized
    def run_commands(self) -> None:
        """Run the newest waiting command of each input, oldest input first, until none waits."""
        self.control.run_waiting({"joint_cmd": self.on_joint_cmd, "ee_delta_cmd": self.on_ee_delta,
                                  "gripper_cmd": self.on_gripper_cmd})

    def on_joint_cmd(self, msg: JointState) -> None:
        """Joint (and gripper) targets by name (unnamed: joint1..6 [, gripper])."""
        self.control.joints(msg.name, msg.position)

    def on_ee_delta(self, msg: EndEffectorDelta) -> None:
        """An end-effector step applied to the measured end pose (and a gripper target unless NaN)."""
        t, r = msg.translation, msg.rotation
        self.control.ee_delta(msg.header.frame_id, (t.x, t.y, t.z), (r.x, r.y, r.z), msg.gripper)

    def on_gripper_cmd(self, msg: Float64) -> None:
        """A gripper opening (m)."""
        self.control.gripper(msg.data)

    def answer(self, request, _: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        """~/enable, ~/stop or ~/resume: ArmControl's answer as a Trigger response."""
        response.success, response.message = request()
        return response

    # ------------------------------------------------------------------ monitoring

    def publish_diagnostics(self) -> None:
        """The lifecycle state and the last failure, and the arm's health (ArmControl.health)."""
        cfg = self.config
        mine = Health({"state": self.state_label, "can_port": cfg.can_port if cfg else "",
                       "can_interface": cfg.can_interface if cfg else ""}, errors=(self.last_error,) if self.last_error else ())
        self.diag_pub.publish(health_array(f"{self.get_name()}: PiPER arm on {cfg.can_port if cfg else '?'}",
                                           mine + self.control.health(), self.get_clock().now().to_msg()))


def main(args=None) -> int:
    """`ros2 run robot_bridge piper_arm` (configures and activates itself with `autostart`)."""
    return spin_node(PiperArmNode, "piper_arm", args, on_exit=lambda node: node.release(), threads=EXECUTOR_THREADS)


if __name__ == "__main__":
    sys.exit(main())
