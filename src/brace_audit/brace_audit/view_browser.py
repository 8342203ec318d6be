"""Rerun's web viewer in a real browser: headless Chromium driven by Playwright, the way a person's browser opens it.

`ViewerPage` opens a viewer URL, reads the viewer's state (which recording, each timeline's range, the time cursor,
what is still loading), waits until a recording is loaded, puts the time cursor on a step and takes a screenshot.
The viewer answers its control API (rerun's `viewer_control.proto`, v1alpha1) in protobuf bytes through the page's
`window._handle`; the few messages needed here are encoded and decoded by hand (`wire_fields`), with the field
numbers of that file as the rerun-sdk 0.41 wheel ships it.

The browser is Debian's chromium (`BROWSER_ENV` names another): Playwright's own browser download is never used.
It renders WebGL on SwiftShader (software), so a frame takes a while on a busy CPU; every wait here is on a state
the viewer reports, with a deadline.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BROWSER_ENV = "BRACE_BROWSER"
"""A Chromium (or Chrome) executable to use instead of the one on PATH."""
BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome")
INSTALL_HINT = "apt-get install chromium (Debian / Ubuntu, as root), or set BRACE_BROWSER to a Chromium executable"
CHROMIUM_ARGS = ("--use-gl=angle", "--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--no-sandbox",
                 "--disable-background-networking", "--disable-component-update", "--no-first-run",
                 "--disable-sync")
"""WebGL on SwiftShader (no GPU needed), no sandbox (CI runs as root), nothing fetched in the background."""
PAGE_SIZE = (1600, 900)
TOP_BAR_PX = 40
"""The viewer's top bar (menu, status text such as the data's latency), above every view."""

# viewer_control.proto (rerun.viewer_control.v1alpha1) and common.proto (rerun.common.v1alpha1) field numbers
REQUEST_SET_TIME_CURSOR = 6          # ViewerControlRequest.set_time_cursor
SET_TIME_TIMELINE, SET_TIME_TIME, SET_TIME_PLAY_STATE = 2, 3, 5   # SetTimeCursorRequest
STATE_RECORDINGS, STATE_ACTIVE, STATE_LOADING = 3, 2, 7           # GetStateResponse
RECORDING_ID, RECORDING_TIMELINES, RECORDING_CURSOR, RECORDING_PLAY = 1, 2, 3, 5   # ViewerRecording
TIMELINE_NAME = 1                    # common.Timeline.name; ViewerTimeline.timeline / TimeCursor.timeline = 1
VIEWER_TIMELINE_RANGE = 3            # ViewerTimeline.time_range (common.TimeRange: min = 1, max = 2)
CURSOR_TIME = 3                      # TimeCursor.time (common.TimelineTime: time = 1)
PLAY_PAUSED = 1                      # PlayState.PLAY_STATE_PAUSED


class BrowserMissing(RuntimeError):
    """No Chromium to drive, or Playwright is not installed; the message says how to install it."""


def find_browser() -> Path:
    """The Chromium to drive: `$BRACE_BROWSER`, else the first of BROWSER_NAMES on PATH; BrowserMissing otherwise."""
    named = os.environ.get(BROWSER_ENV, "")
    if named:
        if not Path(named).is_file():
            raise BrowserMissing(f"{BROWSER_ENV}={named} is not a file")
        return Path(named)
    for name in BROWSER_NAMES:
        found = shutil.which(name)
        if found:
            return Path(found)
    raise BrowserMissing(f"no Chromium on PATH: {INSTALL_HINT}")


# ---------------------------------------------------------------------- protobuf wire format, the little needed

def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def wire_fields(data: bytes) -> list[tuple[int, Any]]:
    """A protobuf message's fields in order: (number, int for varints, bytes for length-delimited ones); ValueError
    on a wire type this reader does not know (fixed-width fields are returned as bytes)."""
    out, i = [], 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            size, i = _varint(data, i)
            value, i = data[i:i + size], i + size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, i = data[i:i + size], i + size
        else:
            raise ValueError(f"protobuf wire type {wire} at byte {i}")
        out.append((number, value))
    return out


def _first(data: bytes, number: int, default: Any = None) -> Any:
    return next((v for n, v in wire_fields(data) if n == number), default)


def _encode_varint(value: int) -> bytes:
    value &= (1 << 64) - 1          # int64 as protobuf writes it
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, value: int | bytes) -> bytes:
    if isinstance(value, int):
        return _encode_varint(number << 3) + _encode_varint(value)
    return _encode_varint(number << 3 | 2) + _encode_varint(len(value)) + value


def set_time_request(timeline: str, value: int) -> bytes:
    """ViewerControlRequest{set_time_cursor: {timeline, time: value, play_state: paused}}."""
    inner = (_field(SET_TIME_TIMELINE, _field(TIMELINE_NAME, timeline.encode())) +
             _field(SET_TIME_TIME, _field(1, value)) + _field(SET_TIME_PLAY_STATE, PLAY_PAUSED))
    return _field(REQUEST_SET_TIME_CURSOR, inner)


@dataclass
class RecordingView:
    """What the viewer holds of one recording."""

    store_id: str
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)   # timeline -> (min, max) of its data
    cursor: tuple[str, int] = ("", 0)                                  # (timeline, value) of the time cursor
    play_state: int = 0


@dataclass
class ViewerState:
    """The viewer's state (GetStateResponse): its recordings, the active one, the sources still loading."""

    recordings: dict[str, RecordingView]
    active: str
    loading: int


