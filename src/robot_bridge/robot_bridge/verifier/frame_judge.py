"""The visual verifier's sampling loop, ROS-free: which frame pair is compared next, perceiving it at once or in a
worker (backend vlm), and holding back plans, outcomes and episode starts while a perception is in flight.
Why and how: docs/visual_verifier.md, "What it does" and "The VLM backend".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Optional

import numpy as np

from brace_common.action_schema import Step
from brace_common.counters import Counters, Health

from .scene_diff import BACKEND_GEOMETRIC, PerceiverError, Perception
from .verifier_config import VerifierConfig
from .visual_verifier import Verdict, VisualVerifier

COUNTERS = ("plans", "outcomes", "unpaired_frames", "verdicts", "verdicts_dry_run", "violations")
"""What the sampling loop counts (its diagnostics keys); a worker adds skipped_frames and perceiver_errors."""
KEPT_COSTS = 100
"""The perception costs (compare_ms) diagnostics take their P50 and maximum over."""


class FrameJudge:
    """Frame pairs in, verdicts out, for one VisualVerifier.

    With a slow backend (any but geometric) perception runs in a worker, one pair at a time: `wake` is called when
    its result is ready and the caller then calls `perceived`. `logger` is rclpy's or any logger taking
    `throttle_duration_sec`.
    """

    def __init__(self, config: VerifierConfig, verifier: VisualVerifier, logger,
                 wake: Callable[[], None] = lambda: None) -> None:
        self.config = config
        self.verifier = verifier
        self.log = logger
        self.wake = wake
        self.counts = Counters(COUNTERS, warn=("unpaired_frames",))
        self.compared_stamp = -1.0
        self.last_pair_time: Optional[float] = None
        self.compare_ms: list[float] = []
        self.worker = ThreadPoolExecutor(1, "perceiver") if config.backend != BACKEND_GEOMETRIC else None
        self.in_flight: Optional[Future] = None
        self.deferred: list[Callable[[], None]] = []
        self.skipped_stamp = -1.0
        self.perceiver_error = ""          # the last request's error ('' once one succeeds)
        self.errors_reported = 0           # perceiver_errors at the last health report
        if self.worker is not None:
            self.counts.declare("skipped_frames", "perceiver_errors")

    def close(self) -> None:
        """Give up a request in flight (it ends within a poll) and stop the worker."""
        self.verifier.perceiver.close()
        if self.worker is not None:
            self.worker.shutdown(wait=True, cancel_futures=True)

    # ------------------------------------------------------------------ what the executor does

    def plan(self, steps: list[Step]) -> None:
        """A new plan of the watched agent: its steps are watched from the next frame."""
        self._to_verifier(lambda: self.verifier.on_plan(steps))
        self.counts["plans"] += 1

    def outcome(self, success: bool) -> None:
        """The executor ended the running step: the next frame judges it."""
        self._to_verifier(lambda: self.verifier.on_outcome(success))
        self.counts["outcomes"] += 1

    def episode_start(self) -> None:
        """A new episode: forget the previous one's plan and frames."""
        self._to_verifier(self.verifier.clear)

    def _to_verifier(self, event: Callable[[], None]) -> None:
        """Apply an event to the verifier now, or after the perception in flight (its frame came before the event)."""
        if self.in_flight is not None:
            self.deferred.append(event)
        else:
            event()

    # ------------------------------------------------------------------ frames

    def take_pair(self, color_stamp: float, depth_stamp: float) -> Optional[float]:
        """The stamp of the latest frame pair when it is to be compared now: paired (within max_frame_skew_s), not
        compared yet, and no perception in flight (then it is skipped and the newest is compared next)."""
        if abs(color_stamp - depth_stamp) > self.config.max_frame_skew_s:
            self.counts["unpaired_frames"] += 1
            return None
        if color_stamp <= self.compared_stamp:
            return None
        if self.in_flight is not None:
            self.last_pair_time = time.monotonic()
            if color_stamp > self.skipped_stamp:
                self.skipped_stamp = color_stamp
                self.counts["skipped_frames"] += 1
            return None
        self.compared_stamp = color_stamp
        return color_stamp

    def perceive(self, rgb: np.ndarray, depth_mm: np.ndarray) -> list[Verdict]:
        """Perceive a taken pair: at once (the verdicts to publish; ValueError for frames that do not match the
        calibration), or in the worker (none yet: `perceived` gives them)."""
        self.last_pair_time = time.monotonic()
        if self.worker is not None:
            self.in_flight = self.worker.submit(self.verifier.perceiver.perceive, rgb, depth_mm, self.verifier.last)
            self.in_flight.add_done_callback(lambda _future: self.wake())
            return []
        return self._judge(self.verifier.perceiver.perceive(rgb, depth_mm, self.verifier.last))

    def perceived(self) -> list[Verdict]:
        """The worker's perception, judged: the verdicts to publish (a failed request is counted, none come of it;
        ValueError for a frame the perceiver cannot take). The events held back meanwhile are applied after it."""
        future, self.in_flight = self.in_flight, None
        if future is None:
            return []
        try:
            return self._judge(future.result())
        except PerceiverError as exc:
            self.counts["perceiver_errors"] += 1
            self.counts.declare(f"perceiver_error.{exc.reason}")  # the reason comes from the error
            self.counts[f"perceiver_error.{exc.reason}"] += 1
            self.perceiver_error = str(exc)
            self.log.warning(f"perceiver failed: {exc}", throttle_duration_sec=10.0)
            return []
        finally:
            deferred, self.deferred = self.deferred, []
            for event in deferred:
                event()

    def _judge(self, now: Perception) -> list[Verdict]:
        """One frame's perception: the verdicts to publish (none in dry run), counted."""
        self.perceiver_error = ""
        verdicts = self.verifier.on_perception(now)
        self.compare_ms.append(now.compare_ms)
        del self.compare_ms[:-KEPT_COSTS]
        if self.config.dry_run:
            self.counts["verdicts_dry_run"] += len(verdicts)
            return []
        self.counts["verdicts"] += len(verdicts)
        self.counts["violations"] += sum(v.violation for v in verdicts)
        return verdicts

    # ------------------------------------------------------------------ monitoring

    def health(self) -> Health:
        """The running step, the perceiver's cost and stale frames as values, the counts (warnings: `warnings`)."""
        costs = sorted(self.compare_ms)
        values = {"step": self.verifier.current.text() if self.verifier.current else "idle",
                  "compare_ms_p50": round(costs[len(costs) // 2], 2) if costs else "",
                  "compare_ms_max": round(costs[-1], 2) if costs else "", "frames_stale": self._stale()}
        if self.worker is not None:
            values.update(perceiving=self.in_flight is not None, perceiver_error=self.perceiver_error)
        return Health(values) + self.counts.health() + self.verifier.health()

    def warnings(self) -> tuple[str, ...]:
        """What makes diagnostics WARN: no frame pair for stale_after_s, a request failed since the last call."""
        cfg = self.config
        warnings = []
        if self._stale():
            warnings.append(f"no frame pair from {cfg.camera_name} for {cfg.stale_after_s:g} s")
        errors = self.counts.get("perceiver_errors", 0)
        if errors > self.errors_reported or self.perceiver_error:
            warnings.append(f"perceiver failed ({errors} in all): {self.perceiver_error or 'since recovered'}")
        self.errors_reported = errors
        return tuple(warnings)

    def _stale(self) -> bool:
        return self.last_pair_time is None or time.monotonic() - self.last_pair_time > self.config.stale_after_s
