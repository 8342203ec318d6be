"""Camera frame conversions, ROS-free: colour buffers to rgb8, raw depth to millimetres, intrinsics to CameraInfo fields.

Pure functions, so the node only copies their results into messages. The colour formats (YUYV's BT.601 range), the
depth scale and rounding: docs/orbbec_camera.md, "Conversions".
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import numpy as np

COLOR_FORMATS = ("RGB", "BGR", "MJPG", "YUYV")
"""Colour formats converted to rgb8 (YUY2 is another name of YUYV)."""
DEPTH_FORMATS = ("Y16", "Z16")
"""Depth formats: one little-endian uint16 per pixel."""
FORMAT_ALIASES = {"YUY2": "YUYV", "MJPEG": "MJPG", "JPEG": "MJPG"}

PLUMB_BOB = "plumb_bob"
RATIONAL_POLYNOMIAL = "rational_polynomial"
EQUIDISTANT = "equidistant"
DISTORTION_MODELS = ("auto", PLUMB_BOB, RATIONAL_POLYNOMIAL, EQUIDISTANT)

# ITU-R BT.601: luma weights, and the limited-range scales (219 steps of Y, 224 of U and V).
_KR, _KB = 0.299, 0.114
_KG = 1.0 - _KR - _KB
_Y_SCALE = 255.0 / 219.0
_C_SCALE = 255.0 / 224.0
YUV_TO_RGB = (
    # (Y, U, V) coefficients after subtracting (16, 128, 128)
    (_Y_SCALE, 0.0, _C_SCALE * 2.0 * (1.0 - _KR)),
    (_Y_SCALE, -_C_SCALE * 2.0 * (1.0 - _KB) * _KB / _KG, -_C_SCALE * 2.0 * (1.0 - _KR) * _KR / _KG),
    (_Y_SCALE, _C_SCALE * 2.0 * (1.0 - _KB), 0.0),
)
"""BT.601 limited range: R = 1.164 (Y-16) + 1.596 (V-128); G = 1.164 (Y-16) - 0.392 (U-128) - 0.813 (V-128);
B = 1.164 (Y-16) + 2.017 (U-128)."""


class FrameError(ValueError):
    """One frame that cannot be converted (wrong size, unknown format, undecodable JPEG); the next may be fine."""


def normalize_format(fmt: str) -> str:
    """The canonical upper-case name of a pixel format ('yuy2' -> 'YUYV')."""
    name = str(fmt).upper()
    if name.startswith("OBFORMAT."):
        name = name[len("OBFORMAT."):]
    return FORMAT_ALIASES.get(name, name)


def _as_bytes(data) -> np.ndarray:
    array = np.frombuffer(data, dtype=np.uint8) if isinstance(data, (bytes, bytearray, memoryview)) \
        else np.asarray(data)
    if array.dtype != np.uint8:
        array = array.view(np.uint8) if array.flags.c_contiguous else np.ascontiguousarray(array).view(np.uint8)
    return array.reshape(-1)


def _check_size(width: int, height: int) -> None:
    if width <= 0 or height <= 0:
        raise FrameError(f"frame size {width}x{height} is not positive")


def _packed(data, width: int, height: int, channels: int, fmt: str) -> np.ndarray:
    _check_size(width, height)
    buf = _as_bytes(data)
    expected = width * height * channels
    if buf.size != expected:
        raise FrameError(f"{fmt} frame {width}x{height} needs {expected} bytes, got {buf.size}")
    return buf.reshape(height, width, channels)


def rgb_to_rgb8(data, width: int, height: int) -> np.ndarray:
    """An RGB buffer (3 bytes a pixel) as an (H, W, 3) array."""
    return _packed(data, width, height, 3, "RGB").copy()


def bgr_to_rgb8(data, width: int, height: int) -> np.ndarray:
    """A BGR buffer (3 bytes a pixel) as an (H, W, 3) RGB array."""
    return np.ascontiguousarray(_packed(data, width, height, 3, "BGR")[:, :, ::-1])


def yuyv_to_rgb8(data, width: int, height: int) -> np.ndarray:
    """A YUYV 4:2:2 buffer (Y0 U Y1 V per two pixels, BT.601 limited range) as an (H, W, 3) RGB array."""
    if width % 2:
        raise FrameError(f"YUYV frame width {width} is odd (two pixels share one U and V)")
    packed = _packed(data, width, height, 2, "YUYV").reshape(height, width // 2, 4)  # one macropixel: Y0 U Y1 V
    y = packed[:, :, 0::2].astype(np.float32)      # (H, W/2, 2): each pixel's own luma
    y -= 16.0
    y *= YUV_TO_RGB[0][0]
    u = packed[:, :, 1:2].astype(np.float32) - 128.0  # (H, W/2, 1): shared by the macropixel's two pixels
    v = packed[:, :, 3:4].astype(np.float32) - 128.0
    rgb = np.empty((height, width // 2, 2, 3), dtype=np.float32)
    for channel, (_, cu, cv) in enumerate(YUV_TO_RGB):
        rgb[:, :, :, channel] = y + (cu * u + cv * v)
    rgb += 0.5                                      # round half up: truncation after clipping at 0 is floor
    np.clip(rgb, 0.0, 255.0, out=rgb)
    return rgb.astype(np.uint8).reshape(height, width, 3)


def mjpg_to_rgb8(data, width: int = 0, height: int = 0) -> np.ndarray:
    """A JPEG frame decoded to an (H, W, 3) RGB array; FrameError when undecodable or not `width` x `height`."""
    # optional: Pillow is needed only to decode or resize images (MJPG, PNG, VLA input)
    from PIL import Image, UnidentifiedImageError

    buf = _as_bytes(data)
    try:
        with Image.open(io.BytesIO(buf.tobytes())) as image:
            rgb = np.asarray(image.convert("RGB"))
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise FrameError(f"MJPG frame of {buf.size} bytes is not a decodable JPEG: {exc}") from None
    if (width and rgb.shape[1] != width) or (height and rgb.shape[0] != height):
        raise FrameError(f"MJPG frame decodes to {rgb.shape[1]}x{rgb.shape[0]}, expected {width}x{height}")
    return rgb


def color_to_rgb8(data, width: int, height: int, fmt: str) -> np.ndarray:
    """A colour buffer in `fmt` (RGB, BGR, MJPG, YUYV / YUY2) as an (H, W, 3) uint8 RGB array."""
    name = normalize_format(fmt)
    if name == "RGB":
        return rgb_to_rgb8(data, width, height)
    if name == "BGR":
        return bgr_to_rgb8(data, width, height)
    if name == "YUYV":
        return yuyv_to_rgb8(data, width, height)
    if name == "MJPG":
        return mjpg_to_rgb8(data, width, height)
    raise FrameError(f"colour format {fmt} is not supported (supported: {', '.join(COLOR_FORMATS)})")


def depth_to_mm(data, width: int, height: int, scale_mm: float) -> np.ndarray:
    """A Y16 buffer (little-endian uint16 device units) times `scale_mm` as (H, W) uint16 millimetres.

    Rounded half up, clipped to 0..65535 (a value beyond 65.535 m saturates).
    """
    _check_size(width, height)
    if not math.isfinite(scale_mm) or scale_mm <= 0:
        raise FrameError(f"depth scale {scale_mm} is not a positive number of millimetres per unit")
    buf = _as_bytes(data)
    if buf.size != width * height * 2:
        raise FrameError(f"Y16 frame {width}x{height} needs {width * height * 2} bytes, got {buf.size}")
    raw = buf.view("<u2").reshape(height, width)
    if scale_mm == 1.0:
        return raw.astype(np.uint16)
    mm = np.floor(raw.astype(np.float64) * scale_mm + 0.5)
    return np.clip(mm, 0, 65535).astype(np.uint16)


@dataclass(frozen=True)
class Intrinsics:
    """A camera's pinhole intrinsics (pixels) and Brown-Conrady distortion, for one image size."""

    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    k1: float = 0.0
    k2: float = 0.0
    k3: float = 0.0
    k4: float = 0.0
    k5: float = 0.0
    k6: float = 0.0
    p1: float = 0.0
    p2: float = 0.0
    model: str = "auto"
    """'auto' (rational_polynomial when k4..k6 are used, else plumb_bob), or a CameraInfo model name."""

    def scaled_to(self, width: int, height: int) -> Intrinsics:
        """The same camera at another image size (focal lengths and principal point scale; distortion stays)."""
        sx, sy = width / self.width, height / self.height
        return Intrinsics(width, height, self.fx * sx, self.fy * sy, self.cx * sx, self.cy * sy, self.k1, self.k2,
                          self.k3, self.k4, self.k5, self.k6, self.p1, self.p2, self.model)


