"""visual_verifier node: OmniAct's asynchronous visual verifier beside the executor (OmniAct Sec. 3.3, App. F, I).

Takes <camera_name>/color and depth images, plan, outcomes and episode; publishes verdicts, context (each violation's
trace, before its verdict) and /diagnostics. The sampling loop is frame_judge's; topics, backends and parameters:
docs/visual_verifier.md.
"""

from __future__ import annotations

import sys
from typing import Optional

import numpy as np
from brace_msgs.msg import ContextEntry, Episode, ExecutionOutcome, Plan, VerifierVerdict
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from sensor_msgs.msg import Image

from brace_common import names, qos
from brace_common.action_schema import step_from_message
from brace_common.clock import seconds_of, steady_timer
from brace_common.counted_inputs import CountedInputs
from brace_common.counters import Health
from brace_common.diagnostics import health_array
from brace_common.params import declare_config, reject_undeclared
from brace_common.spin import spin_node
from brace_common.validation import InvalidInput, Rejections
from brace_common.vocabulary import Block, EntryKind, EpisodeEvent

from ..orbbec.calibration import load_calibration
from ..orbbec.image_msgs import IMAGE_QOS, depth_to_array, image_to_array
from .frame_judge import FrameJudge
from .verifier_config import VerifierConfig
from .visual_verifier import Verdict, VisualVerifier


