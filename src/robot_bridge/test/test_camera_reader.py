"""CameraReader without ROS: retries, bad frames, lost and stalled sources, failed publishes, the end of a video."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Optional

import numpy as np

from robot_bridge.orbbec.camera_config import CameraConfig
from robot_bridge.orbbec.camera_reader import CameraReader
from robot_bridge.orbbec.frame_convert import FrameError
from robot_bridge.orbbec.orbbec_device import DeviceLostError, Frames, NoDeviceError

CFG = replace(CameraConfig(), reconnect_period_s=0.01, frame_timeout_s=60.0)
STALLING = replace(CFG, frame_timeout_s=0.2)
WAIT_S = 15.0


class Logger:
    """Keeps what the reader logs."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __getattr__(self, level: str):
        return lambda text, **_kwargs: self.lines.append((level, text))


class Script:
    """A FrameSource double that plays a script: one entry per open or read ('absent', 'frame', 'depth', 'bad',
    'lost', 'stall', 'end'); past the script it stalls. `opened` fires at the `mark_opens`-th open."""

    def __init__(self, *steps: str, mark_opens: int = 0) -> None:
        self.steps = list(steps)
        self.description = "double"
        self.finished = False
        self.opens = self.closes = 0
        self.mark_opens = mark_opens
        self.opened = threading.Event()

    def _next(self) -> str:
        return self.steps.pop(0) if self.steps else "stall"

    def open(self) -> None:
        self.opens += 1
        if self.opens == self.mark_opens:
            self.opened.set()
        if self._next() == "absent":
            raise NoDeviceError("no camera")

    def read(self, timeout_s: float) -> Optional[Frames]:
        step = self._next()
        if step == "bad":
            raise FrameError("truncated")
        if step == "lost":
            raise DeviceLostError("unplugged")
        if step == "end":
            self.finished = True
        if step in ("stall", "end"):
            return None
        depth = np.zeros((2, 2), np.uint16) if step == "depth" else None
        return Frames(np.zeros((2, 2, 3), np.uint8), depth)

    def close(self) -> None:
        self.closes += 1


class Published:
    """The node's publishing double: yields a counter per stream; `fail` raises; `event` fires after `until` sets."""

    def __init__(self, until: int, fail: bool = False) -> None:
        self.sets, self.until, self.fail = 0, until, fail
        self.event = threading.Event()

    def __call__(self, frames: Frames):
        self.sets += 1
        if self.sets >= self.until:
            self.event.set()
        if self.fail:
            raise RuntimeError("publisher gone")
        yield "frames_published"
        if frames.depth is not None:
            yield "depth_frames_published"


def run(source: Script, publish: Published, alive: bool = True, cfg: CameraConfig = CFG) -> CameraReader:
    reader = CameraReader(Logger())
    reader.start(source, cfg, "reader_test", publish, lambda: alive)
    assert publish.event.wait(WAIT_S), "the reader published"
    return reader


def test_a_missing_camera_is_retried_then_streams_and_each_stream_is_counted():
    source = Script("absent", "absent", "open", "frame", "depth", "bad", "frame")
    reader = run(source, Published(until=3))
    reader.stop()
    assert not reader.running and source.closes >= 3  # each failed open closes, and so does the stop
    counts = reader.counts
    assert counts["open_attempts"] == 3 and counts["open_failures"] == 2 and counts["connects"] == 1
    assert counts["frames_published"] == 3 and counts["depth_frames_published"] == 1 and counts["bad_frames"] == 1
    health = reader.health()
    assert health.values["errors"] == 3 and health.values["source_error"] == "" and health.warnings == ("bad_frames",)
    assert reader.trouble() == ""


def test_a_lost_and_a_stalled_source_are_closed_and_reopened():
    source = Script("open", "frame", "lost", "open", "frame", "stall", "stall", mark_opens=3)
    reader = CameraReader(Logger())
    reader.start(source, STALLING, "reader_test", Published(until=99), lambda: True)
    assert source.opened.wait(WAIT_S), "reopened after the stall"
    reader.stop()
    assert reader.counts["disconnects"] == 2 and reader.counts["connects"] == 3
    assert reader.last_disconnect == "lost double: no frame for 0.2 s"
    assert ("error", "lost double: DeviceLostError: unplugged; reconnecting every 0.01 s") in reader.log.lines


def test_a_camera_that_never_opens_says_why_with_the_attempts():
    source = Script(*(["absent"] * 1000), mark_opens=3)
    reader = CameraReader(Logger())
    reader.start(source, CFG, "reader_test", Published(until=1), lambda: True)
    assert source.opened.wait(WAIT_S), "three attempts"
    reader.stop()
    assert reader.counts["open_failures"] >= 3 and reader.counts["connects"] == 0
    assert reader.trouble().startswith("no camera (open attempts: ")
    assert [level for level, _ in reader.log.lines] == ["error"], "the same reason is logged once"


def test_a_failed_publish_is_counted_and_the_camera_keeps_streaming():
    publish = Published(until=3, fail=True)
    reader = run(Script("open", "frame", "frame", "frame"), publish)
    reader.stop()
    assert reader.counts["publish_errors"] >= 2 and reader.counts["frames_published"] == 0
    assert "publish_errors" in reader.health().warnings


def test_a_failed_publish_while_the_process_shuts_down_ends_the_thread():
    publish = Published(until=1, fail=True)
    reader = run(Script("open", "frame", "frame"), publish, alive=False)
    reader._thread.join(WAIT_S)
    assert not reader.running and publish.sets == 1 and reader.counts["publish_errors"] == 0
    assert not reader.connected


def test_a_video_without_loop_finishes_after_its_last_frame():
    source = Script("open", "frame", "end")
    reader = run(source, Published(until=1))
    reader._thread.join(WAIT_S)
    assert reader.finished and not reader.running and source.closes == 1
    assert reader.trouble() == "" and reader.health().values["finished"] is True
