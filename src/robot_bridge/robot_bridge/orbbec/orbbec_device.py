"""Orbbec RGB-D cameras over pyorbbecsdk (module of the pyorbbecsdk2 wheel), ROS-free, behind the FrameSource seam.

`FrameSource` (open / read / close) is what the camera node reads; `OrbbecSource` is a real camera (profile choice,
hot-plug, depth aligned to colour). The seam's contract and the camera's behaviour: docs/orbbec_camera.md, "The
FrameSource seam". `python -m robot_bridge.orbbec.orbbec_device` lists the connected cameras.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Optional, Protocol, runtime_checkable

import numpy as np

from .frame_convert import (
    COLOR_FORMATS,
    DEPTH_FORMATS,
    FrameError,
    Intrinsics,
    color_to_rgb8,
    depth_to_mm,
    normalize_format,
)

ANY = "ANY"
"""A requested format that accepts any supported one (colour: in COLOR_PREFERENCE order)."""
COLOR_PREFERENCE = ("RGB", "BGR", "YUYV", "MJPG")
"""Among matching colour profiles, the cheapest to convert first (RGB as is ... MJPG needs a JPEG decode)."""
SDK_LOG_LEVELS = ("none", "fatal", "error", "warning", "info", "debug")
MAX_LISTED_PROFILES = 40


class SourceError(RuntimeError):
    """The frame source cannot deliver (not found, unplugged, unsupported profile, unreadable file); retry later."""


class NoDeviceError(SourceError):
    """No Orbbec camera is connected, or none with the requested serial number."""


class DeviceLostError(SourceError):
    """The camera went away while streaming (unplugged, USB reset, SDK error while waiting for frames)."""


class ProfileError(SourceError):
    """The camera offers no stream profile matching the requested width / height / fps / format."""


@dataclass(frozen=True)
class Frames:
    """One frame set: rgb8 colour (H, W, 3) and uint16 millimetre depth (H, W), each with its intrinsics, or None."""

    color: Optional[np.ndarray] = None
    depth: Optional[np.ndarray] = None
    color_intrinsics: Optional[Intrinsics] = None
    depth_intrinsics: Optional[Intrinsics] = None


@runtime_checkable
class FrameSource(Protocol):
    """What the camera node reads frames from."""

    description: str
    """What is streaming, for diagnostics (device name and serial, file path); '' before open."""
    finished: bool
    """True once a finite source (a video without loop) has delivered its last frame."""

    def open(self) -> None:
        """Start delivering frames; SourceError when the source cannot start."""

    def read(self, timeout_s: float) -> Optional[Frames]:
        """The next frames, or None when none came within `timeout_s`; FrameError, SourceError."""

    def close(self) -> None:
        """Stop streaming and release the device (safe more than once and after a failed open); open() may follow."""


@dataclass(frozen=True)
class StreamRequest:
    """A wanted stream profile: 0 = any width / height / fps, 'ANY' = any supported format."""

    width: int = 0
    height: int = 0
    fps: int = 0
    format: str = ANY

    def describe(self) -> str:
        """'640x480@30 MJPG' with 'any' where unconstrained."""
        size = f"{self.width or 'any'}x{self.height or 'any'}"
        return f"{size}@{self.fps or 'any'} {self.format if self.format != ANY else 'any format'}"


@dataclass(frozen=True)
class ProfileSpec:
    """One stream profile a camera offers."""

    width: int
    height: int
    fps: int
    format: str

    def describe(self) -> str:
        """'640x480@30 MJPG'."""
        return f"{self.width}x{self.height}@{self.fps} {self.format}"


def choose_profile(available: Sequence[ProfileSpec], want: StreamRequest, stream: str,
                   supported: Sequence[str], preference: Sequence[str] = ()) -> int:
    """The index in `available` of the profile to stream; ProfileError listing what is offered when none matches.

    A profile matches when its width, height and fps equal the request's (0 = any) and its format is the requested
    one ('ANY' = any of `supported`). Among matches the format earliest in `preference` wins, then the camera's order.
    """
    wanted = normalize_format(want.format)
    formats = list(supported) if wanted == ANY else [f for f in supported if f == wanted]
    matches = [i for i, p in enumerate(available)
               if (not want.width or p.width == want.width) and (not want.height or p.height == want.height)
               and (not want.fps or p.fps == want.fps) and normalize_format(p.format) in formats]
    if matches:
        order = {fmt: rank for rank, fmt in enumerate(preference)}
        return min(matches, key=lambda i: (order.get(normalize_format(available[i].format), len(order)), i))
    offered = [p.describe() for p in available if normalize_format(p.format) in supported]
    others = sorted({normalize_format(p.format) for p in available} - set(supported))
    listed = ", ".join(dict.fromkeys(offered[:MAX_LISTED_PROFILES])) or "none"
    more = f" (+{len(offered) - MAX_LISTED_PROFILES} more)" if len(offered) > MAX_LISTED_PROFILES else ""
    unsupported = f"; formats offered but not converted here: {', '.join(others)}" if others else ""
    raise ProfileError(f"{stream} profile {want.describe()} is not offered by the camera; it offers: "
                       f"{listed}{more}{unsupported}")


def intrinsics_from_sdk(intrinsic: Any, distortion: Any = None) -> Intrinsics:
    """Intrinsics from pyorbbecsdk's OBCameraIntrinsic and OBCameraDistortion (any objects with those fields)."""
    coeffs = {name: float(getattr(distortion, name, 0.0) or 0.0)
              for name in ("k1", "k2", "k3", "k4", "k5", "k6", "p1", "p2")} if distortion is not None else {}
    model = "auto"
    model_name = getattr(getattr(distortion, "model", None), "name", "")
    if model_name == "BROWN_CONRADY_K6":
        model = "rational_polynomial"
    elif model_name == "KANNALA_BRANDT4":
        model = "equidistant"
    return Intrinsics(int(intrinsic.width), int(intrinsic.height), float(intrinsic.fx), float(intrinsic.fy),
                      float(intrinsic.cx), float(intrinsic.cy), model=model, **coeffs)