def pinhole_intrinsics(width: int, height: int, hfov_deg: float) -> Intrinsics:
    """An undistorted pinhole camera of horizontal field of view `hfov_deg`, square pixels, centred."""
    _check_size(width, height)
    if not 0.0 < hfov_deg < 180.0:
        raise ValueError(f"horizontal field of view {hfov_deg} deg is outside (0, 180)")
    fx = (width / 2.0) / math.tan(math.radians(hfov_deg) / 2.0)
    return Intrinsics(width, height, fx, fx, width / 2.0, height / 2.0)


@dataclass(frozen=True)
class CameraInfoData:
    """The fields of a sensor_msgs/CameraInfo (without its header), as plain data."""

    width: int
    height: int
    distortion_model: str
    d: tuple[float, ...]
    k: tuple[float, ...]   # 3x3 row-major
    r: tuple[float, ...]   # 3x3 row-major
    p: tuple[float, ...]   # 3x4 row-major


def distortion_model(intr: Intrinsics) -> str:
    """The CameraInfo distortion model of `intr` ('auto' resolved from which coefficients are used)."""
    if intr.model == "auto":
        return RATIONAL_POLYNOMIAL if any((intr.k4, intr.k5, intr.k6)) else PLUMB_BOB
    if intr.model not in DISTORTION_MODELS:
        raise ValueError(f"distortion model '{intr.model}' is not one of {', '.join(DISTORTION_MODELS)}")
    return intr.model


def camera_info_data(intr: Intrinsics) -> CameraInfoData:
    """K, R (identity: a monocular camera), P (K with a zero fourth column) and D in the model's order."""
    model = distortion_model(intr)
    if model == PLUMB_BOB:
        d = (intr.k1, intr.k2, intr.p1, intr.p2, intr.k3)
    elif model == RATIONAL_POLYNOMIAL:
        d = (intr.k1, intr.k2, intr.p1, intr.p2, intr.k3, intr.k4, intr.k5, intr.k6)
    else:  # equidistant (Kannala-Brandt): four radial coefficients
        d = (intr.k1, intr.k2, intr.k3, intr.k4)
    k = (intr.fx, 0.0, intr.cx, 0.0, intr.fy, intr.cy, 0.0, 0.0, 1.0)
    r = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0)
    p = (intr.fx, 0.0, intr.cx, 0.0, 0.0, intr.fy, intr.cy, 0.0, 0.0, 0.0, 1.0, 0.0)
    return CameraInfoData(intr.width, intr.height, model, tuple(float(x) for x in d), tuple(map(float, k)),
                          tuple(map(float, r)), tuple(map(float, p)))
