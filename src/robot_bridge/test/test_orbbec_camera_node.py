"""orbbec_camera node over real DDS: video mode, two cameras side by side, the real SDK with no camera, hot-plug."""

from __future__ import annotations

import threading
from collections import defaultdict
from pathlib import Path

import av
import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from PIL import Image as PILImage
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CameraInfo, Image

from brace_common import qos
from brace_common.testing import wait_for
from robot_bridge.orbbec.frame_convert import Intrinsics
from robot_bridge.orbbec.orbbec_camera_node import OrbbecCameraNode
from robot_bridge.orbbec.orbbec_device import DeviceLostError, Frames, NoDeviceError

NS = "/r1"
SUCCESS = TransitionCallbackReturn.SUCCESS


class Viewer(Node):
    """Subscribes to the four topics of each named camera and to /diagnostics."""

    def __init__(self, cameras: list[str]) -> None:
        super().__init__("viewer", namespace=NS)
        self.msgs: dict[str, list] = defaultdict(list)
        self.diagnostics: dict[str, list[DiagnosticStatus]] = defaultdict(list)
        for camera in cameras:
            for suffix, kind in (("color/image_raw", Image), ("color/camera_info", CameraInfo),
                                 ("depth/image_raw", Image), ("depth/camera_info", CameraInfo)):
                name = f"{camera}/{suffix}"
                self.create_subscription(kind, name, lambda msg, n=name: self.msgs[n].append(msg),
                                         qos_profile_sensor_data)
        self.create_subscription(DiagnosticArray, "/diagnostics", self.on_diagnostics, qos.DIAGNOSTICS)

    def on_diagnostics(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            self.diagnostics[status.name].append(status)

    def last_status(self, name: str) -> DiagnosticStatus | None:
        return self.diagnostics[name][-1] if self.diagnostics[name] else None


def values(status: DiagnosticStatus) -> dict[str, str]:
    return {kv.key: kv.value for kv in status.values}


def camera(name: str, factory=None, **params) -> OrbbecCameraNode:
    params.setdefault("diagnostics_period_s", 0.1)
    return OrbbecCameraNode(name, source_factory=factory, namespace=NS,
                            parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])


def start(ros, viewer: Viewer, *nodes: OrbbecCameraNode) -> None:
    """Configure, wait until the viewer is matched to every publisher (nothing is lost), then activate."""
    for node in nodes:
        assert node.trigger_configure() == SUCCESS, node.last_error
        ros.add(node)
    if viewer not in ros.nodes:
        ros.add(viewer)
    for node in nodes:
        wait_for(lambda n=node: all(p.get_subscription_count() > 0 for p in n._pubs.values()), what="discovery")
    for node in nodes:
        assert node.trigger_activate() == SUCCESS


def write_folder(folder: Path, size: tuple[int, int], colors: list[tuple[int, int, int]]) -> None:
    folder.mkdir()
    for i, rgb in enumerate(colors):
        PILImage.fromarray(np.full((size[1], size[0], 3), rgb, dtype=np.uint8)).save(folder / f"{i:03d}.png")


def write_depth(folder: Path, size: tuple[int, int], values_mm: list[int]) -> None:
    folder.mkdir()
    for i, value in enumerate(values_mm):
        PILImage.fromarray(np.full((size[1], size[0]), value, dtype=np.uint16)).save(folder / f"{i:03d}.png")