def _fit(intr: Intrinsics, width: int, height: int) -> Optional[Intrinsics]:
    """`intr` for a `width` x `height` stream (scaled from its calibration size), None when uncalibrated (fx 0)."""
    if intr.fx <= 0 or intr.fy <= 0:
        return None
    if intr.width <= 0 or intr.height <= 0:
        return replace(intr, width=width, height=height)
    return intr if (intr.width, intr.height) == (width, height) else intr.scaled_to(width, height)


_sdk_lock = threading.Lock()


def load_sdk(log_level: str = "error"):
    """The pyorbbecsdk module with its logging set: no ./Log files, console messages from `log_level` up."""
    try:
        # optional SDK: pyorbbecsdk exists only where Orbbec cameras are attached
        import pyorbbecsdk as sdk
    except ImportError as exc:  # the wheel is pinned in requirements; its native library may still fail to load
        raise NoDeviceError(f"pyorbbecsdk cannot be imported: {exc}") from None
    if log_level not in SDK_LOG_LEVELS:
        raise ValueError(f"SDK log level '{log_level}' is not one of {', '.join(SDK_LOG_LEVELS)}")
    level = getattr(sdk.OBLogLevel, log_level.upper())
    with _sdk_lock:
        sdk.Context.set_logger_to_file(sdk.OBLogLevel.NONE, "")  # else the SDK writes ./Log/OrbbecSDK.log.txt
        sdk.Context.set_logger_to_console(level)
    return sdk


def _sdk_errors(sdk) -> tuple[type[BaseException], ...]:
    # The SDK raises OBError for most failures and RuntimeError for some (Pipeline() without a device).
    return (sdk.OBError, RuntimeError)


def _profiles(sdk, pipeline, sensor) -> tuple[list[Any], list[ProfileSpec]]:
    profile_list = pipeline.get_stream_profile_list(sensor)
    profiles, specs = [], []
    for i in range(profile_list.get_count()):
        profile = profile_list.get_stream_profile_by_index(i)
        if not profile.is_video_stream_profile():
            continue
        video = profile.as_video_stream_profile()
        profiles.append(video)
        specs.append(ProfileSpec(video.get_width(), video.get_height(), video.get_fps(), video.get_format().name))
    return profiles, specs


def connected_devices(sdk_or_context) -> list[tuple[str, str]]:
    """(name, serial number) of every connected camera, from a pyorbbecsdk Context or DeviceList."""
    devices = sdk_or_context.query_devices() if hasattr(sdk_or_context, "query_devices") else sdk_or_context
    return [(devices.get_device_name_by_index(i), devices.get_device_serial_number_by_index(i))
            for i in range(devices.get_count())]


class UnplugWatch:
    """The device-changed callback given to the SDK: notes when the watched serial number is removed."""

    def __init__(self) -> None:
        self.lost = threading.Event()
        self.serial = ""
        self.reason = ""

    def watch(self, serial: str, description: str) -> None:
        """Watch `serial` from now on ('' = nothing), with nothing lost yet."""
        self.lost.clear()
        self.serial, self.reason = serial, f"{description} was unplugged"

    def __call__(self, removed, added) -> None:
        """SDK callback (an SDK thread): set `lost` when the watched camera is among the removed ones."""
        try:
            gone = [serial for _, serial in connected_devices(removed)]
        except Exception:  # noqa: BLE001 - a callback must not raise into the SDK
            return
        if self.serial and self.serial in gone:
            self.lost.set()


