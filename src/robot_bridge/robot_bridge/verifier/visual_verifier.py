"""The verifier beside the executor, ROS-free: plans and outcomes say which step runs, frames say what happens.

`VisualVerifier` follows one agent's plan the way the executor runs it (a
new plan starts at its first step; a success moves to the next step; a failure
ends the plan) and compares every frame it is given with the running step's
first frame. The perceiver sees only the frames; `StepCheck` compares its
diff with the step. It returns a `Verdict` when a step is contradicted (once
per step: the executor halts it) and when a step ends (the end-of-step check:
a success the frames do not show is contradicted). `on_frame` perceives and
judges in one call; a caller that perceives elsewhere (the node's worker for a
slow VLM) hands the result to `on_perception`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np

from brace_common.action_schema import Step
from brace_common.counters import Counters, Health

from .scene_diff import BACKEND_GEOMETRIC, Perceiver, Perception, SceneDiff
from .step_check import Contradiction, StepCheck


@dataclass(frozen=True)
class Verdict:
    """One verdict: VerifierVerdict's fields without the header."""

    violation: bool
    confidence: float
    detail: str
    action: str
    step_ended: bool
    expected_state_achieved: bool     # step_ended: the frame shows the step's expected result (false during a step)
    frame: int
    diff: SceneDiff
    compare_ms: float
    backend: str = BACKEND_GEOMETRIC


class VisualVerifier:
    """Watches one agent's steps through one camera with a perceiver (any backend)."""

    def __init__(self, perceiver: Perceiver, confirm_frames: int = 2) -> None:
        self.perceiver = perceiver
        self.confirm_frames = confirm_frames
        self.regions = frozenset(r.name for r in perceiver.catalogue.regions)
        self.steps: list[Step] = []
        self.index = 0
        self.check: Optional[StepCheck] = None
        self.pending_end: Optional[tuple[StepCheck, Step, bool]] = None
        self.starting = False          # the current step starts at the next frame
        self.last: Optional[Perception] = None
        self.frames = 0
        self.counts = Counters(("frames", "steps_checked", "violations", "contradicted_successes"))

    def health(self) -> Health:
        """Frames perceived, steps checked, violations and successes the frames contradict (verifier.<name>)."""
        return self.counts.health("verifier.")

    @property
    def current(self) -> Optional[Step]:
        """The step being executed (None when idle)."""
        return self.steps[self.index] if self.index < len(self.steps) else None

    def on_plan(self, steps: Sequence[Step]) -> None:
        """A new plan: its first step starts at the next frame."""
        self.steps, self.index = list(steps), 0
        self.check, self.starting = None, bool(self.steps)

    def on_outcome(self, success: bool) -> None:
        """The executor ended the current step: the next frame judges it; a success starts the next step."""
        step = self.current
        if step is None:
            return
        if self.check is not None:
            self.pending_end = (self.check, step, success)
        self.check = None
        self.index = self.index + 1 if success else len(self.steps)
        self.starting = self.current is not None

    def clear(self) -> None:
        """A new episode: no plan, no memory of earlier frames."""
        self.steps, self.index, self.check, self.pending_end, self.starting, self.last = [], 0, None, None, False, None

    def on_frame(self, rgb: np.ndarray, depth_mm: np.ndarray) -> list[Verdict]:
        """Perceive one frame; the verdicts it gives (an ended step's, a contradiction of the running step)."""
        return self.on_perception(self.perceiver.perceive(rgb, depth_mm, self.last))

    def on_perception(self, now: Perception) -> list[Verdict]:
        """One frame's perception (perceived with `last` as it was): the verdicts it gives."""
        self.frames += 1
        self.counts["frames"] += 1
        self.last = now
        verdicts = []
        if self.pending_end is not None:
            check, step, success = self.pending_end
            self.pending_end = None
            self.counts["steps_checked"] += 1
            end = check.ended(now, success)
            if end.contradiction is not None:
                self.counts["contradicted_successes"] += 1
            verdicts.append(self._verdict(check, step, now, end.contradiction, True, end.achieved))
        if self.starting and self.current is not None:
            self.check = StepCheck(self.current.action, self.current.parameters, now, self.regions, self.confirm_frames)
            self.starting = False
            return self._count(verdicts)
        if self.check is not None and self.current is not None:
            found = self.check.frame(now)
            if found is not None:
                verdicts.append(self._verdict(self.check, self.current, now, found, False, False))
                self.check = None   # once per step: the executor halts it
        return self._count(verdicts)

    def _count(self, verdicts: list[Verdict]) -> list[Verdict]:
        self.counts["violations"] += sum(v.violation for v in verdicts)
        return verdicts

    def _verdict(self, check: StepCheck, step: Step, now: Perception, found: Optional[Contradiction],
                 ended: bool, achieved: bool) -> Verdict:
        diff = self.perceiver.diff(check.first, now)
        if found is None:
            detail = "" if not ended else "the frames show the step's expected result" if achieved else \
                "the frames do not show the step's expected result"
            return Verdict(False, check.support(now), detail, step.text(), ended, achieved, self.frames, diff,
                           now.compare_ms, self.perceiver.backend)
        return Verdict(True, found.confidence, found.detail, step.text(), ended, achieved, self.frames, diff,
                       now.compare_ms, self.perceiver.backend)
