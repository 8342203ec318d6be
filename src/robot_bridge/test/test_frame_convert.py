"""frame_convert on synthetic buffers whose results are computed by hand."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
from PIL import Image

from robot_bridge.orbbec.frame_convert import (
    FrameError,
    Intrinsics,
    camera_info_data,
    color_to_rgb8,
    depth_to_mm,
    normalize_format,
    pinhole_intrinsics,
)

# ---------------------------------------------------------------- YUYV (BT.601, limited range)


def test_yuyv_macropixels_with_known_rgb():
    # Four macropixels, Y0 U Y1 V each: white / black, red, mid grey / lighter grey, green.
    data = bytes([
        235, 128, 16, 128,
        81, 90, 81, 240,
        126, 128, 180, 128,
        145, 54, 145, 34,
    ])
    rgb = color_to_rgb8(data, 8, 1, "YUYV")
    assert rgb.shape == (1, 8, 3) and rgb.dtype == np.uint8
    # Y 235 -> 1.164383 x 219 = 255; Y 16 -> 0 (U = V = 128 adds nothing).
    assert rgb[0, 0].tolist() == [255, 255, 255]
    assert rgb[0, 1].tolist() == [0, 0, 0]
    # Y' = 1.164383 x 65 = 75.685; R = 75.685 + 1.596027 x 112 = 254.44 -> 254;
    # G = 75.685 + 0.391762 x 38 - 0.812968 x 112 = -0.48 -> 0; B = 75.685 - 2.017232 x 38 = -0.97 -> 0.
    assert rgb[0, 2].tolist() == [254, 0, 0]
    assert rgb[0, 3].tolist() == [254, 0, 0]  # the second pixel of the macropixel shares U and V
    # 1.164383 x 110 = 128.08 -> 128; 1.164383 x 164 = 190.96 -> 191: each pixel keeps its own luma.
    assert rgb[0, 4].tolist() == [128, 128, 128]
    assert rgb[0, 5].tolist() == [191, 191, 191]
    # Y' = 1.164383 x 129 = 150.205; R = 150.205 - 1.596027 x 94 = 0.18 -> 0;
    # G = 150.205 + 0.391762 x 74 + 0.812968 x 94 = 255.61 -> 255 (clipped); B = 150.205 - 2.017232 x 74 = 0.93 -> 1.
    assert rgb[0, 6].tolist() == [0, 255, 1]


def test_yuyv_rows_and_aliases():
    row0 = [235, 128, 235, 128]
    row1 = [16, 128, 16, 128]
    rgb = color_to_rgb8(np.array(row0 + row1, dtype=np.uint8), 2, 2, "YUY2")
    assert rgb[0].tolist() == [[255, 255, 255]] * 2 and rgb[1].tolist() == [[0, 0, 0]] * 2
    assert normalize_format("OBFormat.YUY2") == "YUYV"


def test_yuyv_rejects_odd_width_and_short_buffer():
    with pytest.raises(FrameError, match="odd"):
        color_to_rgb8(bytes(6), 3, 1, "YUYV")
    with pytest.raises(FrameError, match="needs 8 bytes, got 6"):
        color_to_rgb8(bytes(6), 4, 1, "YUYV")


# ---------------------------------------------------------------- RGB / BGR


def test_rgb_passes_through_and_bgr_swaps():
    pixels = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    assert np.array_equal(color_to_rgb8(pixels.tobytes(), 3, 2, "RGB"), pixels)
    bgr = color_to_rgb8(bytes([10, 20, 30, 1, 2, 3]), 2, 1, "BGR")
    assert bgr.tolist() == [[[30, 20, 10], [3, 2, 1]]]
    assert bgr.flags.c_contiguous


def test_unknown_format_and_wrong_size_are_frame_errors():
    with pytest.raises(FrameError, match="NV12 is not supported"):
        color_to_rgb8(bytes(12), 2, 2, "NV12")
    with pytest.raises(FrameError, match="needs 12 bytes, got 11"):
        color_to_rgb8(bytes(11), 2, 2, "RGB")
    with pytest.raises(FrameError, match="not positive"):
        color_to_rgb8(b"", 0, 2, "RGB")


# ---------------------------------------------------------------- MJPG


def jpeg_of(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(array).save(out, format="JPEG", quality=95, subsampling=0)
    return out.getvalue()


def test_mjpg_decodes_to_the_encoded_array():
    known = np.zeros((16, 24, 3), dtype=np.uint8)
    known[:8, :8] = (200, 30, 40)      # flat 8x8 blocks: JPEG keeps them within a few levels
    known[:8, 8:16] = (20, 180, 60)
    known[8:, :] = (90, 90, 250)
    rgb = color_to_rgb8(np.frombuffer(jpeg_of(known), dtype=np.uint8), 24, 16, "MJPG")
    assert rgb.shape == (16, 24, 3) and rgb.dtype == np.uint8
    assert np.abs(rgb.astype(int) - known.astype(int)).max() <= 4


def test_mjpg_errors():
    with pytest.raises(FrameError, match="not a decodable JPEG"):
        color_to_rgb8(b"\xff\xd8 not really a jpeg", 4, 4, "MJPG")
    with pytest.raises(FrameError, match="decodes to 24x16, expected 32x16"):
        color_to_rgb8(jpeg_of(np.zeros((16, 24, 3), dtype=np.uint8)), 32, 16, "MJPG")


# ---------------------------------------------------------------- depth


def y16(values: list[int]) -> bytes:
    return np.array(values, dtype="<u2").tobytes()


def test_depth_scale_one_is_the_raw_value():
    assert y16([1000])[:2] == b"\xe8\x03"  # little endian
    mm = depth_to_mm(y16([0, 1, 1000, 65535]), 2, 2, 1.0)
    assert mm.dtype == np.uint16 and mm.tolist() == [[0, 1], [1000, 65535]]


def test_depth_scale_tenth_rounds_half_up():
    # 14 x 0.1 = 1.4 -> 1; 15 x 0.1 = 1.5 -> 2; 25 x 0.1 = 2.5 -> 3 (half up, not to even); 65535 -> 6553.5 -> 6554.
    mm = depth_to_mm(y16([0, 14, 15, 25, 65535, 12345]), 6, 1, 0.1)
    assert mm.tolist() == [[0, 1, 2, 3, 6554, 1235]]


def test_depth_clips_at_the_uint16_range():
    mm = depth_to_mm(y16([40000, 30000]), 2, 1, 2.0)  # 80000 mm saturates; 60000 fits
    assert mm.tolist() == [[65535, 60000]]


def test_depth_errors():
    with pytest.raises(FrameError, match="needs 8 bytes"):
        depth_to_mm(bytes(6), 2, 2, 1.0)
    for scale in (0.0, -1.0, math.nan):
        with pytest.raises(FrameError, match="depth scale"):
            depth_to_mm(bytes(8), 2, 2, scale)


# ---------------------------------------------------------------- CameraInfo


def test_camera_info_plumb_bob():
    intr = Intrinsics(640, 480, 600.0, 601.0, 320.5, 240.25, k1=0.1, k2=-0.2, k3=0.03, p1=0.001, p2=-0.002)
    info = camera_info_data(intr)
    assert (info.width, info.height, info.distortion_model) == (640, 480, "plumb_bob")
    assert info.d == (0.1, -0.2, 0.001, -0.002, 0.03)  # k1 k2 p1 p2 k3
    assert info.k == (600.0, 0.0, 320.5, 0.0, 601.0, 240.25, 0.0, 0.0, 1.0)
    assert info.r == (1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0)
    assert info.p == (600.0, 0.0, 320.5, 0.0, 0.0, 601.0, 240.25, 0.0, 0.0, 0.0, 1.0, 0.0)


def test_camera_info_rational_polynomial_when_k4_to_k6_are_used():
    intr = Intrinsics(1280, 720, 1.0, 1.0, 0.0, 0.0, k1=1, k2=2, k3=3, k4=4, k5=5, k6=6, p1=7, p2=8)
    info = camera_info_data(intr)
    assert info.distortion_model == "rational_polynomial"
    assert info.d == (1.0, 2.0, 7.0, 8.0, 3.0, 4.0, 5.0, 6.0)  # k1 k2 p1 p2 k3 k4 k5 k6
    forced = camera_info_data(Intrinsics(4, 4, 1.0, 1.0, 2.0, 2.0, model="rational_polynomial"))
    assert forced.distortion_model == "rational_polynomial" and len(forced.d) == 8


def test_pinhole_from_field_of_view_and_scaling():
    intr = pinhole_intrinsics(640, 480, 90.0)
    assert intr.fx == pytest.approx(320.0) and intr.fy == pytest.approx(320.0)
    assert (intr.cx, intr.cy) == (320.0, 240.0)
    half = intr.scaled_to(320, 240)
    assert (half.fx, half.cx, half.cy, half.width) == (pytest.approx(160.0), 160.0, 120.0, 320)
    with pytest.raises(ValueError, match="field of view"):
        pinhole_intrinsics(640, 480, 180.0)
