"""orbbec_camera lifecycle node: an Orbbec RGB-D camera (pyorbbecsdk), or a recorded video, on OrbbecSDK_ROS2's topics.

Publishes <camera_name>/color/image_raw, color/camera_info, depth/image_raw, depth/camera_info and /diagnostics; the
reading thread lives in camera_reader. Topics, parameters, lifecycle and hot-plug: docs/orbbec_camera.md.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Optional

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn
from sensor_msgs.msg import CameraInfo, Image
from std_msgs.msg import Header

from brace_common import names, qos
from brace_common.clock import steady_timer
from brace_common.config import ConfigError
from brace_common.counters import Health
from brace_common.diagnostics import health_array
from brace_common.lifecycle import ReleasingLifecycleNode
from brace_common.params import declare_parameters, read_config, reject_undeclared
from brace_common.spin import spin_node

from .camera_config import CameraConfig, topic
from .camera_reader import CameraReader
from .image_msgs import IMAGE_QOS, camera_info_msg, image_msg
from .orbbec_device import Frames, FrameSource

SourceFactory = Callable[[CameraConfig], FrameSource]


class OrbbecCameraNode(ReleasingLifecycleNode):
    """Thin lifecycle shell: parameters in, a FrameSource read by a CameraReader on its own thread, images out."""

    def __init__(self, node_name: str = "orbbec_camera", source_factory: Optional[SourceFactory] = None,
                 **kwargs) -> None:
        super().__init__(node_name, **kwargs)
        declare_parameters(self, CameraConfig, enforce_ranges=False)
        self.source_factory = source_factory or CameraConfig.frame_source
        self.config: Optional[CameraConfig] = None
        self.source: Optional[FrameSource] = None
        self.reader = CameraReader(self.get_logger())
        self._pubs: dict[str, object] = {}
        # Diagnostics live as long as the node, in every lifecycle state (they say which).
        self.diag_pub = self.create_publisher(DiagnosticArray, names.DIAGNOSTICS, qos.DIAGNOSTICS)
        steady_timer(self, self.get_parameter("diagnostics_period_s").value, self.publish_diagnostics,
                     MutuallyExclusiveCallbackGroup())

    # What the reader saw, for callers and tests: it lives in the CameraReader.
    counts = property(lambda self: self.reader.counts, doc="The camera's event counters.")
    connected = property(lambda self: self.reader.connected, doc="The source is open and streaming.")
    finished = property(lambda self: self.reader.finished, doc="A video without loop published its last frame.")
    source_error = property(lambda self: self.reader.source_error, doc="Why nothing streams now ('' if it does).")
    last_disconnect = property(lambda self: self.reader.last_disconnect, doc="Why the source was last lost.")

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
        streams = (("color", names.COLOR_IMAGE, names.COLOR_INFO),) + \
            ((("depth", names.DEPTH_IMAGE, names.DEPTH_INFO),) if cfg.publishes_depth else ())
        for stream, image, info in streams:
            self._pubs[stream] = self.configured(self.create_lifecycle_publisher(
                Image, topic(cfg.camera_name, image), IMAGE_QOS))
            self._pubs[f"{stream}_info"] = self.configured(self.create_lifecycle_publisher(
                CameraInfo, topic(cfg.camera_name, info), IMAGE_QOS))
        self.state_label = "inactive"
        self.get_logger().info(f"configured camera '{cfg.camera_name}' from {cfg.source}"
                               + (f" {cfg.video_path}" if cfg.source == "video" else
                                  f" serial '{cfg.serial_number or 'first found'}'"))
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Activate the publishers and start the reading thread (it opens the source, retrying)."""
        result = super().on_activate(state)
        self.reader.start(self.source, self.config, f"{self.get_name()}_reader", self._publish, self.context.ok)
        self.state_label = "active"
        return result

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop the reading thread and close the source, then deactivate the publishers."""
        self.reader.stop()
        self.state_label = "inactive"
        return super().on_deactivate(state)

    def destroy_node(self) -> None:
        """Stop the reading thread (closing the camera) before the node's handles go away."""
        if getattr(self, "reader", None) is not None:  # a constructor a signal stopped half way has none
            self.reader.stop()
        super().destroy_node()

    def _release(self) -> None:
        """Cleanup and shutdown: stop the reading thread and drop the source (the base destroys the publishers)."""
        self.reader.stop()
        self._pubs, self.source, self.config = {}, None, None

    # ------------------------------------------------------------------ publishing (on the reading thread)

    def _publish(self, frames: Frames) -> Iterator[str]:
        """Publish one frame set (one stamp: now), yielding the counter of each stream published."""
        stamp, cfg = self.get_clock().now().to_msg(), self.config
        if frames.color is not None:
            header = Header(stamp=stamp, frame_id=cfg.color_frame_id)
            self._pubs["color"].publish(image_msg(frames.color, "rgb8", header))
            if frames.color_intrinsics is not None:
                self._pubs["color_info"].publish(camera_info_msg(frames.color_intrinsics, header))
            yield "frames_published"
        if frames.depth is not None and "depth" in self._pubs:
            header = Header(stamp=stamp, frame_id=cfg.depth_frame_id)
            self._pubs["depth"].publish(image_msg(frames.depth, "16UC1", header))
            if frames.depth_intrinsics is not None:
                self._pubs["depth_info"].publish(camera_info_msg(frames.depth_intrinsics, header))
            yield "depth_frames_published"

    # ------------------------------------------------------------------ monitoring

    def publish_diagnostics(self) -> None:
        """State, source, frames and rate, attempts and errors on /diagnostics (ERROR while the camera is missing)."""
        cfg = self.config
        camera = cfg.camera_name if cfg else (self.get_parameter("camera_name").value or self.get_name())
        values = {"state": self.state_label, "source": cfg.source if cfg else "", "camera_name": camera,
                  "device": self.source.description if self.source is not None else ""}
        problems: list[str] = []
        if self.last_error and cfg is None:
            problems.append(f"configure failed: {self.last_error}")
        elif self.state_label == "active" and self.reader.trouble():
            problems.append(self.reader.trouble())
        health = Health(values) + self.reader.health() + Health(errors=tuple(problems))
        message = "finished: the video's last frame was published" if self.reader.finished and not problems else ""
        self.diag_pub.publish(health_array(f"{self.get_name()}: camera {camera}", health,
                                           self.get_clock().now().to_msg(), message))


def main(args=None) -> int:
    """`ros2 run robot_bridge orbbec_camera --ros-args -r __node:=<camera_name> ...` (autostart by default)."""
    return spin_node(OrbbecCameraNode, "orbbec_camera", args)


if __name__ == "__main__":
    sys.exit(main())
