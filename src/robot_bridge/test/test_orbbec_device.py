"""orbbec_device: profile choice, SDK intrinsics, hot-plug watch, and the real pyorbbecsdk with no camera attached."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from robot_bridge.orbbec.frame_convert import COLOR_FORMATS, DEPTH_FORMATS
from robot_bridge.orbbec.orbbec_device import (
    COLOR_PREFERENCE,
    FrameSource,
    NoDeviceError,
    OrbbecSource,
    ProfileError,
    ProfileSpec,
    SourceError,
    StreamRequest,
    UnplugWatch,
    choose_profile,
    intrinsics_from_sdk,
)

OFFERED = [
    ProfileSpec(1280, 720, 30, "MJPG"),
    ProfileSpec(640, 480, 30, "MJPG"),
    ProfileSpec(640, 480, 30, "YUYV"),
    ProfileSpec(640, 480, 15, "RGB"),
    ProfileSpec(640, 480, 30, "RGB"),
    ProfileSpec(640, 480, 30, "NV12"),
]


def pick(want: StreamRequest) -> ProfileSpec:
    return OFFERED[choose_profile(OFFERED, want, "colour", COLOR_FORMATS, COLOR_PREFERENCE)]


def test_choose_profile_matches_size_rate_and_format():
    assert pick(StreamRequest(640, 480, 30, "MJPG")) == ProfileSpec(640, 480, 30, "MJPG")
    assert pick(StreamRequest(640, 480, 30, "yuy2")) == ProfileSpec(640, 480, 30, "YUYV")  # alias, any case
    assert pick(StreamRequest(640, 480, 30)) == ProfileSpec(640, 480, 30, "RGB")  # any: the cheapest to convert
    assert pick(StreamRequest(0, 0, 15)) == ProfileSpec(640, 480, 15, "RGB")
    assert pick(StreamRequest(1280, 0, 0)) == ProfileSpec(1280, 720, 30, "MJPG")
    assert pick(StreamRequest()) == ProfileSpec(640, 480, 15, "RGB")  # RGB first, then the camera's order


def test_choose_profile_error_lists_what_is_offered():
    with pytest.raises(ProfileError) as err:
        pick(StreamRequest(1920, 1080, 30, "MJPG"))
    text = str(err.value)
    assert "colour profile 1920x1080@30 MJPG is not offered" in text
    assert "1280x720@30 MJPG, 640x480@30 MJPG, 640x480@30 YUYV, 640x480@15 RGB" in text
    assert "not converted here: NV12" in text
    with pytest.raises(ProfileError, match="640x480@30 NV12 is not offered"):
        pick(StreamRequest(640, 480, 30, "NV12"))  # offered, but not a format converted here
    depth = [ProfileSpec(640, 400, 30, "Y16")]
    assert choose_profile(depth, StreamRequest(640, 400, 30, "ANY"), "depth", DEPTH_FORMATS) == 0
    with pytest.raises(ProfileError, match="depth profile 640x480@any any format .* offers: 640x400@30 Y16"):
        choose_profile(depth, StreamRequest(640, 480), "depth", DEPTH_FORMATS)


def test_intrinsics_from_sdk_fields():
    intrinsic = SimpleNamespace(width=640, height=480, fx=610.5, fy=611.0, cx=319.0, cy=241.5)
    distortion = SimpleNamespace(k1=0.1, k2=0.2, k3=0.3, k4=0.0, k5=0.0, k6=0.0, p1=0.01, p2=0.02,
                                 model=SimpleNamespace(name="BROWN_CONRADY"))
    intr = intrinsics_from_sdk(intrinsic, distortion)
    assert (intr.width, intr.fx, intr.cy, intr.k3, intr.p2, intr.model) == (640, 610.5, 241.5, 0.3, 0.02, "auto")
    k6 = SimpleNamespace(**{**vars(distortion), "model": SimpleNamespace(name="BROWN_CONRADY_K6")})
    assert intrinsics_from_sdk(intrinsic, k6).model == "rational_polynomial"


class RemovedList:
    """The part of pyorbbecsdk's DeviceList the hot-plug callback reads."""

    def __init__(self, serials: list[str]) -> None:
        self.serials = serials

    def get_count(self) -> int:
        return len(self.serials)

    def get_device_name_by_index(self, i: int) -> str:
        return "Orbbec Gemini 335"

    def get_device_serial_number_by_index(self, i: int) -> str:
        return self.serials[i]


def test_unplug_watch_notes_only_the_watched_camera():
    watch = UnplugWatch()
    watch(RemovedList(["CP1"]), RemovedList([]))
    assert not watch.lost.is_set()  # nothing watched yet
    watch.watch("CP1", "Gemini 335 serial CP1")
    watch(RemovedList(["CP2"]), RemovedList([]))
    assert not watch.lost.is_set()
    watch(RemovedList(["CP2", "CP1"]), RemovedList([]))
    assert watch.lost.is_set() and watch.reason == "Gemini 335 serial CP1 was unplugged"
    watch.watch("CP1", "again")
    assert not watch.lost.is_set()


