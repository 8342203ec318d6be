"""orbbec_device: profile choice, SDK intrinsics, hot-plug watch, and the real pyorbbecsdk with no camera attached."""

from __future__ import annotations

from types import SimpleNamespace

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
