"""visual_verifier node: OmniAct's asynchronous visual verifier beside the executor (OmniAct Sec. 3.3, App. F, I).

Names are relative (launch puts the robot's nodes in its namespace).

Subscribes  <camera_name>/color/image_raw (sensor_msgs/Image rgb8 or bgr8) and <camera_name>/depth/image_raw
            (16UC1 mm, aligned to colour): sensor QoS, the layout of a real Orbbec camera and of the twin's render;
            plan (Plan, latched: the steps of `agent_id`), outcomes (ExecutionOutcome: the executor ended a step),
            episode (Episode: EVENT_START forgets the previous episode)
Publishes   verdicts (VerifierVerdict; none with `dry_run`): a violation at once when `confirm_frames` frames in
            a row contradict the running step, and one verdict per ended step (expected_state_achieved, and a
            violation when the executor reported a success the frames do not show); context (ContextEntry, block
            HISTORY, kind failure_trace: each violation with the frames' state update, published before its
            verdict, so the replan the verdict causes reads it); /diagnostics

Every `sample_period_s` the latest colour and depth frames with stamps within `max_frame_skew_s` are compared.
The perceiver (verifier.scene_diff) sees only the frames, the calibration and the object catalogue, never the plan;
the comparison with the running step (verifier.step_check) happens after, and the verdict says
action_context_used = false. A frame that is malformed, or a plan whose parameters are not a JSON object, is
counted (rejected.*) and dropped; the node goes on.

Parameters: see robot_bridge.verifier.verifier_config.VerifierConfig (config/visual_verifier.yaml).
"""

from __future__ import annotations

import sys
import time
from collections import Counter
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
from brace_common.diagnostics import diagnostic_array, nonzero
from brace_common.params import declare_config, reject_undeclared
from brace_common.spin import spin_node
from brace_common.validation import InvalidInput, Rejections
from brace_common.vocabulary import Block, EntryKind, EpisodeEvent

from ..orbbec.calibration import load_calibration
from ..orbbec.image_msgs import IMAGE_QOS, depth_to_array, image_to_array
from .verifier_config import VerifierConfig
from .visual_verifier import Verdict, VisualVerifier


