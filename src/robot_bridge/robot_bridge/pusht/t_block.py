"""The T block of PushT and how a round pusher moves it on the table: planar quasi-static pushing, ROS-free.

The block's pose is its centroid and yaw in base_link; a disc pusher moves it only when it presses into the outline,
through the ellipsoidal limit-surface model with a friction cone (sticking or sliding), in substeps of at most 2 mm.
The model and its constants: docs/robot.md, "PushT on the twin".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from brace_common.planar import Pose2D, Vec, wrap_angle

SUBSTEP_M = 0.002
"""The longest pusher motion integrated in one quasi-static step (m)."""
PARTS = ("bar", "stem")
"""The T's two parts, in the order of `TShape.rects` (a push names the part it presses on)."""


@dataclass(frozen=True)
class Contact:
    """Where a point is with respect to the outline: signed distance (negative inside), the nearest outline point and
    the outline's outward normal there (block frame)."""

    distance: float
    point: Vec
    normal: Vec


@dataclass(frozen=True)
class Rect:
    """An axis-aligned rectangle of the block's frame: centre and half sizes (m)."""

    centre: Vec
    half: Vec


class TShape:
    """The T's outline in its own frame (centroid at the origin, the bar toward +y) and its pushing mechanics."""

    def __init__(self, bar_m: Vec = (0.10, 0.025), stem_m: Vec = (0.025, 0.075), height_m: float = 0.03) -> None:
        """`bar_m` and `stem_m`: (length along x, width along y) of the bar and (width, length) of the stem."""
        (bl, bw), (sw, sl) = bar_m, stem_m
        if min(bl, bw, sw, sl, height_m) <= 0 or sw >= bl:
            raise ValueError(f"a T needs positive sizes and a stem narrower than the bar, got bar {bar_m} stem {stem_m}")
        raw = [(-sw / 2, -sl), (sw / 2, -sl), (sw / 2, 0.0), (bl / 2, 0.0), (bl / 2, bw), (-bl / 2, bw), (-bl / 2, 0.0),
               (-sw / 2, 0.0)]
        rects = [Rect((0.0, bw / 2), (bl / 2, bw / 2)), Rect((0.0, -sl / 2), (sw / 2, sl / 2))]
        areas = [4 * r.half[0] * r.half[1] for r in rects]
        cy = sum(a * r.centre[1] for a, r in zip(areas, rects, strict=True)) / sum(areas)
        self.polygon: tuple[Vec, ...] = tuple((x, y - cy) for x, y in raw)     # counter-clockwise
        self.rects = tuple(Rect((r.centre[0], r.centre[1] - cy), r.half) for r in rects)
        self.area_m2 = sum(areas)
        self.height_m = height_m
        self.c = self._characteristic_length()

    def _characteristic_length(self) -> float:
        """Mean distance of the T's area from its centroid (m): m_max / f_max under uniform pressure."""
        step = 0.001
        total, weight = 0.0, 0.0
        for r in self.rects:
            xs = np.arange(r.centre[0] - r.half[0] + step / 2, r.centre[0] + r.half[0], step)
            ys = np.arange(r.centre[1] - r.half[1] + step / 2, r.centre[1] + r.half[1], step)
            gx, gy = np.meshgrid(xs, ys)
            total += float(np.hypot(gx, gy).sum())
            weight += gx.size
        return total / weight

    # ------------------------------------------------------------------ geometry

    def inside(self, p: Vec) -> bool:
        """Whether a block-frame point lies in the T."""
        return any(abs(p[0] - r.centre[0]) <= r.half[0] and abs(p[1] - r.centre[1]) <= r.half[1] for r in self.rects)

    def part(self, p: Vec) -> str:
        """The part (`PARTS`) whose rectangle holds block-frame point `p` or lies nearest it (outline points lie on
        exactly one: the corners where bar and stem meet are not on the outline)."""
        def gap(r: Rect) -> float:
            return max(abs(p[0] - r.centre[0]) - r.half[0], abs(p[1] - r.centre[1]) - r.half[1], 0.0)
        return min(zip(PARTS, self.rects, strict=True), key=lambda pr: gap(pr[1]))[0]

    def contact(self, p: Vec) -> Contact:
        """The signed distance of block-frame point `p` from the outline, with the nearest outline point and normal."""
        best = (math.inf, (0.0, 0.0), (0.0, 0.0))
        pts = self.polygon
        for a, b in zip(pts, pts[1:] + pts[:1], strict=True):
            ex, ey = b[0] - a[0], b[1] - a[1]
            length2 = ex * ex + ey * ey
            s = min(1.0, max(0.0, ((p[0] - a[0]) * ex + (p[1] - a[1]) * ey) / length2))
            q = (a[0] + s * ex, a[1] + s * ey)
            d = math.hypot(p[0] - q[0], p[1] - q[1])
            if d < best[0]:
                length = math.sqrt(length2)
                best = (d, q, (ey / length, -ex / length))      # outward normal of a counter-clockwise edge
        d, q, edge_normal = best
        if self.inside(p):
            return Contact(-d, q, edge_normal)
        if d > 1e-9:
            return Contact(d, q, ((p[0] - q[0]) / d, (p[1] - q[1]) / d))
        return Contact(0.0, q, edge_normal)

    def outline(self, spacing_m: float = 0.01, corner_margin_m: float = 0.004) -> list[tuple[Vec, Vec]]:
        """Points along the outline (block frame), away from corners, with their outward normals."""
        out = []
        pts = self.polygon
        for a, b in zip(pts, pts[1:] + pts[:1], strict=True):
            ex, ey = b[0] - a[0], b[1] - a[1]
            length = math.hypot(ex, ey)
            usable = length - 2 * corner_margin_m
            if usable <= 0:
                continue
            n = max(1, int(usable // spacing_m) + 1)
            for i in range(n):
                s = (corner_margin_m + (usable * (i + 0.5) / n)) / length
                out.append(((a[0] + s * ex, a[1] + s * ey), (ey / length, -ex / length)))
        return out

    # ------------------------------------------------------------------ mechanics

    def twist(self, r: Vec, n_in: Vec, v: Vec, mu: float) -> tuple[float, float, float]:
        """The block's motion (dx, dy, dyaw; block frame) when contact point `r` is pushed by displacement `v` along
        inward normal `n_in` (v . n_in > 0), friction coefficient `mu` at the contact."""
        t = (-n_in[1], n_in[0])
        c2 = self.c * self.c

        def body(f: Vec) -> tuple[float, float, float]:
            return (f[0], f[1], (r[0] * f[1] - r[1] * f[0]) / c2)

        def at_contact(w: tuple[float, float, float]) -> Vec:
            return (w[0] - w[2] * r[1], w[1] + w[2] * r[0])

        left = body((n_in[0] + mu * t[0], n_in[1] + mu * t[1]))
        right = body((n_in[0] - mu * t[0], n_in[1] - mu * t[1]))
        ul, ur = at_contact(left), at_contact(right)
        det = ul[0] * ur[1] - ul[1] * ur[0]
        if abs(det) > 1e-12:
            a = (v[0] * ur[1] - v[1] * ur[0]) / det
            b = (ul[0] * v[1] - ul[1] * v[0]) / det
            if a >= 0.0 and b >= 0.0:     # inside the motion cone: the contact sticks
                return tuple(a * x + b * y for x, y in zip(left, right, strict=True))  # type: ignore[return-value]
            edge, u = (left, ul) if b < 0.0 else (right, ur)
        else:                              # mu = 0: the cone is the normal alone
            edge, u = left, ul
        un = u[0] * n_in[0] + u[1] * n_in[1]
        k = (v[0] * n_in[0] + v[1] * n_in[1]) / un if un > 1e-12 else 0.0
        return (k * edge[0], k * edge[1], k * edge[2])

    def push(self, pose: Pose2D, start: Vec, end: Vec, radius: float, mu: float) -> tuple[Pose2D, bool]:
        """The block's pose after a disc pusher of `radius` moved from `start` to `end` (base_link), and whether it
        touched the block."""
        steps = max(1, math.ceil(math.dist(start, end) / SUBSTEP_M))
        touched = False
        prev = start
        for i in range(1, steps + 1):
            s = i / steps
            now = (start[0] + s * (end[0] - start[0]), start[1] + s * (end[1] - start[1]))
            pose, hit = self.substep(pose, prev, now, radius, mu)
            touched |= hit
            prev = now
        return pose, touched

    def substep(self, pose: Pose2D, before: Vec, after: Vec, radius: float, mu: float) -> tuple[Pose2D, bool]:
        """One quasi-static step: the pusher's penetration is undone along the contact normal, its sliding carried by
        friction."""
        q = pose.to_block(after)
        contact = self.contact(q)
        depth = radius - contact.distance
        if depth <= 0.0:
            return pose, False
        n_in = (-contact.normal[0], -contact.normal[1])
        q0 = pose.to_block(before)
        v = (q[0] - q0[0], q[1] - q0[1])
        along = v[0] * n_in[0] + v[1] * n_in[1]
        v_push = (v[0] - along * n_in[0] + depth * n_in[0], v[1] - along * n_in[1] + depth * n_in[1])
        dx, dy, dyaw = self.twist(contact.point, n_in, v_push, mu)
        wx, wy = pose.rotate((dx, dy))
        return Pose2D(pose.x + wx, pose.y + wy, wrap_angle(pose.yaw + dyaw)), True
