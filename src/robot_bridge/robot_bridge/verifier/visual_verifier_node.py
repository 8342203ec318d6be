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
The perceiver (verifier.scene_diff, or verifier.vlm_perceiver with backend `vlm`) sees only the frames, the
calibration and the object catalogue, never the plan; the comparison with the running step (verifier.step_check)
happens after, and the verdict says action_context_used = false. A frame that is malformed, or a plan whose
parameters are not a JSON object, is counted (rejected.*) and dropped; the node goes on.

The geometric perceiver takes milliseconds and runs in the sampling timer. A VLM request takes seconds, so backend
`vlm` perceives in a worker thread, one frame pair at a time: new pairs sampled meanwhile are counted
(skipped_frames) and the newest is compared next. The result comes back to the executor through a guard condition,
and the plans, outcomes and episode starts that arrived while it was in flight are applied to the verifier after it
(the frame was taken before them). A failed request (no answer in time, an HTTP error, an unreadable reply) is
counted (perceiver_errors, perceiver_error.<reason>) and makes diagnostics WARN; no verdict comes of it.

Parameters: see robot_bridge.verifier.verifier_config.VerifierConfig (config/visual_verifier.yaml).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
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
from brace_common.counters import Counters, Health
from brace_common.diagnostics import health_array
from brace_common.params import declare_config, reject_undeclared
from brace_common.spin import spin_node
from brace_common.validation import InvalidInput, Rejections
from brace_common.vocabulary import Block, EntryKind, EpisodeEvent

