"""Validated parameters of the orbbec_camera node (one field = one ROS parameter), ROS-free.

Topics and frame ids hang off `camera_name` (OrbbecSDK_ROS2's layout):
<camera_name>/color/image_raw, <camera_name>_color_optical_frame, ... An empty
camera_name means the node's name, so `ros2 run robot_bridge orbbec_camera
--ros-args -r __node:=front_camera` is a camera named front_camera.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from brace_common.config import ConfigError, autostart_param, check_fields, diagnostics_period_param, param, resolve_path

from .frame_convert import COLOR_FORMATS, normalize_format
from .orbbec_device import ANY, SDK_LOG_LEVELS, FrameSource, OrbbecSource, StreamRequest
from .video_source import VideoConfig, VideoSource

SOURCES = ("device", "video")
NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(/[A-Za-z_][A-Za-z0-9_]*)*")
"""A relative ROS name (tokens of letters, digits and '_' joined by '/'): camera names and frame ids."""
SERIAL_PATTERN = re.compile(r"[A-Za-z0-9_.-]{0,64}")


@dataclass
class CameraConfig:
    """Parameters of the orbbec_camera node."""

    camera_name: str = param("", "prefix of the topics (<camera_name>/color/image_raw ...) and frame ids; "
                             "'' = the node's name")
    serial_number: str = param("", "the camera's serial number ('' = the first camera found; "
                               "`python -m robot_bridge.orbbec.orbbec_device` lists them)")
    source: str = param("device", "'device' (an Orbbec camera through pyorbbecsdk) or 'video' (video_path played "
                        "as a camera)")
    video_path: str = param("", "source video: a video file or a folder of PNG/JPG images ('package://<pkg>/<path>' "
                            "allowed)")
    depth_path: str = param("", "source video: a folder of 16-bit PNG depth images in mm, paired with the frames by "
                            "order ('' = no depth)")
    loop: bool = param(True, "source video: start again after the last frame (false: stop publishing)")
    color_width: int = param(640, "colour stream width (px; 0 = any the camera offers)", 0, 16384)
    color_height: int = param(480, "colour stream height (px; 0 = any)", 0, 16384)
    color_fps: int = param(30, "colour stream rate (Hz; 0 = any); source video: the playback rate", 0, 1000)
    color_format: str = param(ANY, "colour stream format: RGB, BGR, MJPG, YUYV or ANY (the cheapest to convert)")
    enable_depth: bool = param(True, "stream and publish depth (source video: only with depth_path)")
    depth_width: int = param(640, "depth stream width (px; 0 = any)", 0, 16384)
    depth_height: int = param(480, "depth stream height (px; 0 = any)", 0, 16384)
    depth_fps: int = param(30, "depth stream rate (Hz; 0 = any)", 0, 1000)
    align_depth: bool = param(True, "align depth to colour in the SDK (AlignFilter): depth images then have the "
                              "colour image's size, pixels and camera_info, in the colour optical frame")
    color_frame_id: str = param("", "frame id of colour images ('' = <camera_name>_color_optical_frame)")
    depth_frame_id: str = param("", "frame id of depth images ('' = <camera_name>_depth_optical_frame, or the "
                                "colour one when align_depth aligns a camera's depth to colour)")
    fx: float = param(0.0, "source video: focal length x (px; 0 = a pinhole of hfov_deg)", 0.0, 1e6)
    fy: float = param(0.0, "source video: focal length y (px; 0 = fx)", 0.0, 1e6)
    cx: float = param(0.0, "source video: principal point x (px; 0 = the image centre)", 0.0, 1e6)
    cy: float = param(0.0, "source video: principal point y (px; 0 = the image centre)", 0.0, 1e6)
    hfov_deg: float = param(60.0, "source video without fx: horizontal field of view of the pinhole (deg)", 1.0, 179.0)
    reconnect_period_s: float = param(1.0, "wait between attempts to open a missing or lost camera (s)", 0.01, 3600.0)
    frame_timeout_s: float = param(3.0, "no frame for this long = the camera is lost: close and reopen it (s)",
                                   0.05, 3600.0)
    sdk_log_level: str = param("error", "pyorbbecsdk console log level: none, fatal, error, warning, info, debug "
                               "(its file log is off)")
    diagnostics_period_s: float = diagnostics_period_param()
    autostart: bool = autostart_param()

    def validate(self) -> None:
        """Raise ConfigError naming the first invalid parameter."""
        check_fields(self)
        if self.camera_name and not NAME_PATTERN.fullmatch(self.camera_name):
            raise ConfigError("camera_name", f"'{self.camera_name}' is not a relative ROS name "
                              "(letters, digits, '_', tokens joined by '/')")
        for name in ("color_frame_id", "depth_frame_id"):
            value = getattr(self, name)
            if value and not NAME_PATTERN.fullmatch(value):
                raise ConfigError(name, f"'{value}' is not a valid frame id (letters, digits, '_', '/')")
        if not SERIAL_PATTERN.fullmatch(self.serial_number):
            raise ConfigError("serial_number", f"'{self.serial_number}' is not a serial number "
                              "(at most 64 letters, digits, '_', '.', '-')")
        if self.source not in SOURCES:
            raise ConfigError("source", f"'{self.source}' is not one of {', '.join(SOURCES)}")
        if normalize_format(self.color_format) not in (*COLOR_FORMATS, ANY):
            raise ConfigError("color_format", f"'{self.color_format}' is not one of {', '.join(COLOR_FORMATS)}, {ANY}")
        if self.sdk_log_level not in SDK_LOG_LEVELS:
            raise ConfigError("sdk_log_level", f"'{self.sdk_log_level}' is not one of {', '.join(SDK_LOG_LEVELS)}")
        if self.source == "video":
            self._validate_video()

    def _validate_video(self) -> None:
        if not self.video_path:
            raise ConfigError("video_path", "source 'video' needs a video file or an image folder")
        if not Path(resolve_path(self.video_path)).exists():
            raise ConfigError("video_path", f"{self.video_path} does not exist")
        if self.depth_path and not Path(resolve_path(self.depth_path)).is_dir():
            raise ConfigError("depth_path", f"{self.depth_path} is not a folder")
        if self.color_fps <= 0:
            raise ConfigError("color_fps", "source 'video' plays at color_fps: it must be at least 1")
        if self.frame_timeout_s <= 1.0 / self.color_fps:
            raise ConfigError("frame_timeout_s", f"{self.frame_timeout_s} s is not longer than one frame at "
                              f"{self.color_fps} fps")

    def resolved(self, node_name: str) -> CameraConfig:
        """This config with camera_name ('' = `node_name`) and the frame ids filled in, validated."""
        name = self.camera_name or node_name
        cfg = replace(self, camera_name=name, color_frame_id=self.color_frame_id or f"{name}_color_optical_frame",
                      depth_frame_id=self.depth_frame_id or f"{name}_{self._depth_optical()}_optical_frame")
        cfg.validate()
        return cfg

    def _depth_optical(self) -> str:
        """Whose optical frame depth is in: the colour camera's when a camera aligns it, else the depth camera's."""
        return "color" if self.align_depth and self.source == "device" else "depth"

    @property
    def publishes_depth(self) -> bool:
        """Whether depth topics exist: a camera with enable_depth, or a video with enable_depth and depth_path."""
        return self.enable_depth and (self.source == "device" or bool(self.depth_path))

    def intrinsics_override(self) -> tuple[float, float, float, float]:
        """(fx, fy, cx, cy) for a video source (zeros: defaults)."""
        return (self.fx, self.fy, self.cx, self.cy)

    def frame_source(self) -> FrameSource:
        """The FrameSource these parameters ask for (not opened): an OrbbecSource, or a VideoSource for 'video'."""
        if self.source == "video":
            depth = resolve_path(self.depth_path) if self.publishes_depth else ""
            return VideoSource(VideoConfig(resolve_path(self.video_path), float(self.color_fps), self.loop, depth,
                                           self.intrinsics_override(), self.hfov_deg))
        color = StreamRequest(self.color_width, self.color_height, self.color_fps, self.color_format.upper())
        depth_request = StreamRequest(self.depth_width, self.depth_height, self.depth_fps) if self.enable_depth \
            else None
        return OrbbecSource(self.serial_number, color, depth_request, self.sdk_log_level, self.align_depth)


def topic(camera_name: str, name: str) -> str:
    """A camera topic: `name` (brace_common.names.COLOR_IMAGE ...) under `camera_name`, relative."""
    return f"{camera_name}/{name}"
