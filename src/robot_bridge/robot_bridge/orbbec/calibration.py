"""A calibrated camera in the arm's frame, ROS-free: intrinsics from a calibration file, its pose in base_link.

`load_calibration` reads ROS's camera calibration YAML plus a `pose_in_base_link` mapping; `CameraModel` projects
base_link points to pixels and back-projects pixels with depth (no distortion). The file's format and why
distortion is left alone: docs/orbbec_camera.md, "Calibration files".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from brace_common.config import ConfigError, resolve_path

from .frame_convert import Intrinsics

DEFAULT_UP = (0.0, 0.0, 1.0)
"""base_link's up: the image's 'up' is the projection of it (the camera does not roll)."""


@dataclass(frozen=True)
class CameraModel:
    """A pinhole camera at `position` looking at `look_at` (base_link, m), with `intrinsics`."""

    intrinsics: Intrinsics
    position: tuple[float, float, float]
    look_at: tuple[float, float, float]

    def __post_init__(self) -> None:
        forward = np.subtract(self.look_at, self.position)
        if not np.all(np.isfinite(forward)) or np.linalg.norm(forward) < 1e-6:
            raise ValueError(f"the camera at {self.position} must look at another point, not {self.look_at}")
        if np.linalg.norm(np.cross(forward, DEFAULT_UP)) < 1e-6 * np.linalg.norm(forward):
            raise ValueError("the camera must not look straight up or down (its roll would be undefined)")

    @property
    def rotation(self) -> np.ndarray:
        """Columns: the optical frame's x (right), y (down), z (forward) in base_link."""
        z = np.subtract(self.look_at, self.position).astype(float)
        z /= np.linalg.norm(z)
        x = np.cross(z, DEFAULT_UP)
        x /= np.linalg.norm(x)
        y = np.cross(z, x)
        return np.stack([x, y, z], axis=1)

    def pixel_rays(self) -> np.ndarray:
        """(H, W, 3) base_link directions through each pixel centre, scaled so that 1 along one is 1 m of depth."""
        intr = self.intrinsics
        u, v = np.meshgrid(np.arange(intr.width) + 0.5, np.arange(intr.height) + 0.5)
        cam = np.stack([(u - intr.cx) / intr.fx, (v - intr.cy) / intr.fy, np.ones_like(u)], axis=-1)
        return cam @ self.rotation.T

    def project(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(N, 3) base_link points -> ((N, 2) pixel coordinates u, v; (N,) depth in m, <= 0 behind the camera)."""
        cam = (np.atleast_2d(points) - np.asarray(self.position)) @ self.rotation
        depth = cam[:, 2]
        safe = np.where(depth > 1e-9, depth, np.nan)
        intr = self.intrinsics
        return np.stack([intr.fx * cam[:, 0] / safe + intr.cx, intr.fy * cam[:, 1] / safe + intr.cy], axis=1), depth

    def back_project(self, u: np.ndarray, v: np.ndarray, depth_m: np.ndarray) -> np.ndarray:
        """Pixels (u, v: pixel centres at +0.5) with depth (m) -> (N, 3) base_link points."""
        intr = self.intrinsics
        cam = np.stack([(np.asarray(u) - intr.cx) / intr.fx * depth_m, (np.asarray(v) - intr.cy) / intr.fy * depth_m,
                        np.asarray(depth_m, dtype=float)], axis=-1)
        return cam @ self.rotation.T + np.asarray(self.position)

    def pixels_per_m(self, depth_m: float) -> float:
        """How many pixels one metre spans at `depth_m` (the mean focal length over the depth)."""
        return 0.5 * (self.intrinsics.fx + self.intrinsics.fy) / max(depth_m, 1e-6)


def _matrix(doc: dict, key: str, rows: int, cols: int, path: str) -> list[float]:
    entry = doc.get(key)
    data = entry.get("data") if isinstance(entry, dict) else None
    if not isinstance(data, list) or len(data) != rows * cols or \
            not all(isinstance(x, (int, float)) and math.isfinite(x) for x in data):
        raise ConfigError("camera_calibration", f"{path}: '{key}' needs data of {rows}x{cols} finite numbers")
    return [float(x) for x in data]


def _point(pose: dict, key: str, path: str) -> tuple[float, float, float]:
    value = pose.get(key)
    if not isinstance(value, list) or len(value) != 3 or \
            not all(isinstance(x, (int, float)) and math.isfinite(x) for x in value):
        raise ConfigError("camera_calibration", f"{path}: pose_in_base_link.{key} must be 3 finite numbers (m)")
    return (float(value[0]), float(value[1]), float(value[2]))


def load_calibration(path: str) -> CameraModel:
    """The camera of a calibration file ('package://' allowed); ConfigError naming camera_calibration if it is bad."""
    resolved = resolve_path(path)
    try:
        doc = yaml.safe_load(Path(resolved).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError("camera_calibration", f"{path}: {exc}") from None
    if not isinstance(doc, dict):
        raise ConfigError("camera_calibration", f"{path}: not a camera calibration mapping")
    width, height = doc.get("image_width"), doc.get("image_height")
    if not (isinstance(width, int) and isinstance(height, int) and 0 < width <= 8192 and 0 < height <= 8192):
        raise ConfigError("camera_calibration", f"{path}: image_width / image_height must be 1..8192 pixels")
    k = _matrix(doc, "camera_matrix", 3, 3, path)
    distortion = doc.get("distortion_coefficients", {}).get("data", [])
    if any(abs(float(x)) > 0 for x in distortion):
        raise ConfigError("camera_calibration", f"{path}: distortion is not modelled here; the coefficients must be "
                          "0 (an undistorted or rectified stream)")
    if k[0] <= 0 or k[4] <= 0:
        raise ConfigError("camera_calibration", f"{path}: focal lengths must be positive")
    pose = doc.get("pose_in_base_link")
    if not isinstance(pose, dict):
        raise ConfigError("camera_calibration", f"{path}: needs pose_in_base_link (position, look_at)")
    intr = Intrinsics(width, height, k[0], k[4], k[2], k[5], model="plumb_bob")
    try:
        return CameraModel(intr, _point(pose, "position", path), _point(pose, "look_at", path))
    except ValueError as exc:
        raise ConfigError("camera_calibration", f"{path}: {exc}") from None