class VisualVerifierNode(Node):
    """Thin rclpy shell around FrameJudge and VisualVerifier: frames, plans and outcomes in, verdicts out."""

    def __init__(self, **kwargs) -> None:
        super().__init__("visual_verifier", **kwargs)
        self.config = declare_config(self, VerifierConfig)
        reject_undeclared(self)
        cfg = self.config
        self.camera = load_calibration(cfg.camera_calibration)
        self.rejections = Rejections(self.get_logger())
        self.inputs = CountedInputs()
        # the latest frames as received: converted only when a pair is compared (a camera runs faster than sampling)
        self.color: Optional[Image] = None
        self.depth: Optional[Image] = None
        self.plan_id = ""
        self.perceived = self.create_guard_condition(self.on_perceived)
        self.judge = FrameJudge(cfg, VisualVerifier(cfg.perceiver(self.camera), cfg.confirm_frames), self.get_logger(),
                                self.perceived.trigger)
        if self.judge.worker is not None:
            self.context.on_shutdown(self.verifier.perceiver.close)   # Ctrl-C: the request in flight ends at once

        self.verdict_pub = self.create_publisher(VerifierVerdict, names.VERDICTS, qos.EVENTS)
        self.context_pub = self.create_publisher(ContextEntry, names.CONTEXT, qos.EVENTS)
        self.diag_pub = self.create_publisher(DiagnosticArray, names.DIAGNOSTICS, qos.DIAGNOSTICS)
        self.create_subscription(Image, f"{cfg.camera_name}/{names.COLOR_IMAGE}", self.on_color, IMAGE_QOS)
        self.create_subscription(Image, f"{cfg.camera_name}/{names.DEPTH_IMAGE}", self.on_depth, IMAGE_QOS)
        self.inputs.subscribe(self, Plan, names.PLAN, self.on_plan, "plan", qos.PLANS)
        self.inputs.subscribe(self, ExecutionOutcome, names.OUTCOMES, self.on_outcome, "outcome")
        self.inputs.subscribe(self, Episode, names.EPISODE, self.on_episode, "episode")
        steady_timer(self, cfg.sample_period_s, self.compare)
        steady_timer(self, cfg.diagnostics_period_s, self.publish_diagnostics)
        self.get_logger().info(f"verifying {cfg.agent_id}'s steps through {cfg.camera_name} "
                               f"({self.camera.intrinsics.width}x{self.camera.intrinsics.height}), backend "
                               f"{self.verifier.perceiver.describe()}, every {cfg.sample_period_s:g} s")

    # What the verifier saw, for callers and tests: it lives in the FrameJudge.
    verifier = property(lambda self: self.judge.verifier, doc="The VisualVerifier following the agent's steps.")
    counts = property(lambda self: self.judge.counts, doc="The sampling loop's event counters.")

    def destroy_node(self) -> None:
        """Give up a request in flight (it ends within a poll) and stop the worker before the node goes."""
        if getattr(self, "judge", None) is not None:  # a constructor a signal stopped half way has none
            self.judge.close()
        super().destroy_node()

    # ------------------------------------------------------------------ inputs

    def on_color(self, msg: Image) -> None:
        """Keep the latest colour frame."""
        self.color = msg

    def on_depth(self, msg: Image) -> None:
        """Keep the latest depth frame."""
        self.depth = msg

    def on_plan(self, msg: Plan) -> None:
        """A plan of the watched agent: its steps are watched from the next frame (the latched copy is ignored)."""
        if msg.agent_id != self.config.agent_id or msg.plan_id == self.plan_id:
            return
        try:
            steps = [step_from_message(s.action, s.parameters_json) for s in msg.steps]
        except InvalidInput as exc:
            self.rejections.reject("plan", exc, msg.plan_id)
            return
        self.plan_id = msg.plan_id
        self.judge.plan(steps)

    def on_outcome(self, msg: ExecutionOutcome) -> None:
        """The executor ended the running step: the next frame judges it."""
        if msg.agent_id == self.config.agent_id:
            self.judge.outcome(bool(msg.success))

    def on_episode(self, msg: Episode) -> None:
        """EVENT_START: forget the previous episode's plan and frames."""
        if msg.event == EpisodeEvent.START:
            self.judge.episode_start()
            self.plan_id = ""

    # ------------------------------------------------------------------ comparing

    def compare(self) -> None:
        """Compare the latest frame pair (if new and paired): at once, or in the worker (backend vlm); the verdicts it
        gives are published."""
        if self.color is None or self.depth is None:
            return
        if self.judge.take_pair(seconds_of(self.color.header.stamp), seconds_of(self.depth.header.stamp)) is None:
            return
        try:   # malformed frames: counted under rejected.color / rejected.depth
            rgb = self._array("color", image_to_array, self.color)
            depth = self._array("depth", depth_to_array, self.depth)
        except InvalidInput:
            return
        try:
            self.publish_verdicts(self.judge.perceive(rgb, depth))
        except ValueError as exc:   # frames that do not match the calibration
            self.rejections.reject("frames", InvalidInput("size", str(exc)))

    def on_perceived(self) -> None:
        """The worker's perception is ready: publish its verdicts (the events that came meanwhile then apply)."""
        try:
            self.publish_verdicts(self.judge.perceived())
        except ValueError as exc:   # a frame the perceiver cannot take
            self.rejections.reject("frames", InvalidInput("size", str(exc)))

    def _array(self, name: str, convert, msg: Image) -> np.ndarray:
        try:
            return convert(msg)
        except InvalidInput as exc:
            self.rejections.reject(name, exc)
            raise

    def publish_verdicts(self, verdicts: list[Verdict]) -> None:
        """One VerifierVerdict each; a violation's trace goes to context first, so the replan it causes reads it."""
        for v in verdicts:
            d = v.diff
            msg = VerifierVerdict(agent_id=self.config.agent_id, violation=v.violation,
                                  confidence=float(v.confidence), detail=v.detail, step=v.frame, action=v.action,
                                  backend=v.backend, step_ended=v.step_ended,
                                  expected_state_achieved=v.expected_state_achieved,
                                  observed_changes=list(d.observed_changes),
                                  objects_moved_or_removed=list(d.objects_moved_or_removed),
                                  objects_remaining=list(d.objects_remaining),
                                  gripper_or_arm_state=d.gripper_or_arm_state,
                                  scene_change_notes=list(d.scene_change_notes), action_context_used=False,
                                  state_update=d.state_update(), compare_ms=float(v.compare_ms))
            msg.header.stamp = self.get_clock().now().to_msg()
            msg.header.frame_id = "base_link"
            if v.violation:
                entry = ContextEntry(agent_id=self.config.agent_id, step=v.frame, block=int(Block.HISTORY),
                                     kind=EntryKind.FAILURE_TRACE.value, text=f"visual verifier: {v.action} "
                                     f"contradicted: {v.detail}; seen: {d.state_update()}")
                entry.header.stamp = msg.header.stamp
                self.context_pub.publish(entry)
            self.verdict_pub.publish(msg)
            if v.violation:
                self.get_logger().warning(f"{v.action} contradicted ({v.confidence:.2f}): {v.detail}")

    # ------------------------------------------------------------------ monitoring

    def publish_diagnostics(self) -> None:
        """Frames compared, verdicts, the perceiver's cost, stale or unpaired frames and rejected input."""
        cfg = self.config
        health = Health({"agent_id": cfg.agent_id, "camera": cfg.camera_name, "backend": cfg.backend}) + \
            self.judge.health() + self.rejections.health() + \
            Health(self.inputs.health().values, self.judge.warnings())  # lost inputs are values here, not warnings
        self.diag_pub.publish(health_array(f"{self.get_name()}: visual verifier", health,
                                           self.get_clock().now().to_msg()))


def main(args=None) -> int:
    """`ros2 run robot_bridge visual_verifier`."""
    return spin_node(VisualVerifierNode, "visual_verifier", args)


if __name__ == "__main__":
    sys.exit(main())