def write_video(path: Path, size: tuple[int, int], frames: int) -> None:
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        for i in range(frames):
            image = np.full((size[1], size[0], 3), (30 * i, 100, 200), dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def test_video_mode_publishes_rgb8_depth_and_camera_info(ros, tmp_path):
    colors = [(250, 0, 0), (0, 250, 0), (0, 0, 250)]
    write_folder(tmp_path / "rgb", (64, 48), colors)
    write_depth(tmp_path / "depth", (32, 24), [400, 800, 1200])
    node = camera("front_camera", source="video", video_path=str(tmp_path / "rgb"), depth_path=str(tmp_path / "depth"),
                  loop=False, color_fps=30, fx=80.0)
    viewer = Viewer(["front_camera"])
    start(ros, viewer, node)
    wait_for(lambda: node.finished, what="the folder played once")
    assert node.counts["frames_published"] == 3 and node.counts["depth_frames_published"] == 3
    topic = "front_camera/"
    wait_for(lambda: len(viewer.msgs[topic + "color/image_raw"]) == 3 and len(viewer.msgs[topic + "depth/image_raw"]) == 3
             and len(viewer.msgs[topic + "color/camera_info"]) == 3 and len(viewer.msgs[topic + "depth/camera_info"]) == 3,
             what="every message")
    images = viewer.msgs[topic + "color/image_raw"]
    for image, rgb in zip(images, colors, strict=True):
        assert (image.encoding, image.width, image.height, image.step) == ("rgb8", 64, 48, 64 * 3)
        assert image.header.frame_id == "front_camera_color_optical_frame"
        assert list(image.data[:3]) == list(rgb)
    depth = viewer.msgs[topic + "depth/image_raw"][1]
    assert (depth.encoding, depth.width, depth.height, depth.step) == ("16UC1", 32, 24, 64)
    assert depth.header.frame_id == "front_camera_depth_optical_frame"
    assert np.frombuffer(bytes(depth.data), dtype="<u2")[0] == 800
    info = viewer.msgs[topic + "color/camera_info"][0]
    assert (info.width, info.height, info.distortion_model) == (64, 48, "plumb_bob")
    assert list(info.k) == [80.0, 0.0, 32.0, 0.0, 80.0, 24.0, 0.0, 0.0, 1.0]
    assert info.header.stamp == images[0].header.stamp
    depth_info = viewer.msgs[topic + "depth/camera_info"][0]
    assert (depth_info.width, depth_info.height, depth_info.k[0]) == (32, 24, 40.0)  # the colour camera, halved
    name = "front_camera: camera front_camera"
    wait_for(lambda: viewer.last_status(name) is not None and values(viewer.last_status(name))["finished"] == "True",
             what="diagnostics")
    status = viewer.last_status(name)
    assert status.level == DiagnosticStatus.OK and "finished" in status.message
    assert values(status)["frames_published"] == "3"


def test_two_cameras_side_by_side(ros, tmp_path):
    write_folder(tmp_path / "front", (64, 48), [(10, 20, 30)] * 2)
    write_video(tmp_path / "wrist.mp4", (32, 24), 4)
    front = camera("front_camera", source="video", video_path=str(tmp_path / "front"), color_fps=20)
    wrist = camera("wrist_node", camera_name="wrist_camera", source="video", video_path=str(tmp_path / "wrist.mp4"),
                   color_fps=20)
    viewer = Viewer(["front_camera", "wrist_camera"])
    start(ros, viewer, front, wrist)
    wait_for(lambda: len(viewer.msgs["front_camera/color/image_raw"]) >= 5
             and len(viewer.msgs["wrist_camera/color/image_raw"]) >= 5, what="both cameras looping")
    front_image = viewer.msgs["front_camera/color/image_raw"][-1]
    wrist_image = viewer.msgs["wrist_camera/color/image_raw"][-1]
    assert (front_image.width, front_image.height, front_image.encoding) == (64, 48, "rgb8")
    assert (wrist_image.width, wrist_image.height, wrist_image.encoding) == (32, 24, "rgb8")
    assert wrist_image.header.frame_id == "wrist_camera_color_optical_frame"
    assert viewer.msgs["wrist_camera/color/camera_info"][-1].width == 32
    assert not viewer.msgs["front_camera/depth/image_raw"] and "depth" not in front._pubs  # no depth_path: no depth
    assert front.get_fully_qualified_name() == "/r1/front_camera"
    topics = {name for name, _ in front.get_topic_names_and_types()}
    assert {"/r1/front_camera/color/image_raw", "/r1/wrist_camera/color/camera_info"} <= topics
    for node in (front, wrist):
        assert node.trigger_deactivate() == SUCCESS
        published = node.counts["frames_published"]
        assert not node.reader.running and node.counts["frames_published"] == published  # nothing after deactivate
        assert node.trigger_cleanup() == SUCCESS


def test_device_mode_without_a_camera_reports_error_and_keeps_retrying(ros, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the real pyorbbecsdk: no camera is attached to this machine
    node = camera("orbbec_camera", source="device", serial_number="", reconnect_period_s=0.05)
    viewer = Viewer(["orbbec_camera"])
    start(ros, viewer, node)
    name = "orbbec_camera: camera orbbec_camera"

    def erroring(min_attempts: int) -> bool:
        status = viewer.last_status(name)
        return status is not None and status.level == DiagnosticStatus.ERROR \
            and int(values(status)["open_attempts"]) >= min_attempts

    wait_for(lambda: erroring(3), what="diagnostics ERROR while retrying")
    status = viewer.last_status(name)
    assert "no Orbbec camera connected" in status.message and "open attempts" in status.message
    assert values(status)["connected"] == "False" and values(status)["state"] == "active"
    seen = int(values(status)["open_attempts"])
    wait_for(lambda: erroring(seen + 3), what="the attempts go on")
    assert node.reader.running and node.counts["connects"] == 0
    assert not viewer.msgs["orbbec_camera/color/image_raw"]
    assert node.trigger_deactivate() == SUCCESS and node.trigger_cleanup() == SUCCESS
    assert not (tmp_path / "Log").exists()  # the SDK's file log is off


class PluggableCamera:
    """A FrameSource double standing where pyorbbecsdk would: absent, then plugged, unplugged, stalled, back."""

    def __init__(self, absent_opens: int) -> None:
        self.absent_opens = absent_opens
        self.opens = 0
        self.unplugged = False
        self.stalled = False
        self.is_open = False
        self.description = ""
        self.finished = False
        self._pace = threading.Event()

    def open(self) -> None:
        self.opens += 1
        if self.opens <= self.absent_opens or self.unplugged:
            raise NoDeviceError("no Orbbec camera connected")
        self.is_open, self.stalled = True, False  # re-enumeration recovers a stalled stream
        self.description = "Orbbec double serial SIM0001"

    def read(self, timeout_s: float) -> Frames | None:
        assert self.is_open
        self._pace.wait(min(timeout_s, 0.02))
        if self.unplugged:
            raise DeviceLostError("Orbbec double serial SIM0001 was unplugged")
        if self.stalled:
            return None
        color = np.full((12, 16, 3), self.opens, dtype=np.uint8)
        depth = np.full((12, 16), 1000 + self.opens, dtype=np.uint16)
        intr = Intrinsics(16, 12, 10.0, 10.0, 8.0, 6.0)
        return Frames(color, depth, intr, intr)

    def close(self) -> None:
        self.is_open = False


def test_hot_plug_reconnects_and_publishes_again(ros):
    double = PluggableCamera(absent_opens=2)
    node = camera("orbbec_camera", factory=lambda cfg: double, reconnect_period_s=0.05, frame_timeout_s=0.3)
    viewer = Viewer(["orbbec_camera"])
    start(ros, viewer, node)
    images = viewer.msgs["orbbec_camera/color/image_raw"]
    depths = viewer.msgs["orbbec_camera/depth/image_raw"]
    wait_for(lambda: len(images) >= 3 and len(depths) >= 3, what="frames once the camera is plugged in")
    assert node.counts["open_failures"] == 2 and node.counts["connects"] == 1
    assert images[-1].data[0] == 3 and np.frombuffer(bytes(depths[-1].data), "<u2")[0] == 1003  # the third open

    name = "orbbec_camera: camera orbbec_camera"
    wait_for(lambda: (s := viewer.last_status(name)) is not None and s.level == DiagnosticStatus.OK, what="OK")
    double.unplugged = True
    wait_for(lambda: (s := viewer.last_status(name)) is not None and s.level == DiagnosticStatus.ERROR
             and values(s)["connected"] == "False", what="ERROR while unplugged")
    assert "was unplugged" in node.source_error or "no Orbbec camera connected" in node.source_error
    # the reader thread marks the loss (what diagnostics report) before it closes the source: wait for the close
    wait_for(lambda: not double.is_open, what="the lost source closed")
    assert node.counts["disconnects"] == 1
    assert node.last_disconnect == "lost Orbbec double serial SIM0001: DeviceLostError: Orbbec double serial SIM0001 " \
        "was unplugged"
    failures = node.counts["open_failures"]
    wait_for(lambda: node.counts["open_failures"] >= failures + 2, what="retries while unplugged")

    before = len(images)
    double.unplugged = False
    wait_for(lambda: node.counts["connects"] == 2 and len(images) >= before + 3, what="publishing after re-plug")
    wait_for(lambda: viewer.last_status(name).level == DiagnosticStatus.OK, what="diagnostics OK again")

    double.stalled = True  # no frames, no error: lost after frame_timeout_s, reopened
    wait_for(lambda: node.counts["disconnects"] == 2 and node.counts["connects"] == 3, what="stall detected, reopened")
    assert node.last_disconnect.endswith("no frame for 0.3 s")
    before = len(images)
    wait_for(lambda: len(images) >= before + 3, what="publishing after the stall")
    assert node.trigger_deactivate() == SUCCESS and not double.is_open


@pytest.mark.parametrize(("params", "parameter"), [
    ({"source": "usb"}, "source"),
    ({"source": "video"}, "video_path"),
    ({"source": "video", "video_path": "/nonexistent/clip.mp4"}, "video_path"),
    ({"camera_name": "front camera"}, "camera_name"),
    ({"camera_name": "front\n"}, "camera_name"),
    ({"color_format": "NV12"}, "color_format"),
    ({"color_fps": -1}, "color_fps"),
    ({"reconnect_period_s": 0.0}, "reconnect_period_s"),
    ({"serial_number": "AB CD"}, "serial_number"),
    ({"serial_number": "AB\n"}, "serial_number"),
    ({"sdk_log_level": "loud"}, "sdk_log_level"),
    ({"colour_fps": 15}, "colour_fps"),
])
def test_invalid_parameters_fail_configure_naming_the_parameter(ros, params, parameter):
    node = ros.add(camera("orbbec_camera", **params))
    assert node.trigger_configure() != SUCCESS
    assert f"parameter '{parameter}'" in node.last_error
    assert node.config is None and node.source is None and not node._pubs


def test_video_mode_needs_a_positive_rate(ros, tmp_path):
    write_folder(tmp_path / "rgb", (8, 8), [(1, 2, 3)])
    node = ros.add(camera("orbbec_camera", source="video", video_path=str(tmp_path / "rgb"), color_fps=0))
    assert node.trigger_configure() != SUCCESS and "parameter 'color_fps'" in node.last_error
    viewer = ros.add(Viewer([]))
    name = "orbbec_camera: camera orbbec_camera"
    wait_for(lambda: viewer.last_status(name) is not None, what="diagnostics")
    status = viewer.last_status(name)
    assert status.level == DiagnosticStatus.ERROR and "configure failed: parameter 'color_fps'" in status.message