class VisualVerifierNode(Node):
    """Thin rclpy shell around VisualVerifier: frames, plans and outcomes in, verdicts out."""

    def __init__(self, **kwargs) -> None:
        super().__init__("visual_verifier", **kwargs)
        self.config = declare_config(self, VerifierConfig)
        reject_undeclared(self)
        cfg = self.config
        self.camera = load_calibration(cfg.camera_calibration)
        self.verifier = VisualVerifier(cfg.perceiver(self.camera), cfg.confirm_frames)
        self.rejections = Rejections(self.get_logger())
        self.inputs = CountedInputs()
        self.counts: Counter[str] = Counter()
        # the latest frames as received: converted only when a pair is compared (a camera runs faster than sampling)
        self.color: Optional[Image] = None
        self.depth: Optional[Image] = None
        self.compared_stamp = -1.0
        self.last_pair_time: Optional[float] = None
        self.compare_ms: list[float] = []
        self.plan_id = ""

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
                               f"{cfg.backend}, every {cfg.sample_period_s:g} s")

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
        self.verifier.on_plan(steps)
        self.counts["plans"] += 1

    def on_outcome(self, msg: ExecutionOutcome) -> None:
        """The executor ended the running step: the next frame judges it."""
        if msg.agent_id == self.config.agent_id:
            self.verifier.on_outcome(bool(msg.success))
            self.counts["outcomes"] += 1

    def on_episode(self, msg: Episode) -> None:
        """EVENT_START: forget the previous episode's plan and frames."""
        if msg.event == EpisodeEvent.START:
            self.verifier.clear()
            self.plan_id = ""

    # ------------------------------------------------------------------ comparing

    def compare(self) -> None:
        """Compare the latest frame pair (if new and paired) and publish the verdicts it gives."""
        if self.color is None or self.depth is None:
            return
        color_stamp, depth_stamp = seconds_of(self.color.header.stamp), seconds_of(self.depth.header.stamp)
        if abs(color_stamp - depth_stamp) > self.config.max_frame_skew_s:
            self.counts["unpaired_frames"] += 1
            return
        if color_stamp <= self.compared_stamp:
            return
        self.compared_stamp = color_stamp
        try:   # malformed frames: counted under rejected.color / rejected.depth
            rgb = self._array("color", image_to_array, self.color)
            depth = self._array("depth", depth_to_array, self.depth)
        except InvalidInput:
            return
        self.last_pair_time = time.monotonic()
        try:
            verdicts = self.verifier.on_frame(rgb, depth)
        except ValueError as exc:   # frames that do not match the calibration
            self.rejections.reject("frames", InvalidInput("size", str(exc)))
            return
        self.compare_ms.append(self.verifier.last.compare_ms)
        del self.compare_ms[:-100]
        for verdict in verdicts:
            self.publish_verdict(verdict)

    def _array(self, name: str, convert, msg: Image) -> np.ndarray:
        try:
            return convert(msg)
        except InvalidInput as exc:
            self.rejections.reject(name, exc)
            raise

    def publish_verdict(self, v: Verdict) -> None:
        """One VerifierVerdict (with dry_run: counted only)."""
        if self.config.dry_run:
            self.counts["verdicts_dry_run"] += 1
            return
        d = v.diff
        msg = VerifierVerdict(agent_id=self.config.agent_id, violation=v.violation, confidence=float(v.confidence),
                              detail=v.detail, step=v.frame, action=v.action, backend=v.backend,
                              step_ended=v.step_ended, expected_state_achieved=v.expected_state_achieved,
                              observed_changes=list(d.observed_changes),
                              objects_moved_or_removed=list(d.objects_moved_or_removed),
                              objects_remaining=list(d.objects_remaining), gripper_or_arm_state=d.gripper_or_arm_state,
                              scene_change_notes=list(d.scene_change_notes), action_context_used=False,
                              state_update=d.state_update(), compare_ms=float(v.compare_ms))
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.header.frame_id = "base_link"
        if v.violation:
            entry = ContextEntry(agent_id=self.config.agent_id, step=v.frame, block=int(Block.HISTORY),
                                 kind=EntryKind.FAILURE_TRACE.value,
                                 text=f"visual verifier: {v.action} contradicted: {v.detail}; seen: {d.state_update()}")
            entry.header.stamp = msg.header.stamp
            self.context_pub.publish(entry)
        self.verdict_pub.publish(msg)
        self.counts["verdicts"] += 1
        if v.violation:
            self.counts["violations"] += 1
            self.get_logger().warning(f"{v.action} contradicted ({v.confidence:.2f}): {v.detail}")

    # ------------------------------------------------------------------ monitoring

    def publish_diagnostics(self) -> None:
        """Frames compared, verdicts, the perceiver's cost, stale or unpaired frames and rejected input."""
        cfg = self.config
        stale = self.last_pair_time is None or time.monotonic() - self.last_pair_time > cfg.stale_after_s
        costs = sorted(self.compare_ms)
        values = {"agent_id": cfg.agent_id, "camera": cfg.camera_name, "backend": cfg.backend,
                  "step": self.verifier.current.text() if self.verifier.current else "idle",
                  "compare_ms_p50": round(costs[len(costs) // 2], 2) if costs else "",
                  "compare_ms_max": round(costs[-1], 2) if costs else "", "frames_stale": stale,
                  **dict(sorted(self.counts.items())), **{f"verifier.{k}": v for k, v in self.verifier.counts.items()},
                  **{f"rejected.{k}": v for k, v in sorted(self.rejections.counts.items())}, **self.inputs.counts}
        warnings = nonzero(self.counts, ("unpaired_frames",)) + [f"rejected.{k}" for k in sorted(self.rejections.counts)]
        if stale:
            warnings.append(f"no frame pair from {cfg.camera_name} for {cfg.stale_after_s:g} s")
        self.diag_pub.publish(diagnostic_array(f"{self.get_name()}: visual verifier", values,
                                               self.get_clock().now().to_msg(), warnings))


def main(args=None) -> int:
    """`ros2 run robot_bridge visual_verifier`."""
    return spin_node(VisualVerifierNode, "visual_verifier", args)


if __name__ == "__main__":
    sys.exit(main())
