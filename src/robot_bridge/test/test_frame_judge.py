"""FrameJudge without ROS: pairing frames, perceiving at once or in a worker, events held back while a perception is
in flight, dry run, failed requests and what diagnostics report."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Optional

import numpy as np

from brace_common.action_schema import Step
from robot_bridge.verifier.frame_judge import FrameJudge
from robot_bridge.verifier.scene_diff import (
    GRIPPER,
    TABLE,
    Catalogue,
    Perceiver,
    PerceiverError,
    Perception,
    Sighting,
)
from robot_bridge.verifier.verifier_config import VerifierConfig
from robot_bridge.verifier.visual_verifier import VisualVerifier

PICK = [Step("pick", {"object": "apple"})]
FRAME = (np.zeros((2, 2, 3), np.uint8), np.zeros((2, 2), np.uint16))
WAIT_S = 15.0


def seen(place: str) -> Perception:
    """The apple at `place`, 200 pixels of it."""
    return Perception({"apple": Sighting("apple", place, 200, (0.3, 0.0, 0.05))}, compare_ms=4.0)


class Scripted(Perceiver):
    """Perceives what the script says, in order (a PerceiverError entry is raised); with `hold`, each call waits for
    `release` first."""

    backend = "scripted"

    def __init__(self, *script, hold: bool = False) -> None:
        super().__init__(Catalogue({"apple": (200, 30, 30)}, 0.0))
        self.script = list(script)
        self.hold = hold
        self.release = threading.Event()

    def perceive(self, rgb, depth_mm, last: Optional[Perception] = None) -> Perception:
        if self.hold:
            assert self.release.wait(WAIT_S)
            self.release.clear()
        entry = self.script.pop(0)
        if isinstance(entry, Exception):
            raise entry
        return entry


class Logger:
    """Keeps warnings."""

    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, text: str, **_kwargs) -> None:
        self.warnings.append(text)


def judge_of(perceiver: Perceiver, **config) -> tuple[FrameJudge, threading.Event]:
    woken = threading.Event()
    judge = FrameJudge(replace(VerifierConfig(), **config), VisualVerifier(perceiver, confirm_frames=2), Logger(),
                       woken.set)
    return judge, woken


def test_a_pair_is_compared_once_and_only_when_its_stamps_agree():
    judge, _ = judge_of(Scripted(), max_frame_skew_s=0.05)
    assert judge.take_pair(10.0, 10.2) is None and judge.counts["unpaired_frames"] == 1
    assert judge.take_pair(10.0, 10.01) == 10.0
    assert judge.take_pair(10.0, 10.0) is None, "compared already"
    assert judge.take_pair(10.5, 10.5) == 10.5 and judge.counts["unpaired_frames"] == 1
    assert "unpaired_frames" in judge.health().warnings


def test_the_geometric_path_judges_at_once_and_counts_the_verdicts():
    judge, woken = judge_of(Scripted(seen(TABLE), seen(TABLE)))
    assert judge.warnings() == ("no frame pair from front_camera for 1 s",)
    judge.plan(PICK)
    assert judge.perceive(*FRAME) == [], "the pick's first frame"
    judge.outcome(True)
    (verdict,) = judge.perceive(*FRAME)
    assert verdict.step_ended and verdict.violation and not verdict.expected_state_achieved
    assert judge.counts["verdicts"] == 1 and judge.counts["violations"] == 1 and judge.counts["plans"] == 1
    assert judge.counts["outcomes"] == 1 and not woken.is_set() and judge.worker is None
    health = judge.health()
    assert health.values["compare_ms_p50"] == 4.0 and health.values["step"] == "idle"
    assert health.values["verifier.frames"] == 2 and "perceiving" not in health.values
    assert judge.warnings() == (), "a pair was just compared"


def test_a_dry_run_counts_the_verdicts_and_publishes_none():
    judge, _ = judge_of(Scripted(seen(TABLE), seen(GRIPPER)), dry_run=True)
    judge.plan(PICK)
    judge.perceive(*FRAME)
    judge.outcome(True)
    assert judge.perceive(*FRAME) == []
    assert judge.counts["verdicts_dry_run"] == 1 and judge.counts["verdicts"] == 0


def test_a_slow_backend_perceives_in_a_worker_and_holds_events_back_until_its_result():
    perceiver = Scripted(seen(TABLE), PerceiverError("timeout", "no answer in 10 s"), hold=True)
    judge, woken = judge_of(perceiver, backend="vlm")
    try:
        assert judge.take_pair(1.0, 1.0) == 1.0
        assert judge.perceive(*FRAME) == [] and judge.health().values["perceiving"] is True
        assert judge.take_pair(2.0, 2.0) is None and judge.take_pair(2.0, 2.0) is None
        assert judge.take_pair(3.0, 3.0) is None and judge.counts["skipped_frames"] == 2, "each new pair once"
        judge.plan(PICK)
        assert judge.verifier.current is None, "the plan waits for the perception in flight (its frame came first)"
        perceiver.release.set()
        assert woken.wait(WAIT_S), "the worker wakes the caller"
        assert judge.perceived() == [] and judge.verifier.current == PICK[0]
        assert judge.verifier.check is None, "the pick starts at the next frame"

        woken.clear()
        assert judge.take_pair(4.0, 4.0) == 4.0
        judge.perceive(*FRAME)
        perceiver.release.set()
        assert woken.wait(WAIT_S)
        assert judge.perceived() == []
        assert judge.counts["perceiver_errors"] == 1 and judge.counts["perceiver_error.timeout"] == 1
        assert judge.health().values["perceiver_error"] == "no answer in 10 s"
        assert judge.warnings() == ("perceiver failed (1 in all): no answer in 10 s",)
        assert judge.log.warnings == ["perceiver failed: no answer in 10 s"]
        assert judge.perceived() == [], "nothing in flight"
    finally:
        perceiver.release.set()
        judge.close()
