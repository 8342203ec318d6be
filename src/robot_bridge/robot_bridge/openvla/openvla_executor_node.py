"""openvla_executor lifecycle node: runs its agent's plan steps on the arm with OpenVLA (the core: step_runner).

Subscribes plan, verdicts, episode, the camera image, joint_states, end_pose; publishes ee_delta_cmd, outcomes,
context and /diagnostics. Topics, parameters, lifecycle and the control loop: docs/openvla_executor.md.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Optional

from brace_msgs.msg import ContextEntry, EndEffectorDelta, Episode, ExecutionOutcome, Plan, VerifierVerdict
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped, Vector3
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn
from sensor_msgs.msg import Image, JointState

from brace_common import names, qos
from brace_common.clock import steady_timer
from brace_common.config import ConfigError
from brace_common.counters import Health
from brace_common.diagnostics import health_array
from brace_common.lifecycle import ReleasingLifecycleNode, serialized
from brace_common.params import declare_parameters, read_config, reject_undeclared
from brace_common.spin import spin_node
from brace_common.validation import InvalidInput
from brace_common.vocabulary import Block, EntryKind, EpisodeEvent, Failure

from ..orbbec.image_msgs import image_to_array
from .executor_config import ExecutorConfig
from .step_monitor import outcome_text
from .step_runner import Finished, StepRunner, build_backend
from .vla_action import ArmAction

EXECUTOR_THREADS = 2  # subscriptions and the control tick share one mutually exclusive group; diagnostics too


class OpenVlaExecutorNode(ReleasingLifecycleNode):
    """Thin lifecycle shell around StepRunner: parameters, messages and transitions."""

    def __init__(self, **kwargs) -> None:
        super().__init__("openvla_executor", **kwargs)
        declare_parameters(self, ExecutorConfig, enforce_ranges=False)
        self.config: Optional[ExecutorConfig] = None
        self.runner = StepRunner(self.get_logger())
        self.ee_pub = self.outcome_pub = self.context_pub = None
        self.group = MutuallyExclusiveCallbackGroup()
        # Diagnostics live as long as the node, in every lifecycle state (they say which).
        self.diag_pub = self.create_publisher(DiagnosticArray, names.DIAGNOSTICS, qos.DIAGNOSTICS)
        period = self.get_parameter("diagnostics_period_s").value
        period = period if isinstance(period, float) and 0.05 <= period <= 60.0 else 1.0
        steady_timer(self, period, self.publish_diagnostics, MutuallyExclusiveCallbackGroup())

    # What graph tests watch, read-only: it lives in the runner.
    image = property(lambda self: self.runner.image, doc="The latest camera image (RGB), None before one.")
    ee_xyz = property(lambda self: self.runner.ee_xyz, doc="The end effector's latest position, None before one.")
    plan_id = property(lambda self: self.runner.plan_id, doc="The current plan's id ('' when idle).")
    steps = property(lambda self: self.runner.steps, doc="The current plan's steps.")

    # ------------------------------------------------------------------ lifecycle

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Validate the parameters, build the backend (local: load the model), create topics and the control timer."""
        try:
            cfg = read_config(self, ExecutorConfig)
            reject_undeclared(self)
            started = time.monotonic()
            self.runner.configure(cfg, build_backend)
        except ConfigError as exc:
            self.last_error = str(exc)
            self.get_logger().error(f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        self.config, self.last_error = cfg, ""
        self.ee_pub = self.configured(self.create_lifecycle_publisher(EndEffectorDelta, cfg.ee_delta_topic, qos.EVENTS))
        self.outcome_pub = self.configured(self.create_lifecycle_publisher(ExecutionOutcome, names.OUTCOMES,
                                                                           qos.EVENTS))
        self.context_pub = self.configured(self.create_lifecycle_publisher(ContextEntry, names.CONTEXT, qos.EVENTS))
        for kind, topic, callback, profile in ((Plan, names.PLAN, self.on_plan, qos.PLANS),
                                               (Image, cfg.image_topic, self.on_image, qos.STATE),
                                               (JointState, names.JOINT_STATES, self.on_joints, qos.STATE),
                                               (PoseStamped, names.END_POSE, self.on_pose, qos.STATE),
                                               (VerifierVerdict, names.VERDICTS, self.on_verdict, qos.EVENTS),
                                               (Episode, names.EPISODE, self.on_episode, qos.EVENTS)):
            self.configured(self.create_subscription(kind, topic, callback, profile, callback_group=self.group))
        self._control_timer = self.configured(steady_timer(self, cfg.control_period_s, self.tick, self.group))
        self._control_timer.cancel()  # runs while active
        self.state_label = "inactive"
        self.get_logger().info(f"configured in {time.monotonic() - started:.1f} s: agent '{cfg.agent_id}', "
                               f"{self.runner.backend.describe()}, image '{cfg.image_topic}', "
                               f"every {cfg.control_period_s:g} s")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Start the control loop (the current step, if any, starts again now)."""
        self.runner.start()
        self._control_timer.reset()
        self.state_label = "active"
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop the control loop: no more commands (an answer in flight is dropped)."""
        with self.transition_lock:  # a tick or a verdict publishes all it took from the runner, or nothing
            self._control_timer.cancel()
            self.runner.stop()
            self.state_label = "inactive"
            return super().on_deactivate(state)

    def _release(self) -> None:
        """Cleanup, shutdown and error: free the backend (the model) and the plan."""
        self.runner.release()

    # ------------------------------------------------------------------ inputs

    def on_plan(self, msg: Plan) -> None:
        """Take a plan of this agent: validated whole, it replaces the current one; a malformed one is counted."""
        self.runner.take_plan(msg.agent_id, msg.plan_id, [(s.action, s.parameters_json) for s in msg.steps],
                              msg.trigger_kind)

    def on_episode(self, msg: Episode) -> None:
        """An episode's end or a new one's start ends the current plan without an outcome (its world is over: a step
        run on would only fail when the world stops feeding it); the arm holds until the next episode's first plan."""
        if msg.event in (EpisodeEvent.START, EpisodeEvent.END):
            self.runner.end_episode(msg.episode, EpisodeEvent(msg.event))

    @serialized
    def on_verdict(self, msg: VerifierVerdict) -> None:
        """A confident violation for this agent halts the running step (OmniAct's preemption): hold, then report."""
        finished = self.runner.verdict(msg.agent_id, msg.violation, float(msg.confidence), msg.detail)
        if finished is not None:
            self._send(ArmAction((0.0, 0.0, 0.0), (0.0, 0.0, 0.0), math.nan, False))  # hold the measured pose
            self._report(finished)

    def on_image(self, msg: Image) -> None:
        """Keep the latest camera image (malformed images are counted)."""
        try:
            self.runner.take_image(image_to_array(msg))
        except InvalidInput as exc:
            self.runner.rejections.reject("image", exc)

    def on_joints(self, msg: JointState) -> None:
        """Keep the gripper opening (the `gripper_joint` position)."""
        try:
            opening = float(msg.position[list(msg.name).index(self.config.gripper_joint)])
        except (ValueError, IndexError):
            self.runner.rejections.reject("joint_states", InvalidInput("no_gripper", f"joint_states without a "
                                                                       f"'{self.config.gripper_joint}' position"))
            return
        self.runner.take_gripper(opening)

    def on_pose(self, msg: PoseStamped) -> None:
        """Keep the end effector's position."""
        p = msg.pose.position
        self.runner.take_pose((float(p.x), float(p.y), float(p.z)))

    # ------------------------------------------------------------------ the control loop

    @serialized
    def tick(self) -> None:
        """One control tick (StepRunner.tick): send the VLA's action, report a step that ended."""
        action, finished = self.runner.tick()
        if action is not None:
            self._send(action)
        if finished is not None:
            self._report(finished)

    def _send(self, arm: ArmAction) -> None:
        """One end-effector step to the arm."""
        t, r = arm.translation_m, arm.rotation_rad
        msg = EndEffectorDelta(translation=Vector3(x=t[0], y=t[1], z=t[2]), rotation=Vector3(x=r[0], y=r[1], z=r[2]),
                               gripper=arm.gripper_m)
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.header.frame_id = self.config.frame_id
        self.ee_pub.publish(msg)

    def _report(self, finished: Finished) -> None:
        """A finished step's outcome and context entry (the runner is past it already)."""
        step, result, cfg = finished.step, finished.result, self.config
        failure = Failure(result.failure)
        stamp = self.get_clock().now().to_msg()
        outcome = ExecutionOutcome(agent_id=cfg.agent_id, step=finished.tick, action=step.action,
                                   success=result.success, detail=result.detail, failure=int(failure))
        outcome.header.stamp = stamp
        text = outcome_text(step.describe(), result)
        entry = ContextEntry(agent_id=cfg.agent_id, step=finished.tick, block=int(Block.HISTORY),
                             kind=(EntryKind.ACTION_OUTCOME if result.success else EntryKind.FAILURE_TRACE).value,
                             text=text)
        entry.header.stamp = stamp
        if result.success:  # two call sites: rclpy keeps one severity per logging line
            self.get_logger().info(f"step {step.index} {text}")
        else:
            self.get_logger().warning(f"step {step.index} {text}")
        self.outcome_pub.publish(outcome)
        self.context_pub.publish(entry)

    # ------------------------------------------------------------------ monitoring

    def publish_diagnostics(self) -> None:
        """The lifecycle state and a failed configure, and the runner's health (StepRunner.health)."""
        failed = self.last_error and self.runner.backend is None
        mine = Health({"state": self.state_label}, errors=(f"configure failed: {self.last_error}",) if failed else ())
        self.diag_pub.publish(health_array(f"{self.get_name()}: executor", mine + self.runner.health(),
                                           self.get_clock().now().to_msg()))


def main(args=None) -> int:
    """`ros2 run robot_bridge openvla_executor` (configures and activates itself with `autostart`)."""
    return spin_node(OpenVlaExecutorNode, "openvla_executor", args, threads=EXECUTOR_THREADS)


if __name__ == "__main__":
    sys.exit(main())
