"""orbbec_camera lifecycle node: an Orbbec RGB-D camera (pyorbbecsdk), or a recorded video, on OrbbecSDK_ROS2's topics.

One process per camera; launch names the node after the camera (front_camera,
wrist_camera) and an empty `camera_name` takes the node's name. Names are
relative, so a robot's namespace prefixes them; two cameras side by side differ
by camera_name.

Publishes   <camera_name>/color/image_raw (sensor_msgs/Image, rgb8)
            <camera_name>/color/camera_info (sensor_msgs/CameraInfo)
            <camera_name>/depth/image_raw (sensor_msgs/Image, 16UC1, millimetres)
            <camera_name>/depth/camera_info
            -- lifecycle publishers, sensor QoS (best effort, keep last 5); the depth pair exists only when depth
            is published (enable_depth, and for source video a depth_path); frame ids
            <camera_name>_color_optical_frame / <camera_name>_depth_optical_frame (the colour one for depth a camera
            aligns to colour, align_depth); stamps are ROS time at receipt.
            /diagnostics: state, source, device, connected, frames published, frame rate, open attempts, connects,
            disconnects, errors, bad frames; ERROR while the camera is missing or lost (with the reason).
Parameters  camera_name, serial_number, source (device | video), video_path, depth_path, loop, color_width,
            color_height, color_fps, color_format, enable_depth, depth_width, depth_height, depth_fps, align_depth,
            color_frame_id, depth_frame_id, fx, fy, cx, cy, hfov_deg, reconnect_period_s, frame_timeout_s,
            sdk_log_level, diagnostics_period_s, autostart (camera_config.CameraConfig; defaults in
            config/orbbec_camera.yaml).

Lifecycle: configure validates the parameters (an invalid one fails the
transition, naming it) and creates the publishers; activate starts a reading
thread, so the executor never waits for a camera: it opens the source, and
while it cannot (no camera, wrong serial number, unsupported profile) it
reports ERROR and tries again every reconnect_period_s, never exiting. A camera
that goes away while streaming (unplugged, SDK error, no frame for
frame_timeout_s) is closed and reopened the same way, so plugging it back in
resumes publishing. Deactivate stops the thread and closes the source (no
frame is published once it returns); cleanup drops the publishers; shutdown
and destroy_node stop everything too. A video without `loop` stops publishing
after its last frame (diagnostics say finished).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Optional

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn
from sensor_msgs.msg import CameraInfo, Image
from std_msgs.msg import Header

from brace_common import names, qos
from brace_common.clock import steady_timer
from brace_common.config import ConfigError, resolve_path
from brace_common.counters import Counters, Health
from brace_common.diagnostics import health_array
from brace_common.lifecycle import ReleasingLifecycleNode
from brace_common.params import declare_parameters, read_config, reject_undeclared
from brace_common.spin import spin_node

from .camera_config import CameraConfig, topic
from .frame_convert import FrameError
from .image_msgs import IMAGE_QOS, camera_info_msg, image_msg
from .orbbec_device import Frames, FrameSource, OrbbecSource, StreamRequest
from .video_source import VideoSource

READ_TIMEOUT_S = 0.1  # the reading thread looks at its stop flag at least this often
JOIN_TIMEOUT_S = 10.0

SourceFactory = Callable[[CameraConfig], FrameSource]


def default_source(cfg: CameraConfig) -> FrameSource:
    """The FrameSource `cfg` asks for: an OrbbecSource, or a VideoSource for source 'video'."""
    if cfg.source == "video":
        depth = resolve_path(cfg.depth_path) if cfg.publishes_depth else ""
        return VideoSource(resolve_path(cfg.video_path), float(cfg.color_fps), cfg.loop, depth,
                           cfg.intrinsics_override(), cfg.hfov_deg)
    color = StreamRequest(cfg.color_width, cfg.color_height, cfg.color_fps, cfg.color_format.upper())
    depth_request = StreamRequest(cfg.depth_width, cfg.depth_height, cfg.depth_fps) if cfg.enable_depth else None
    return OrbbecSource(cfg.serial_number, color, depth_request, cfg.sdk_log_level, cfg.align_depth)


class OrbbecCameraNode(ReleasingLifecycleNode):
    """Thin lifecycle shell: parameters in, a FrameSource read on its own thread, images out."""

    def __init__(self, node_name: str = "orbbec_camera", source_factory: Optional[SourceFactory] = None,
                 **kwargs) -> None:
        super().__init__(node_name, **kwargs)
        declare_parameters(self, CameraConfig, enforce_ranges=False)
        self.source_factory = source_factory or default_source
        self.config: Optional[CameraConfig] = None
        self.source: Optional[FrameSource] = None
        self.state_label = "unconfigured"
        self.last_error = ""      # why configure failed (brace_common.spin reports it)
        self.source_error = ""    # why the source delivers nothing now ('' while streaming)
        self.last_disconnect = ""  # why the source was last lost while streaming
        self.connected = False
        self.finished = False
        self.counts = Counters(("frames_published", "depth_frames_published", "open_attempts", "open_failures",
                                "connects", "disconnects", "bad_frames", "publish_errors"),
                               warn=("bad_frames", "publish_errors"))
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._pubs: dict[str, object] = {}
        self._rate_mark = (time.monotonic(), 0)
        self.frame_rate_hz = 0.0
        self.diag_pub = self.create_publisher(DiagnosticArray, names.DIAGNOSTICS, qos.DIAGNOSTICS)
        steady_timer(self, self.get_parameter("diagnostics_period_s").value, self.publish_diagnostics,
                     MutuallyExclusiveCallbackGroup())

    # ------------------------------------------------------------------ lifecycle

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Validate parameters, build the source (not opened yet) and the publishers."""
        try:
            cfg = read_config(self, CameraConfig).resolved(self.get_name())
            reject_undeclared(self)
        except ConfigError as exc:
            self.last_error = str(exc)
            self.get_logger().error(f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        self.config, self.last_error = cfg, ""
        self.source = self.source_factory(cfg)
        self._pubs = {"color": self.create_lifecycle_publisher(Image, topic(cfg.camera_name, names.COLOR_IMAGE),
                                                               IMAGE_QOS),
                      "color_info": self.create_lifecycle_publisher(
                          CameraInfo, topic(cfg.camera_name, names.COLOR_INFO), IMAGE_QOS)}
        if cfg.publishes_depth:
            self._pubs["depth"] = self.create_lifecycle_publisher(Image, topic(cfg.camera_name, names.DEPTH_IMAGE),
                                                                  IMAGE_QOS)
            self._pubs["depth_info"] = self.create_lifecycle_publisher(
                CameraInfo, topic(cfg.camera_name, names.DEPTH_INFO), IMAGE_QOS)
        self.state_label = "inactive"
        self.get_logger().info(f"configured camera '{cfg.camera_name}' from {cfg.source}"
                               + (f" {cfg.video_path}" if cfg.source == "video" else
                                  f" serial '{cfg.serial_number or 'first found'}'"))
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Activate the publishers and start the reading thread (it opens the source, retrying)."""
        result = super().on_activate(state)
        self._start_reader()
        self.state_label = "active"
        return result

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop the reading thread and close the source, then deactivate the publishers."""
        self._stop_reader()
        self.state_label = "inactive"
        return super().on_deactivate(state)

    def destroy_node(self) -> None:
        """Stop the reading thread (closing the camera) before the node's handles go away."""
        self._stop_reader()
        super().destroy_node()

    def _release(self) -> None:
        """Cleanup and shutdown: drop the source and the publishers."""
        self._stop_reader()
        for pub in self._pubs.values():
            self.destroy_lifecycle_publisher(pub)
        self._pubs, self.source, self.config = {}, None, None

    def _start_reader(self) -> None:
        self._stop.clear()
        self.finished, self.connected, self.source_error = False, False, ""
        self._thread = threading.Thread(target=self._read_loop, args=(self.source, self.config),
                                        name=f"{self.get_name()}_reader", daemon=True)
        self._thread.start()

    def _stop_reader(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        thread.join(JOIN_TIMEOUT_S)
        if thread.is_alive():
            self.get_logger().error(f"the reading thread did not stop within {JOIN_TIMEOUT_S:g} s (source hung?)")

    # ------------------------------------------------------------------ reading thread

    def _read_loop(self, source: FrameSource, cfg: CameraConfig) -> None:
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
                    self.get_logger().warning(f"bad frame skipped: {exc}", throttle_duration_sec=5.0)
                    continue
                except Exception as exc:  # noqa: BLE001 - SourceError or an SDK surprise: reconnect, never exit
                    self._lose(source, cfg, f"{type(exc).__name__}: {exc}")
                    continue
                if frames is None:
                    if source.finished:
                        self._finish(source)
                        break
                    if time.monotonic() - last_frame > cfg.frame_timeout_s:
                        self._lose(source, cfg, f"no frame for {cfg.frame_timeout_s:g} s")
                    continue
                last_frame = time.monotonic()
                if not self._publish(frames, cfg):
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
                self.get_logger().error(f"cannot open the {cfg.source} source: {reason}; retrying every "
                                        f"{cfg.reconnect_period_s:g} s")
            self.source_error = reason
            self._close(source)
            return False
        self.connected, self.source_error = True, ""
        self.counts.add("connects")
        self.get_logger().info(f"streaming from {source.description or cfg.source}")
        return True

    def _lose(self, source: FrameSource, cfg: CameraConfig, reason: str) -> None:
        self.counts.add("disconnects")
        self.connected = False
        self.source_error = self.last_disconnect = f"lost {source.description or cfg.source}: {reason}"
        self.get_logger().error(f"{self.source_error}; reconnecting every {cfg.reconnect_period_s:g} s")
        self._close(source)
        self._stop.wait(cfg.reconnect_period_s)

    def _finish(self, source: FrameSource) -> None:
        self.finished = True
        self.get_logger().info(f"{source.description}: last frame published (loop is off)")

    def _close(self, source: FrameSource) -> None:
        try:
            source.close()
        except Exception as exc:  # noqa: BLE001 - closing a broken source must not end the thread
            self.get_logger().warning(f"closing the source failed: {exc}", throttle_duration_sec=5.0)

    def _publish(self, frames: Frames, cfg: CameraConfig) -> bool:
        """Publish one frame set; False when the node is shutting down (the thread ends)."""
        stamp = self.get_clock().now().to_msg()
        try:
            if frames.color is not None:
                header = Header(stamp=stamp, frame_id=cfg.color_frame_id)
                self._pubs["color"].publish(image_msg(frames.color, "rgb8", header))
                if frames.color_intrinsics is not None:
                    self._pubs["color_info"].publish(camera_info_msg(frames.color_intrinsics, header))
                self.counts.add("frames_published")
            if frames.depth is not None and "depth" in self._pubs:
                header = Header(stamp=stamp, frame_id=cfg.depth_frame_id)
                self._pubs["depth"].publish(image_msg(frames.depth, "16UC1", header))
                if frames.depth_intrinsics is not None:
                    self._pubs["depth_info"].publish(camera_info_msg(frames.depth_intrinsics, header))
                self.counts.add("depth_frames_published")
        except Exception as exc:  # noqa: BLE001 - counted and logged; the camera keeps streaming
            if not self.context.ok():
                return False
            self.counts.add("publish_errors")
            self.get_logger().error(f"publishing failed: {type(exc).__name__}: {exc}", throttle_duration_sec=5.0)
        return True

    # ------------------------------------------------------------------ monitoring

    def publish_diagnostics(self) -> None:
        """State, source, frames and rate, attempts and errors on /diagnostics (ERROR while the camera is missing)."""
        now = time.monotonic()
        since, frames_then = self._rate_mark
        frames = self.counts["frames_published"]
        if now > since:
            self.frame_rate_hz = (frames - frames_then) / (now - since)
        self._rate_mark = (now, frames)
        cfg = self.config
        camera = cfg.camera_name if cfg else (self.get_parameter("camera_name").value or self.get_name())
        errors = self.counts.total(("open_failures", "disconnects", "bad_frames", "publish_errors"))
        values = {"state": self.state_label, "source": cfg.source if cfg else "", "camera_name": camera,
                  "device": self.source.description if self.source is not None else "",
                  "connected": self.connected, "finished": self.finished, "frame_rate_hz": round(self.frame_rate_hz, 2)}
        problems: list[str] = []
        if self.last_error and cfg is None:
            problems.append(f"configure failed: {self.last_error}")
        elif self.state_label == "active" and not self.connected and not self.finished and self.source_error:
            problems.append(f"{self.source_error} (open attempts: {self.counts['open_attempts']})")
        health = Health(values) + self.counts.health() + Health(
            {"errors": errors, "source_error": self.source_error, "last_disconnect": self.last_disconnect},
            errors=tuple(problems))
        message = "finished: the video's last frame was published" if self.finished and not problems else ""
        self.diag_pub.publish(health_array(f"{self.get_name()}: camera {camera}", health,
                                           self.get_clock().now().to_msg(), message))

def main(args=None) -> int:
    """`ros2 run robot_bridge orbbec_camera --ros-args -r __node:=<camera_name> ...` (autostart by default)."""
    return spin_node(OrbbecCameraNode, "orbbec_camera", args)


if __name__ == "__main__":
    sys.exit(main())