from ..orbbec.calibration import load_calibration
from ..orbbec.image_msgs import IMAGE_QOS, depth_to_array, image_to_array
from .scene_diff import BACKEND_GEOMETRIC, PerceiverError, Perception
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
        self.counts = Counters(("plans", "outcomes", "unpaired_frames", "verdicts", "verdicts_dry_run", "violations"),
                               warn=("unpaired_frames",))
        # the latest frames as received: converted only when a pair is compared (a camera runs faster than sampling)
        self.color: Optional[Image] = None
        self.depth: Optional[Image] = None
        self.compared_stamp = -1.0
        self.last_pair_time: Optional[float] = None
        self.compare_ms: list[float] = []
        self.plan_id = ""
        # backend vlm: perceive in a worker, one frame pair in flight; verifier events wait for its result
        self.worker = ThreadPoolExecutor(1, "perceiver") if cfg.backend != BACKEND_GEOMETRIC else None
        self.in_flight: Optional[Future] = None
        self.deferred: list[Callable[[], None]] = []
        self.skipped_stamp = -1.0
        self.perceiver_error = ""          # the last request's error ('' once one succeeds)
        self.errors_reported = 0           # perceiver_errors at the last diagnostics
        self.perceived = self.create_guard_condition(self.on_perceived)
        if self.worker is not None:
            self.counts.declare("skipped_frames", "perceiver_errors")
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

    def destroy_node(self) -> None:
        """Give up a request in flight (it ends within a poll) and stop the worker before the node goes."""
        self.verifier.perceiver.close()
        if self.worker is not None:
            self.worker.shutdown(wait=True, cancel_futures=True)
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
        self.to_verifier(lambda: self.verifier.on_plan(steps))
        self.counts["plans"] += 1

    def on_outcome(self, msg: ExecutionOutcome) -> None:
        """The executor ended the running step: the next frame judges it."""
        if msg.agent_id == self.config.agent_id:
            success = bool(msg.success)
            self.to_verifier(lambda: self.verifier.on_outcome(success))
            self.counts["outcomes"] += 1

    def on_episode(self, msg: Episode) -> None:
        """EVENT_START: forget the previous episode's plan and frames."""
        if msg.event == EpisodeEvent.START:
            self.to_verifier(self.verifier.clear)
            self.plan_id = ""

    def to_verifier(self, event: Callable[[], None]) -> None:
        """Apply a plan, outcome or episode start to the verifier now, or after the perception in flight (its frame
        came before the event)."""
        if self.in_flight is not None:
            self.deferred.append(event)
        else:
            event()

    # ------------------------------------------------------------------ comparing

    def compare(self) -> None:
        """Compare the latest frame pair (if new and paired): at once, or in the worker (backend vlm); the verdicts it
        gives are published."""
        stamp = self._new_pair()
        if stamp is None:
            return
        if self.in_flight is not None:   # the worker is busy: this pair is skipped, the newest is compared next
            self.last_pair_time = time.monotonic()
            if stamp > self.skipped_stamp:
                self.skipped_stamp = stamp
                self.counts["skipped_frames"] += 1
            return
        self.compared_stamp = stamp
        try:   # malformed frames: counted under rejected.color / rejected.depth
            rgb = self._array("color", image_to_array, self.color)
            depth = self._array("depth", depth_to_array, self.depth)
        except InvalidInput:
            return
        self.last_pair_time = time.monotonic()
        if self.worker is not None:
            self.in_flight = self.worker.submit(self.verifier.perceiver.perceive, rgb, depth, self.verifier.last)
            self.in_flight.add_done_callback(lambda _future: self.perceived.trigger())
            return
        try:
            self.judge(self.verifier.perceiver.perceive(rgb, depth, self.verifier.last))
        except ValueError as exc:   # frames that do not match the calibration
            self.rejections.reject("frames", InvalidInput("size", str(exc)))

    def _new_pair(self) -> Optional[float]:
        """The stamp of the latest colour frame when it pairs with the latest depth frame and was not compared yet."""
        if self.color is None or self.depth is None:
            return None
        color_stamp, depth_stamp = seconds_of(self.color.header.stamp), seconds_of(self.depth.header.stamp)
        if abs(color_stamp - depth_stamp) > self.config.max_frame_skew_s:
            self.counts["unpaired_frames"] += 1
            return None
        return color_stamp if color_stamp > self.compared_stamp else None

    def on_perceived(self) -> None:
        """The worker's perception is ready: judge it, then apply the events that came while it was in flight."""
        future, self.in_flight = self.in_flight, None
        if future is None:
            return
        try:
            self.judge(future.result())
        except PerceiverError as exc:
            self.counts["perceiver_errors"] += 1
            self.counts.declare(f"perceiver_error.{exc.reason}")  # the reason comes from the error
            self.counts[f"perceiver_error.{exc.reason}"] += 1
            self.perceiver_error = str(exc)
            self.get_logger().warning(f"perceiver failed: {exc}", throttle_duration_sec=10.0)
        except ValueError as exc:   # a frame the perceiver cannot take
            self.rejections.reject("frames", InvalidInput("size", str(exc)))
        finally:
            deferred, self.deferred = self.deferred, []
            for event in deferred:
                event()

    def judge(self, now: Perception) -> None:
        """One frame's perception: the verdicts it gives, published."""
        self.perceiver_error = ""
        verdicts = self.verifier.on_perception(now)
        self.compare_ms.append(now.compare_ms)
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
                  "compare_ms_max": round(costs[-1], 2) if costs else "", "frames_stale": stale}
        if self.worker is not None:
            values.update(perceiving=self.in_flight is not None, perceiver_error=self.perceiver_error)
        warnings = []
        if stale:
            warnings.append(f"no frame pair from {cfg.camera_name} for {cfg.stale_after_s:g} s")
        errors = self.counts.get("perceiver_errors", 0)
        if errors > self.errors_reported or self.perceiver_error:
            warnings.append(f"perceiver failed ({errors} in all): {self.perceiver_error or 'since recovered'}")
        self.errors_reported = errors
        health = Health(values) + self.counts.health() + self.verifier.health() + self.rejections.health() + \
            Health(self.inputs.health().values, tuple(warnings))  # lost inputs are values here, not warnings
        self.diag_pub.publish(health_array(f"{self.get_name()}: visual verifier", health,
                                           self.get_clock().now().to_msg()))

def main(args=None) -> int:
    """`ros2 run robot_bridge visual_verifier`."""
    return spin_node(VisualVerifierNode, "visual_verifier", args)


if __name__ == "__main__":
    sys.exit(main())
