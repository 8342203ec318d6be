"""The twin's camera: the tabletop scene rendered as colour and aligned depth from a calibrated camera, ROS-free.

Ray casting in numpy, one ray per pixel, flat colour with a Lambert term and seeded noise on colour and depth, so
two frames of a still scene differ as a real camera's do. What it draws: docs/piper_twin.md, "twin_world".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..orbbec.calibration import CameraModel

Color = tuple[int, int, int]
Point = tuple[float, float, float]

OBJECT_COLORS: dict[str, Color] = {"apple": (190, 30, 35), "banana": (235, 205, 45), "orange": (245, 135, 25),
                                   "t_block": (40, 150, 70)}
"""What each object of the twin's tasks looks like (RGB): the renderer paints them, the geometric verifier's
default catalogue looks for them."""
TABLE_COLOR: Color = (170, 168, 160)
FLOOR_COLOR: Color = (70, 70, 75)
BOWL_COLOR: Color = (60, 90, 175)
GRIPPER_COLOR: Color = (45, 45, 50)
HAND_COLOR: Color = (215, 165, 135)
TARGET_COLOR: Color = (200, 200, 200)
LIGHT = np.array([0.3, 0.2, 1.0]) / np.linalg.norm([0.3, 0.2, 1.0])
FLOOR_Z_M = -0.5


@dataclass(frozen=True)
class Sphere:
    """A round object (a fruit)."""

    centre: Point
    radius: float
    color: Color


@dataclass(frozen=True)
class Box:
    """A box: centre and half sizes (m) along its axes, turned `yaw` (rad) about the vertical (the T block's bars)."""

    centre: Point
    half: Point
    color: Color
    yaw: float = 0.0

    def corners(self) -> np.ndarray:
        """The eight corners in base_link."""
        c, s = np.cos(self.yaw), np.sin(self.yaw)
        local = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)]) * np.asarray(self.half)
        turned = np.stack([c * local[:, 0] - s * local[:, 1], s * local[:, 0] + c * local[:, 1], local[:, 2]], axis=1)
        return turned + np.asarray(self.centre)


@dataclass(frozen=True)
class Cylinder:
    """A solid vertical cylinder standing on z = `bottom` (the bowl)."""

    centre_xy: tuple[float, float]
    radius: float
    bottom: float
    top: float
    color: Color


@dataclass(frozen=True)
class Scene:
    """What the camera can see: the table top (z and x/y extent) and the things on and above it."""

    table_z: float
    table_x: tuple[float, float]
    table_y: tuple[float, float]
    shapes: Sequence[Sphere | Box | Cylinder] = field(default_factory=tuple)


def gripper_boxes(tool: Point, opening_m: float) -> list[Box]:
    """The gripper pointing down with its grasp centre at `tool`: two fingers `opening_m` apart, palm, wrist."""
    x, y, z = tool
    half_open = max(opening_m, 0.0) / 2.0
    fingers = [Box((x, y + s * (half_open + 0.005), z + 0.012), (0.008, 0.005, 0.025), GRIPPER_COLOR) for s in (-1, 1)]
    palm = Box((x, y, z + 0.047), (0.015, half_open + 0.012, 0.01), GRIPPER_COLOR)
    wrist = Box((x, y, z + 0.09), (0.015, 0.015, 0.033), GRIPPER_COLOR)
    return [*fingers, palm, wrist]


def hand_boxes(over: Point) -> list[Box]:
    """An operator's hand reaching in from the table's side (+y) and closing over `over`."""
    x, y, z = over
    return [Box((x, y, z + 0.02), (0.045, 0.04, 0.02), HAND_COLOR),
            Box((x, y + 0.2, z + 0.05), (0.03, 0.16, 0.025), HAND_COLOR)]


