"""The camera node's reading thread, ROS-free: it opens a FrameSource (retrying), reads it, hands each frame set to
the node, reopens a source that is lost, and counts it all. The rules it follows: docs/orbbec_camera.md, "Lifecycle,
missing cameras and hot-plug".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Optional

from brace_common.counters import Counters, Health

from .camera_config import CameraConfig
from .frame_convert import FrameError
from .orbbec_device import Frames, FrameSource

READ_TIMEOUT_S = 0.1  # the reading thread looks at its stop flag at least this often
JOIN_TIMEOUT_S = 10.0
COUNTERS = ("frames_published", "depth_frames_published", "open_attempts", "open_failures", "connects",
            "disconnects", "bad_frames", "publish_errors")
"""Every event the reader counts (the camera's diagnostics keys)."""
ERRORS = ("open_failures", "disconnects", "bad_frames", "publish_errors")
"""The counters whose sum diagnostics report as `errors`."""

Publish = Callable[[Frames], Iterable[str]]
"""The node's publishing of one frame set: yields the counter of each stream as it is published (frames_published,
depth_frames_published); an exception is a failed publish."""


class CameraReader:
    """One camera's reading thread and what it saw: `connected`, `finished`, `source_error` (why nothing streams
    now), `last_disconnect` and `counts`, which live as long as the reader (across reconfigures).

    `logger` is rclpy's or any logger taking `throttle_duration_sec`.
    """

    def __init__(self, logger) -> None:
        self.log = logger
        self.counts = Counters(COUNTERS, warn=("bad_frames", "publish_errors"))
        self.connected = False
        self.finished = False
        self.source_error = ""
        self.last_disconnect = ""
        self.frame_rate_hz = 0.0
        self._rate_mark = (time.monotonic(), 0)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @property
    def running(self) -> bool:
        """Whether the reading thread runs (started, not stopped, not ended)."""
        return self._thread is not None and self._thread.is_alive()

    def start(self, source: FrameSource, cfg: CameraConfig, name: str, publish: Publish,
              alive: Callable[[], bool]) -> None:
        """Start the thread `name`: it opens `source` (every `reconnect_period_s` until it opens), reads it and
        publishes each frame set; a publish that fails while `alive()` is false ends the thread (shutdown)."""
        self._stop.clear()
        self.finished, self.connected, self.source_error = False, False, ""
        self._thread = threading.Thread(target=self._read_loop, name=name, daemon=True,
                                        args=(source, cfg, publish, alive))
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (it closes the source) and wait for it, at most JOIN_TIMEOUT_S; nothing is published once
        it returns unless the source hung (logged)."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        thread.join(JOIN_TIMEOUT_S)
        if thread.is_alive():
            self.log.error(f"the reading thread did not stop within {JOIN_TIMEOUT_S:g} s (source hung?)")

    def trouble(self) -> str:
        """Why the source delivers nothing now, with the attempts so far ('' while streaming or finished)."""
        if self.connected or self.finished or not self.source_error:
            return ""
        return f"{self.source_error} (open attempts: {self.counts['open_attempts']})"

    def health(self) -> Health:
        """Connected, finished, the frame rate since the previous call, the counts and their errors."""
        now, frames = time.monotonic(), self.counts["frames_published"]
        since, frames_then = self._rate_mark
        if now > since:
            self.frame_rate_hz = (frames - frames_then) / (now - since)
        self._rate_mark = (now, frames)
        return Health({"connected": self.connected, "finished": self.finished,
                       "frame_rate_hz": round(self.frame_rate_hz, 2)}) + self.counts.health() + \
            Health({"errors": self.counts.total(ERRORS), "source_error": self.source_error,
                    "last_disconnect": self.last_disconnect})

    # ------------------------------------------------------------------ the thread

    def _read_loop(self, source: FrameSource, cfg: CameraConfig, publish: Publish, alive: Callable[[], bool]) -> None:
        last_frame = time.monotonic()
        try:
            while not self._stop.is_set():
                if not self.connected:
                    if not self._open(source, cfg):
                        self._stop.wait(cfg.reconnect_period_s)
                        continue
                    last_frame = time.monotonic()
                try:
                    frames = source.read(READ_TIMEOUT_S)
                except FrameError as exc:
                    self.counts.add("bad_frames")
                    last_frame = time.monotonic()  # the camera is there, this frame was bad
                    self.log.warning(f"bad frame skipped: {exc}", throttle_duration_sec=5.0)
                    continue
                except Exception as exc:  # noqa: BLE001 - SourceError or an SDK surprise: reconnect, never exit
                    self._lose(source, cfg, f"{type(exc).__name__}: {exc}")
                    continue
                if frames is None:
                    if source.finished:
                        self.finished = True
                        self.log.info(f"{source.description}: last frame published (loop is off)")
                        break
                    if time.monotonic() - last_frame > cfg.frame_timeout_s:
                        self._lose(source, cfg, f"no frame for {cfg.frame_timeout_s:g} s")
                    continue
                last_frame = time.monotonic()
                if not self._publish(publish, frames, alive):
                    break
        finally:
            self.connected = False
            self._close(source)

    def _open(self, source: FrameSource, cfg: CameraConfig) -> bool:
        self.counts.add("open_attempts")
        try:
            source.open()
        except Exception as exc:  # noqa: BLE001 - NoDeviceError, ProfileError, SDK errors: all mean "retry later"
            self.counts.add("open_failures")
            reason = f"{exc}" if str(exc) else type(exc).__name__
            if reason != self.source_error:
                self.log.error(f"cannot open the {cfg.source} source: {reason}; retrying every "
                               f"{cfg.reconnect_period_s:g} s")
            self.source_error = reason
            self._close(source)
            return False
        self.connected, self.source_error = True, ""
        self.counts.add("connects")
        self.log.info(f"streaming from {source.description or cfg.source}")
        return True

    def _lose(self, source: FrameSource, cfg: CameraConfig, reason: str) -> None:
        self.counts.add("disconnects")
        self.connected = False
        self.source_error = self.last_disconnect = f"lost {source.description or cfg.source}: {reason}"
        self.log.error(f"{self.source_error}; reconnecting every {cfg.reconnect_period_s:g} s")
        self._close(source)
        self._stop.wait(cfg.reconnect_period_s)

    def _close(self, source: FrameSource) -> None:
        try:
            source.close()
        except Exception as exc:  # noqa: BLE001 - closing a broken source must not end the thread
            self.log.warning(f"closing the source failed: {exc}", throttle_duration_sec=5.0)

    def _publish(self, publish: Publish, frames: Frames, alive: Callable[[], bool]) -> bool:
        """Publish one frame set and count it; False when publishing failed because the process shuts down."""
        try:
            for counter in publish(frames):
                self.counts.add(counter)
        except Exception as exc:  # noqa: BLE001 - counted and logged; the camera keeps streaming
            if not alive():
                return False
            self.counts.add("publish_errors")
            self.log.error(f"publishing failed: {type(exc).__name__}: {exc}", throttle_duration_sec=5.0)
        return True