class OrbbecSource:
    """A FrameSource streaming colour (and depth) from one Orbbec camera through pyorbbecsdk."""

    def __init__(self, serial_number: str = "", color: StreamRequest = StreamRequest(),
                 depth: Optional[StreamRequest] = StreamRequest(format="Y16"), sdk_log_level: str = "error",
                 align_depth: bool = True) -> None:
        self.serial_number = serial_number
        self.align_depth = align_depth
        self.color_request = color
        self.depth_request = depth
        self.sdk_log_level = sdk_log_level
        self.description = ""
        self.finished = False  # a camera never finishes
        self.opened_serial = ""
        self._sdk = None
        self._context = None
        self._callback_id: Optional[int] = None
        self._pipeline = None
        self._align = None   # the SDK's AlignFilter (depth to colour) while open with align_depth
        self._unplugged = UnplugWatch()  # the SDK's hot-plug callback: holds no reference to this source
        self.color_intrinsics: Optional[Intrinsics] = None
        self.depth_intrinsics: Optional[Intrinsics] = None
        self.color_profile: Optional[ProfileSpec] = None
        self.depth_profile: Optional[ProfileSpec] = None

    # ------------------------------------------------------------------ open / close

    def open(self) -> None:
        """Find the camera, choose profiles, start streaming; NoDeviceError / ProfileError / SourceError."""
        self.close()
        sdk = self._sdk = load_sdk(self.sdk_log_level)
        errors = _sdk_errors(sdk)
        try:
            if self._context is None:  # kept across reconnects: it watches USB, later enumerations are instant
                self._context = sdk.Context()
                self._callback_id = self._context.register_device_changed_callback(self._unplugged)
            device = self._find_device(sdk)
            info = device.get_device_info()
            self.opened_serial = info.get_serial_number()
            self.description = f"{info.get_name()} serial {self.opened_serial}"
            pipeline = sdk.Pipeline(device)
            config = sdk.Config()
            color_profile = self._enable(sdk, pipeline, config, sdk.OBSensorType.COLOR_SENSOR, "colour",
                                         self.color_request, COLOR_FORMATS, COLOR_PREFERENCE)
            self.color_profile = self._spec(color_profile)
            self.color_intrinsics = self._intrinsics(pipeline, color_profile, "rgb")
            if self.depth_request is not None:
                depth_profile = self._enable(sdk, pipeline, config, sdk.OBSensorType.DEPTH_SENSOR, "depth",
                                             self.depth_request, DEPTH_FORMATS, DEPTH_FORMATS)
                self.depth_profile = self._spec(depth_profile)
                self.depth_intrinsics = self._intrinsics(pipeline, depth_profile, "depth")
                if self.align_depth:   # aligned depth is a colour-camera image: colour's size and intrinsics
                    self._align = sdk.AlignFilter(align_to_stream=sdk.OBStreamType.COLOR_STREAM)
                    self.depth_intrinsics = self.color_intrinsics
            self._unplugged.watch(self.opened_serial, self.description)
            pipeline.start(config)
            self._pipeline = pipeline
        except SourceError:
            self.close()
            raise
        except errors as exc:
            self.release()
            if "no device" in str(exc).lower():
                raise NoDeviceError(f"no Orbbec camera found ({exc})") from None
            raise SourceError(f"cannot start {self.description or 'the camera'}: {exc}") from None

    def _find_device(self, sdk):
        devices = self._context.query_devices()
        found = connected_devices(devices)
        if not found:
            wanted = f" (looking for serial number {self.serial_number})" if self.serial_number else ""
            raise NoDeviceError(f"no Orbbec camera connected{wanted}")
        if not self.serial_number:
            return devices.get_device_by_index(0)
        try:
            return devices.get_device_by_serial_number(self.serial_number)
        except _sdk_errors(sdk) as exc:
            listed = ", ".join(f"{name} serial {serial}" for name, serial in found)
            raise NoDeviceError(f"no Orbbec camera with serial number {self.serial_number}; connected: {listed} "
                                f"({exc})") from None

    @staticmethod
    def _enable(sdk, pipeline, config, sensor, stream: str, want: StreamRequest, supported, preference):
        try:
            profiles, specs = _profiles(sdk, pipeline, sensor)
        except _sdk_errors(sdk) as exc:
            raise ProfileError(f"the camera has no {stream} sensor ({exc})") from None
        profile = profiles[choose_profile(specs, want, stream, supported, preference)]
        config.enable_stream(profile)
        return profile

    @staticmethod
    def _spec(profile) -> ProfileSpec:
        return ProfileSpec(profile.get_width(), profile.get_height(), profile.get_fps(), profile.get_format().name)

    def _intrinsics(self, pipeline, profile, which: str) -> Optional[Intrinsics]:
        errors = _sdk_errors(self._sdk)
        size = (profile.get_width(), profile.get_height())
        try:
            intr = _fit(intrinsics_from_sdk(profile.get_intrinsic(), profile.get_distortion()), *size)
            if intr is not None:
                return intr
        except errors:
            pass
        try:  # older firmware: the pipeline's calibration
            param = pipeline.get_camera_param()
            return _fit(intrinsics_from_sdk(getattr(param, f"{which}_intrinsic"), getattr(param, f"{which}_distortion")),
                        *size)
        except errors:
            return None  # published without camera_info

    def close(self) -> None:
        """Stop the pipeline and release the device; the SDK context stays to see the camera come back."""
        self._unplugged.watch("", "")
        self._align = None
        pipeline, self._pipeline = self._pipeline, None
        if pipeline is not None:
            try:
                pipeline.stop()
            except Exception:  # noqa: BLE001 - stopping a pipeline whose device is gone may fail; nothing to keep
                pass

    def release(self) -> None:
        """close(), then drop the SDK context and its hot-plug callback (the source can be opened again)."""
        self.close()
        context, self._context = self._context, None
        if context is not None and self._callback_id is not None:
            try:
                context.unregister_device_changed_callback(self._callback_id)
            except Exception:  # noqa: BLE001 - the context goes away with the callback anyway
                pass
        self._callback_id = None

    # ------------------------------------------------------------------ frames

    def read(self, timeout_s: float) -> Optional[Frames]:
        """Wait up to `timeout_s` for a frame set and convert it; DeviceLostError when the camera went away."""
        if self._pipeline is None:
            raise SourceError("the camera is not open")
        if self._unplugged.lost.is_set():
            raise DeviceLostError(self._unplugged.reason)
        try:
            frame_set = self._pipeline.wait_for_frames(max(1, int(timeout_s * 1000)))
        except _sdk_errors(self._sdk) as exc:
            raise DeviceLostError(f"{self.description}: waiting for frames failed: {exc}") from None
        if frame_set is None:
            return None
        if self._align is not None:
            frame_set = self._aligned(frame_set)
            if frame_set is None:
                return None
        color = self._color(frame_set.get_color_frame())
        depth = self._depth(frame_set.get_depth_frame()) if self.depth_request is not None else None
        if color is None and depth is None:
            return None
        return Frames(color, depth, self.color_intrinsics if color is not None else None,
                      self.depth_intrinsics if depth is not None else None)

    def _aligned(self, frame_set):
        """The frame set with depth aligned to colour (None while the filter lacks one of the two frames)."""
        try:
            aligned = self._align.process(frame_set)
        except _sdk_errors(self._sdk) as exc:
            raise FrameError(f"aligning depth to colour failed: {exc}") from None
        return aligned.as_frame_set() if aligned is not None else None

    @staticmethod
    def _color(frame) -> Optional[np.ndarray]:
        if frame is None:
            return None
        return color_to_rgb8(frame.get_data(), frame.get_width(), frame.get_height(), frame.get_format().name)

    @staticmethod
    def _depth(frame) -> Optional[np.ndarray]:
        if frame is None:
            return None
        return depth_to_mm(frame.get_data(), frame.get_width(), frame.get_height(), float(frame.get_depth_scale()))


def main() -> int:
    """List the connected Orbbec cameras: name, serial number, colour and depth profiles."""
    sdk = load_sdk("error")
    context = sdk.Context()
    devices = context.query_devices()
    found = connected_devices(devices)
    if not found:
        print("no Orbbec camera connected")
        return 1
    for index, (name, serial) in enumerate(found):
        print(f"{name}  serial_number: {serial}")
        try:
            pipeline = sdk.Pipeline(devices.get_device_by_index(index))
            for label, sensor in (("colour", sdk.OBSensorType.COLOR_SENSOR), ("depth", sdk.OBSensorType.DEPTH_SENSOR)):
                try:
                    _, specs = _profiles(sdk, pipeline, sensor)
                except _sdk_errors(sdk) as exc:
                    print(f"  {label}: unavailable ({exc})")
                    continue
                print(f"  {label}: " + ", ".join(dict.fromkeys(s.describe() for s in specs)))
        except _sdk_errors(sdk) as exc:
            print(f"  cannot open: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