class SceneRenderer:
    """Renders Scenes from one camera: the pixel rays are computed once."""

    def __init__(self, camera: CameraModel, color_noise: float = 2.0, depth_noise_mm: float = 1.0, seed: int = 0):
        self.camera = camera
        self.rays = camera.pixel_rays().astype(np.float32)   # float32: millimetres at a metre are well inside it
        self.ray_norm2 = np.einsum("hwk,hwk->hw", self.rays, self.rays)
        self.origin = np.asarray(camera.position, dtype=float)
        self.color_noise = color_noise
        self.depth_noise_mm = depth_noise_mm
        self.rng = np.random.default_rng(seed)
        self._background: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

    def render(self, scene: Scene) -> tuple[np.ndarray, np.ndarray]:
        """(rgb (H, W, 3) uint8, depth (H, W) uint16 mm; 0 = no return) of `scene`."""
        best, rgb = (a.copy() for a in self._table(scene))
        for shape_ in scene.shapes:
            window = self._window(shape_)
            if window is None:
                continue
            rays, sub_best, sub_rgb = self.rays[window], best[window], rgb[window]
            if isinstance(shape_, Sphere):
                self._sphere(shape_, rays, self.ray_norm2[window], sub_best, sub_rgb)
            elif isinstance(shape_, Box):
                self._box(shape_, rays, sub_best, sub_rgb)
            else:
                self._cylinder(shape_, rays, sub_best, sub_rgb)
        if self.color_noise > 0:
            rgb += self.color_noise * self.rng.standard_normal(rgb.shape, dtype=np.float32)
        depth = np.where(np.isfinite(best), best * 1000.0, 0.0).astype(np.float32)
        if self.depth_noise_mm > 0:
            depth = np.where(depth > 0, depth + self.depth_noise_mm * self.rng.standard_normal(depth.shape,
                                                                                               dtype=np.float32), 0.0)
        return (np.clip(rgb + 0.5, 0, 255).astype(np.uint8),
                np.clip(depth + 0.5, 0, 65535).astype(np.uint16))

    def _table(self, scene: Scene) -> tuple[np.ndarray, np.ndarray]:
        """Depth and colour of the floor and the table alone (kept per table: they never move)."""
        key = (scene.table_z, tuple(scene.table_x), tuple(scene.table_y))
        if key not in self._background:
            shape = self.rays.shape[:2]
            best = np.full(shape, np.inf)
            rgb = np.zeros((*shape, 3), dtype=np.float32)
            self._plane(FLOOR_Z_M, None, None, FLOOR_COLOR, best, rgb)
            self._plane(scene.table_z, scene.table_x, scene.table_y, TABLE_COLOR, best, rgb)
            self._background = {key: (best, rgb)}
        return self._background[key]

    def _window(self, shape: Sphere | Box | Cylinder) -> Optional[tuple[slice, slice]]:
        """The image rows and columns the shape's bounding box covers (None: out of view or behind the camera)."""
        if isinstance(shape, Sphere):
            lo, hi = np.subtract(shape.centre, shape.radius), np.add(shape.centre, shape.radius)
        elif isinstance(shape, Box):
            corners = shape.corners()
            lo, hi = corners.min(axis=0), corners.max(axis=0)
        else:
            lo = np.array([shape.centre_xy[0] - shape.radius, shape.centre_xy[1] - shape.radius, shape.bottom])
            hi = np.array([shape.centre_xy[0] + shape.radius, shape.centre_xy[1] + shape.radius, shape.top])
        corners = np.array([[x, y, z] for x in (lo[0], hi[0]) for y in (lo[1], hi[1]) for z in (lo[2], hi[2])])
        uv, depth = self.camera.project(corners)
        if np.any(depth <= 1e-6):
            return (slice(None), slice(None))   # straddles the camera plane: test every pixel
        h, w = self.rays.shape[:2]
        u0, v0 = np.floor(uv.min(axis=0)).astype(int) - 1
        u1, v1 = np.ceil(uv.max(axis=0)).astype(int) + 1
        u0, v0, u1, v1 = max(u0, 0), max(v0, 0), min(u1, w), min(v1, h)
        if u0 >= u1 or v0 >= v1:
            return None
        return (slice(v0, v1), slice(u0, u1))

    # ------------------------------------------------------------------ intersections (t = depth in m)

    @staticmethod
    def _paint(t: np.ndarray, color: Color, shade, best: np.ndarray, rgb: np.ndarray) -> None:
        nearer = (t > 1e-6) & (t < best)
        best[nearer] = t[nearer]
        shade = np.broadcast_to(shade, t.shape)
        rgb[nearer] = np.asarray(color, dtype=float) * shade[nearer, None]

    def _plane(self, z: float, xs: Optional[tuple[float, float]], ys: Optional[tuple[float, float]], color: Color,
               best: np.ndarray, rgb: np.ndarray) -> None:
        dz = self.rays[..., 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(np.abs(dz) > 1e-12, (z - self.origin[2]) / dz, np.inf)
        if xs is not None and ys is not None:
            p = self.origin + self.rays * t[..., None]
            inside = (p[..., 0] >= xs[0]) & (p[..., 0] <= xs[1]) & (p[..., 1] >= ys[0]) & (p[..., 1] <= ys[1])
            t = np.where(inside, t, np.inf)
        self._paint(t, color, 1.0, best, rgb)

    def _sphere(self, s: Sphere, rays: np.ndarray, a: np.ndarray, best: np.ndarray, rgb: np.ndarray) -> None:
        oc = self.origin - np.asarray(s.centre)
        b = rays @ oc
        disc = b * b - a * (oc @ oc - s.radius * s.radius)
        hit = disc >= 0
        t = np.where(hit, (-b - np.sqrt(np.maximum(disc, 0.0))) / a, np.inf)
        p = self.origin + rays * np.where(hit, t, 0.0)[..., None]
        normal = (p - np.asarray(s.centre)) / s.radius
        shade = 0.55 + 0.45 * np.clip(normal @ LIGHT, 0.0, 1.0)
        self._paint(t, s.color, shade, best, rgb)

    def _box(self, box: Box, rays: np.ndarray, best: np.ndarray, rgb: np.ndarray) -> None:
        half = np.asarray(box.half)
        origin = self.origin - np.asarray(box.centre)       # the box's frame: centred, turned back by its yaw
        if box.yaw:
            c, s = np.cos(box.yaw), np.sin(box.yaw)
            turn = np.array([[c, s, 0.0], [-s, c, 0.0], [0.0, 0.0, 1.0]], dtype=rays.dtype)
            rays, origin = rays @ turn.T, turn @ origin
        with np.errstate(divide="ignore", invalid="ignore"):
            inv = 1.0 / rays
            t1, t2 = (-half - origin) * inv, (half - origin) * inv
        near = np.nanmax(np.minimum(t1, t2), axis=-1)
        far = np.nanmin(np.maximum(t1, t2), axis=-1)
        t = np.where((far >= np.maximum(near, 0.0)) & np.isfinite(near), near, np.inf)
        with np.errstate(invalid="ignore"):
            top = np.abs(origin[2] + rays[..., 2] * t - half[2]) < 1e-6   # the lit top face
        self._paint(t, box.color, np.where(top, 1.0, 0.8), best, rgb)

    def _cylinder(self, c: Cylinder, rays: np.ndarray, best: np.ndarray, rgb: np.ndarray) -> None:
        dz = rays[..., 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            t_cap = np.where(np.abs(dz) > 1e-12, (c.top - self.origin[2]) / dz, np.inf)
        with np.errstate(invalid="ignore"):
            p = self.origin + rays * t_cap[..., None]
        on_cap = (p[..., 0] - c.centre_xy[0]) ** 2 + (p[..., 1] - c.centre_xy[1]) ** 2 <= c.radius ** 2
        t_cap = np.where(on_cap, t_cap, np.inf)
        ox, oy = self.origin[0] - c.centre_xy[0], self.origin[1] - c.centre_xy[1]
        dx, dy = rays[..., 0], rays[..., 1]
        a = dx * dx + dy * dy
        b = dx * ox + dy * oy
        disc = b * b - a * (ox * ox + oy * oy - c.radius * c.radius)
        with np.errstate(divide="ignore", invalid="ignore"):
            t_side = np.where((disc >= 0) & (a > 1e-12), (-b - np.sqrt(np.maximum(disc, 0.0))) / a, np.inf)
        with np.errstate(invalid="ignore"):
            z = self.origin[2] + dz * t_side
        t_side = np.where((z >= c.bottom) & (z <= c.top), t_side, np.inf)
        self._paint(np.minimum(t_cap, t_side), c.color, np.where(t_cap <= t_side, 1.0, 0.75), best, rgb)
