"""VideoSource on a short video encoded here with PyAV and on image folders written with Pillow."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from robot_bridge.orbbec.frame_convert import FrameError
from robot_bridge.orbbec.orbbec_device import FrameSource
from robot_bridge.orbbec.video_source import VideoConfig, VideoSource, VideoSourceError

W, H = 64, 48
COLORS = [(200, 40, 40), (40, 200, 40), (40, 40, 200), (220, 220, 60), (128, 128, 128)]


class FakeClock:
    """A steady clock that only moves when the source sleeps."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 9))
        self.now += seconds


def source(path, clock: FakeClock | None = None, **kwargs) -> VideoSource:
    clock = clock or FakeClock()
    return VideoSource(VideoConfig(str(path), kwargs.pop("fps", 10.0), **kwargs), clock=clock.monotonic,
                       sleep=clock.sleep)


def encode_video(path: Path, codec: str = "mpeg4") -> None:
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=10)
        stream.width, stream.height, stream.pix_fmt = W, H, "yuv420p"
        stream.options = {"qscale": "2"} if codec == "mpeg4" else {}
        for rgb in COLORS:
            frame = av.VideoFrame.from_ndarray(np.full((H, W, 3), rgb, dtype=np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def write_images(folder: Path, names: list[str], colors) -> None:
    folder.mkdir()
    for name, rgb in zip(names, colors, strict=True):
        Image.fromarray(np.full((H, W, 3), rgb, dtype=np.uint8)).save(folder / name)


def write_depth(folder: Path, values: list[int], size=(W, H)) -> None:
    folder.mkdir()
    for i, value in enumerate(values):
        depth = np.full((size[1], size[0]), value, dtype=np.uint16)
        depth[0, 0] = 65535
        Image.fromarray(depth).save(folder / f"depth_{i:03d}.png")


def read_all(src: VideoSource, limit: int = 50) -> list:
    frames = []
    for _ in range(limit):
        got = src.read(1.0)
        if got is None:
            if src.finished:
                break
            continue
        frames.append(got)
    return frames


@pytest.mark.parametrize("codec", ["mpeg4", "libx264"])
def test_video_plays_once_with_the_encoded_colours(tmp_path, codec):
    path = tmp_path / f"clip_{codec}.mp4"
    encode_video(path, codec)
    src = source(path, loop=False)
    assert isinstance(src, FrameSource)
    src.open()
    frames = read_all(src)
    src.close()
    assert src.finished and len(frames) == len(COLORS)
    for got, rgb in zip(frames, COLORS, strict=True):
        assert got.color.shape == (H, W, 3) and got.color.dtype == np.uint8
        assert np.abs(got.color.astype(int) - np.array(rgb)).mean() < 8  # lossy codec, flat colours
        assert got.depth is None and got.depth_intrinsics is None
    intr = frames[0].color_intrinsics
    assert (intr.width, intr.height, intr.cx, intr.cy) == (W, H, W / 2, H / 2)  # default pinhole
    assert str(path) in src.description


def test_video_loops_from_the_start(tmp_path):
    path = tmp_path / "clip.mp4"
    encode_video(path)
    src = source(path, loop=True)
    src.open()
    frames = [src.read(1.0) for _ in range(len(COLORS) + 2)]
    src.close()
    assert not src.finished and src.passes == 1
    assert np.abs(frames[len(COLORS)].color.astype(int) - np.array(COLORS[0])).mean() < 8
    assert np.abs(frames[len(COLORS) + 1].color.astype(int) - np.array(COLORS[1])).mean() < 8


def test_image_folder_in_name_order_with_depth(tmp_path):
    write_images(tmp_path / "rgb", ["b.png", "a.png", "c.jpg"], COLORS[:3])
    (tmp_path / "rgb" / "notes.txt").write_text("not an image")
    write_depth(tmp_path / "depth", [500, 1000, 1500], size=(W // 2, H // 2))
    src = source(tmp_path / "rgb", loop=False, depth_path=str(tmp_path / "depth"), intrinsics=(50.0, 0.0, 30.0, 0.0))
    src.open()
    frames = read_all(src)
    assert len(frames) == 3 and src.finished
    assert frames[0].color[0, 0].tolist() == list(COLORS[1])  # a.png first
    assert frames[1].color[0, 0].tolist() == list(COLORS[0])  # then b.png
    assert np.abs(frames[2].color.astype(int) - np.array(COLORS[2])).max() <= 4  # c.jpg (lossy)
    assert [f.depth[1, 1] for f in frames] == [500, 1000, 1500]
    assert frames[0].depth.dtype == np.uint16 and frames[0].depth[0, 0] == 65535
    color, depth = frames[0].color_intrinsics, frames[0].depth_intrinsics
    assert (color.fx, color.fy, color.cx, color.cy) == (50.0, 50.0, 30.0, H / 2)  # fy = fx, cy = centre
    assert (depth.width, depth.height, depth.fx, depth.cx) == (W // 2, H // 2, 25.0, 15.0)


def test_pacing_waits_for_each_frame_and_respects_the_timeout(tmp_path):
    write_images(tmp_path / "rgb", ["0.png", "1.png", "2.png"], COLORS[:3])
    clock = FakeClock()
    src = source(tmp_path / "rgb", clock, fps=4.0)  # a frame every 0.25 s
    src.open()
    assert src.read(1.0) is not None and clock.sleeps == []        # the first frame at once
    assert src.read(0.1) is None and clock.sleeps == [0.1]         # not due within 0.1 s
    assert src.read(1.0) is not None and clock.sleeps == [0.1, 0.15]  # due 0.25 s after the first
    clock.now += 2.0                                                # a stall: no burst of late frames
    assert src.read(1.0) is not None and clock.sleeps == [0.1, 0.15]
    assert src.read(0.2) is None                                    # the next waits a whole period again


def test_errors_name_what_is_wrong(tmp_path):
    with pytest.raises(VideoSourceError, match="does not exist"):
        source(tmp_path / "missing.mp4").open()
    (tmp_path / "empty").mkdir()
    with pytest.raises(VideoSourceError, match="no PNG or JPG"):
        source(tmp_path / "empty").open()
    (tmp_path / "text.mp4").write_text("this is not a video")
    with pytest.raises(VideoSourceError, match="not a readable video"):
        source(tmp_path / "text.mp4").open()
    write_images(tmp_path / "rgb", ["0.png", "1.png"], COLORS[:2])
    write_depth(tmp_path / "depth", [1])
    with pytest.raises(VideoSourceError, match="1 PNGs for 2 colour images"):
        source(tmp_path / "rgb", depth_path=str(tmp_path / "depth")).open()
    with pytest.raises(ValueError, match="fps"):
        VideoSource(VideoConfig(str(tmp_path / "rgb"), 0.0))


def test_a_bad_frame_is_skipped(tmp_path):
    write_images(tmp_path / "rgb", ["0.png", "2.png"], [COLORS[0], COLORS[2]])
    (tmp_path / "rgb" / "1.png").write_bytes(b"broken")
    (tmp_path / "depth8").mkdir()
    src = source(tmp_path / "rgb", loop=False)
    src.open()
    assert src.read(1.0).color[0, 0].tolist() == list(COLORS[0])
    with pytest.raises(FrameError, match="1.png"):
        src.read(1.0)
    assert src.read(1.0).color[0, 0].tolist() == list(COLORS[2])
    for i in range(3):
        Image.fromarray(np.zeros((H, W), dtype=np.uint8)).save(tmp_path / "depth8" / f"{i}.png")
    eight_bit = source(tmp_path / "rgb", depth_path=str(tmp_path / "depth8"))
    eight_bit.open()
    with pytest.raises(FrameError, match="not a 16-bit"):
        eight_bit.read(1.0)