def parse_state(data: bytes) -> ViewerState:
    """A GetStateResponse's bytes as a ViewerState."""
    recordings = {}
    for number, value in wire_fields(data):
        if number != STATE_RECORDINGS:
            continue
        rec = RecordingView(_first(value, RECORDING_ID, b"").decode())
        for n, v in wire_fields(value):
            if n == RECORDING_TIMELINES:
                name = _first(_first(v, 1, b""), TIMELINE_NAME, b"").decode()
                span = _first(v, VIEWER_TIMELINE_RANGE, b"")
                rec.ranges[name] = (_signed(_first(span, 1, 0)), _signed(_first(span, 2, 0)))
            elif n == RECORDING_CURSOR:
                name = _first(_first(v, 1, b""), TIMELINE_NAME, b"").decode()
                rec.cursor = (name, _signed(_first(_first(v, CURSOR_TIME, b""), 1, 0)))
            elif n == RECORDING_PLAY:
                rec.play_state = v
        recordings[rec.store_id] = rec
    active = _first(data, STATE_ACTIVE, b"").decode()
    loading = sum(1 for n, _ in wire_fields(data) if n == STATE_LOADING)
    return ViewerState(recordings, active, loading)


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


# ---------------------------------------------------------------------- the page

class ViewerPage:
    """A viewer URL open in headless Chromium (context manager). BrowserMissing when there is no browser to drive."""

    def __init__(self, url: str, size: tuple[int, int] = PAGE_SIZE, browser: Path | None = None) -> None:
        self.url, self.size = url, size
        self.browser_path = browser or find_browser()
        self.opened_s = 0.0            # seconds from goto until the viewer's handle existed
        self._pw = self._browser = self.page = None

    def __enter__(self) -> ViewerPage:
        try:
            from playwright.sync_api import sync_playwright  # only the browser test and screenshots drive a browser
        except ImportError:
            raise BrowserMissing("Playwright is not installed (make setup installs it)") from None
        self._pw = sync_playwright().start()
        try:
            self._browser = self._pw.chromium.launch(executable_path=str(self.browser_path), args=list(CHROMIUM_ARGS))
            self.page = self._browser.new_page(viewport={"width": self.size[0], "height": self.size[1]})
            start = time.monotonic()
            self.page.goto(self.url)
            self.page.wait_for_function("() => window._handle != null", timeout=120_000)
            self.opened_s = time.monotonic() - start
        except Exception:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self._browser is not None:
            self._browser.close()
        if self._pw is not None:
            self._pw.stop()
        self._browser = self._pw = self.page = None

    def state(self) -> ViewerState:
        """The viewer's state now."""
        data = self.page.evaluate("() => Array.from(window._handle.viewer_state())")
        return parse_state(bytes(data))

    def panic(self) -> str:
        """The viewer's panic message ('' while it runs)."""
        return self.page.evaluate("() => window._handle.has_panicked() ? window._handle.panic_message() : ''") or ""

    def wait_until(self, check, what: str, timeout_s: float) -> float:
        """Poll the state until `check(state)` holds; the seconds it took. TimeoutError naming `what` (and the last
        state) when it does not within `timeout_s`; RuntimeError when the viewer panicked."""
        start = time.monotonic()
        while True:
            state = self.state()
            if check(state):
                return time.monotonic() - start
            panic = self.panic()
            if panic:
                raise RuntimeError(f"the viewer panicked: {panic}")
            if time.monotonic() - start > timeout_s:
                raise TimeoutError(f"the viewer did not {what} within {timeout_s:.0f} s; its state: {state}")
            self.page.wait_for_timeout(250)

    def wait_loaded(self, store_id: str, timeline: str, last: int, timeout_s: float = 180.0) -> float:
        """Wait until recording `store_id` holds `timeline` up to `last` and nothing is loading; the seconds."""
        def loaded(state: ViewerState) -> bool:
            rec = state.recordings.get(store_id)
            return rec is not None and rec.ranges.get(timeline, (0, -1))[1] >= last and not state.loading
        return self.wait_until(loaded, f"load {store_id} up to {timeline} {last}", timeout_s)

    def set_time(self, store_id: str, timeline: str, value: int, timeout_s: float = 60.0) -> None:
        """Put the active recording's time cursor on `value` of `timeline`, paused, and wait until it is there."""
        request = list(set_time_request(timeline, value))
        self.page.evaluate("(r) => window._handle.viewer_control(new Uint8Array(r))", request)
        self.wait_until(lambda s: s.recordings.get(store_id, RecordingView("")).cursor == (timeline, value),
                        f"move the time cursor to {timeline} {value}", timeout_s)

    def screenshot(self, path: Path | None = None, timeout_s: float = 60.0) -> bytes:
        """The page as a PNG (also written to `path`) once it is drawn: two pictures of the views in a row, a
        quarter of a second apart, are the same (the top bar's status text may go on changing). TimeoutError when
        the views do not settle within `timeout_s`."""
        width, height = self.size
        views = {"x": 0, "y": TOP_BAR_PX, "width": width, "height": height - TOP_BAR_PX}
        start, last = time.monotonic(), b""
        while True:
            shot = self.page.screenshot(clip=views)
            if shot == last:
                return self.page.screenshot(path=str(path) if path else None)
            if time.monotonic() - start > timeout_s:
                raise TimeoutError(f"the viewer's views did not settle within {timeout_s:.0f} s")
            last = shot
            self.page.wait_for_timeout(250)