def test_real_sdk_without_a_camera_raises_no_device_and_writes_no_log(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the SDK would write ./Log/OrbbecSDK.log.txt unless told not to
    source = OrbbecSource(serial_number="CP0000000001")
    assert isinstance(source, FrameSource)
    with pytest.raises(SourceError, match="not open"):
        source.read(0.01)
    for _ in range(2):  # again on the same SDK context, as the node retries
        with pytest.raises(NoDeviceError, match="no Orbbec camera connected .*serial number CP0000000001"):
            source.open()
    source.close()
    source.release()
    source.close()
    assert list(tmp_path.iterdir()) == []


class FakeSdk:
    """The part of pyorbbecsdk (v2) OrbbecSource uses, for one camera: 640x480 colour, 320x240 depth, and an
    AlignFilter that scales depth to the colour image (as the SDK's D2C alignment does), once both frames came."""

    class OBError(Exception):
        pass

    OBSensorType = SimpleNamespace(COLOR_SENSOR="color", DEPTH_SENSOR="depth")
    OBStreamType = SimpleNamespace(COLOR_STREAM="color_stream")

    class Frame:
        def __init__(self, data: np.ndarray, fmt: str, scale: float = 1.0) -> None:
            self.data, self.fmt, self.scale = data, fmt, scale

        def get_data(self):
            return self.data.tobytes()

        def get_width(self) -> int:
            return self.data.shape[1]

        def get_height(self) -> int:
            return self.data.shape[0]

        def get_format(self):
            return SimpleNamespace(name=self.fmt)

        def get_depth_scale(self) -> float:
            return self.scale

    class FrameSet:
        def __init__(self, color, depth) -> None:
            self.color, self.depth = color, depth

        def get_color_frame(self):
            return self.color

        def get_depth_frame(self):
            return self.depth

        def as_frame_set(self):
            return self

    class AlignFilter:
        created: list = []

        def __init__(self, align_to_stream) -> None:
            self.align_to_stream = align_to_stream
            FakeSdk.AlignFilter.created.append(self)

        def process(self, frames):
            if frames.depth is None or frames.color is None:
                return None
            d = np.repeat(np.repeat(frames.depth.data, 2, axis=0), 2, axis=1)   # depth in colour's pixels
            return FakeSdk.FrameSet(frames.color, FakeSdk.Frame(d, "Y16", frames.depth.scale))

    def __init__(self) -> None:
        self.frames: list = []
        sdk = self

        class Profile:
            def __init__(self, w, h, fmt) -> None:
                self.w, self.h, self.fmt = w, h, fmt

            def is_video_stream_profile(self):
                return True

            def as_video_stream_profile(self):
                return self

            def get_width(self):
                return self.w

            def get_height(self):
                return self.h

            def get_fps(self):
                return 30

            def get_format(self):
                return SimpleNamespace(name=self.fmt)

            def get_intrinsic(self):
                return SimpleNamespace(width=self.w, height=self.h, fx=self.w * 0.9, fy=self.w * 0.9, cx=self.w / 2,
                                       cy=self.h / 2)

            def get_distortion(self):
                return None

        class ProfileList:
            def __init__(self, profiles) -> None:
                self.profiles = profiles

            def get_count(self):
                return len(self.profiles)

            def get_stream_profile_by_index(self, i):
                return self.profiles[i]

        class Pipeline:
            def __init__(self, device) -> None:
                pass

            def get_stream_profile_list(self, sensor):
                return ProfileList([Profile(640, 480, "RGB")] if sensor == "color" else [Profile(320, 240, "Y16")])

            def start(self, config):
                pass

            def stop(self):
                pass

            def wait_for_frames(self, timeout_ms):
                return sdk.frames.pop(0) if sdk.frames else None

        device = SimpleNamespace(get_device_info=lambda: SimpleNamespace(get_serial_number=lambda: "CP1",
                                                                         get_name=lambda: "Gemini 335"))
        devices = RemovedList(["CP1"])
        devices.get_device_by_index = lambda i: device
        self.Pipeline = Pipeline
        self.Config = lambda: SimpleNamespace(enable_stream=lambda profile: None)
        self.Context = lambda: SimpleNamespace(register_device_changed_callback=lambda callback: 1,
                                               query_devices=lambda: devices)


@pytest.mark.parametrize("align", [True, False])
def test_depth_is_aligned_to_colour_before_it_is_converted(monkeypatch, align):
    sdk = FakeSdk()
    monkeypatch.setattr("robot_bridge.orbbec.orbbec_device.load_sdk", lambda level: sdk)
    source = OrbbecSource(align_depth=align)
    source.open()
    color = FakeSdk.Frame(np.full((480, 640, 3), 90, np.uint8), "RGB")
    depth = FakeSdk.Frame(np.arange(320 * 240, dtype=np.uint16).reshape(240, 320), "Y16")
    sdk.frames = [FakeSdk.FrameSet(None, depth), FakeSdk.FrameSet(color, depth)]
    first = source.read(0.1)
    frames = source.read(0.1)
    source.release()
    if not align:
        assert first.depth.shape == (240, 320) and frames.depth_intrinsics.width == 320
        return
    assert first is None, "the filter holds depth until its colour frame comes"
    assert FakeSdk.AlignFilter.created[-1].align_to_stream == "color_stream"
    assert frames.depth.shape == frames.color.shape[:2] == (480, 640)
    assert frames.depth_intrinsics == frames.color_intrinsics and frames.depth[2, 3] == depth.data[1, 1]
