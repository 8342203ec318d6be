"""The twin's rendered camera on a node: colour, aligned depth and camera_info on OrbbecSDK_ROS2's topics."""

from __future__ import annotations

import time

from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, Image
from std_msgs.msg import Header

from brace_common import names
from brace_common.counters import Counters, Health

from ..orbbec.calibration import CameraModel
from ..orbbec.image_msgs import IMAGE_QOS, camera_info_msg, image_msg
from .scene_render import Scene, SceneRenderer


class TwinCamera:
    """The rendered camera's publishers on a node: colour, depth and camera_info under `camera_name`."""

    def __init__(self, node: Node, camera_name: str, camera: CameraModel, seed: int = 0) -> None:
        self.node = node
        self.renderer = SceneRenderer(camera, seed=seed)
        self.intrinsics = camera.intrinsics
        self.frame_id = f"{camera_name}_color_optical_frame"
        self.pubs = {key: node.create_publisher(kind, f"{camera_name}/{name}", IMAGE_QOS)
                     for key, kind, name in (("color", Image, names.COLOR_IMAGE), ("color_info", CameraInfo,
                                                                                      names.COLOR_INFO),
                                             ("depth", Image, names.DEPTH_IMAGE), ("depth_info", CameraInfo,
                                                                                   names.DEPTH_INFO))}
        self.counts = Counters(("frames_published",))
        self.render_ms = 0.0  # how long the latest frame took to render

    def publish(self, scene: Scene) -> None:
        """Render `scene` and publish the frame pair; depth is aligned to colour (one camera, one stamp)."""
        started = time.perf_counter()
        rgb, depth = self.renderer.render(scene)
        self.render_ms = round((time.perf_counter() - started) * 1000.0, 2)
        header = Header(stamp=self.node.get_clock().now().to_msg(), frame_id=self.frame_id)
        self.pubs["color"].publish(image_msg(rgb, "rgb8", header))
        self.pubs["depth"].publish(image_msg(depth, "16UC1", header))
        info = camera_info_msg(self.intrinsics, header)
        self.pubs["color_info"].publish(info)
        self.pubs["depth_info"].publish(info)
        self.counts.add("frames_published")

    def health(self) -> Health:
        """Frames published and the latest frame's render time."""
        return self.counts.health() + Health({"render_ms": self.render_ms})
