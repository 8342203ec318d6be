"""The geometric perceiver: where each catalogued object is in a colour + depth frame, and what changed, ROS-free.

`Perceiver` is what the verifier needs of any backend (`perceive` frames into a Perception without the plan, and the
shared `diff` in OmniAct's differencing schema); `GeometricPerceiver` finds objects by chromaticity and depth. How
it decides table, gripper, region, hidden or gone: docs/visual_verifier.md, "What it does".
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..orbbec.calibration import CameraModel

Color = tuple[int, int, int]
Point = tuple[float, float, float]

TABLE = "table"
GRIPPER = "gripper"
HIDDEN = "hidden"
GONE = "gone"
GRIPPER_EMPTY, GRIPPER_HOLDING, GRIPPER_UNKNOWN = "empty", "holding", "unknown"
"""VerifierVerdict.GRIPPER_*."""
BACKEND_GEOMETRIC = "geometric"
"""VerifierVerdict.backend of this perceiver's verdicts."""


@dataclass(frozen=True)
class Region:
    """A named place on the table (the bowl): centre (x, y) and radius in base_link (m)."""

    name: str
    x: float
    y: float
    radius: float

    def contains(self, p: Point) -> bool:
        """Whether `p` lies over the region."""
        return math.hypot(p[0] - self.x, p[1] - self.y) <= self.radius


@dataclass(frozen=True)
class Catalogue:
    """What the perceiver knows of the scene without the plan: object colours, the table, regions."""

    colors: Mapping[str, Color]
    table_z: float
    regions: tuple[Region, ...] = ()
    object_size_m: float = 0.045        # a typical object's width: the spot a hidden object is looked for in


@dataclass(frozen=True)
class Sighting:
    """One object in one frame: where it is (`place`: table, gripper, a region, hidden, gone) and the evidence."""

    name: str
    place: str
    pixels: int
    position: Optional[Point] = None    # median surface point (base_link, m) when seen
    spot: Optional[Point] = None        # not seen: where it was last seen (the spot looked at)
    spot_depth_mm: float = math.nan     # hidden / gone: the depth read at its last known spot ...
    expected_depth_mm: float = math.nan  # ... and the depth the object had there
    evidence: str = ""                  # the perceiver's own words for what it saw (the VLM's); '' = pixels and depth
    support: Optional[float] = None     # how much of the object the evidence saw (0..1) when the perceiver says so
    #                                     itself (the VLM: 1 for a place it names); None = pixels over StepCheck's

    @property
    def seen(self) -> bool:
        """Whether the object was found in the frame: on the table, in a region or in the gripper (its position is
        known only to a perceiver that measures it)."""
        return self.place not in (HIDDEN, GONE)

    def where(self) -> str:
        """'table (0.24, -0.04)', 'gripper', 'bowl', 'hidden', 'gone'."""
        if self.place == TABLE and self.position is not None:
            return f"table ({self.position[0]:.2f}, {self.position[1]:.2f})"
        return self.place


@dataclass(frozen=True)
class Perception:
    """Every catalogued object in one frame, and what the perceiver spent on it."""

    sightings: Mapping[str, Sighting]
    compare_ms: float = 0.0
    gripper: Optional[str] = None       # the perceiver's own word on the gripper (GRIPPER_*; the VLM's), else None
    notes: tuple[str, ...] = ()         # the perceiver's own notes on the scene (the VLM's)

    def place(self, name: str) -> str:
        """Where `name` is (gone when it is not catalogued)."""
        s = self.sightings.get(name)
        return s.place if s is not None else GONE


@dataclass(frozen=True)
class SceneDiff:
    """OmniAct's differencing schema between two perceptions (App. I), without the requested action."""

    observed_changes: tuple[str, ...] = ()
    objects_moved_or_removed: tuple[str, ...] = ()
    objects_remaining: tuple[str, ...] = ()
    gripper_or_arm_state: str = GRIPPER_UNKNOWN
    scene_change_notes: tuple[str, ...] = ()
    moved: Mapping[str, tuple[str, str]] = field(default_factory=dict)    # name -> (from, to) places
    removed: tuple[str, ...] = ()

    def state_update(self) -> str:
        """The planner-facing summary: the changes, then what stayed."""
        parts = list(self.observed_changes) or ["no visible change"]
        if self.objects_remaining:
            parts.append("unchanged: " + ", ".join(self.objects_remaining))
        return "; ".join(parts)


class PerceiverError(RuntimeError):
    """The perceiver could not say where the objects are (a server's error, timeout or unreadable answer); `reason`
    is a short counter key, the message says what happened."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Perceiver:
    """A perceiver backend: frames -> Perception without the plan (`perceive`), and the diff of two perceptions."""

    backend = ""
    """The VerifierVerdict.backend its verdicts carry."""

    def __init__(self, catalogue: Catalogue, move_distance_m: float = 0.025) -> None:
        self.catalogue = catalogue
        self.move_distance_m = move_distance_m

    def perceive(self, rgb: np.ndarray, depth_mm: np.ndarray, last: Optional[Perception] = None) -> Perception:
        """Where each catalogued object is in this frame (`last`: the previous perception); ValueError for frames it
        cannot take, PerceiverError when it cannot say."""
        raise NotImplementedError

    def close(self) -> None:
        """Give up what is in progress and release what the perceiver holds (nothing, unless it says otherwise)."""
        return None

    def describe(self) -> str:
        """One line for logs: the backend (and what it talks to)."""
        return self.backend

    def diff(self, before: Perception, after: Perception) -> SceneDiff:
        """What changed from `before` to `after` (objects not seen in either are left out)."""
        changes, moved_text, remaining = [], [], []
        notes: list[str] = []
        moved: dict[str, tuple[str, str]] = {}
        removed = []
        for name, now in after.sightings.items():
            then = before.sightings.get(name)
            if then is None or (not then.seen and now.place in (GONE, then.place)):
                continue
            if now.place == HIDDEN:
                notes.append(_hidden_note(now))
                continue
            if now.place == GONE:
                removed.append(name)
                changes.append(f"{name} is no longer visible at {then.where()}")
                moved_text.append(_gone_evidence(then, now))
                continue
            if self._same_place(then, now):
                remaining.append(f"{name} at {now.where()}")
                continue
            moved[name] = (then.place, now.place)
            changes.append(f"{name} moved from {then.where()} to {now.where()}")
            moved_text.append(_moved_evidence(then, now))
        notes += after.notes
        held = [n for n, s in after.sightings.items() if s.place == GRIPPER]
        if held:
            gripper = GRIPPER_HOLDING
            changes += [f"the gripper holds {n}" for n in held if before.place(n) != GRIPPER]
        elif after.gripper is not None:
            gripper = after.gripper
        elif notes:
            gripper = GRIPPER_UNKNOWN
        else:
            gripper = GRIPPER_EMPTY
        return SceneDiff(tuple(changes), tuple(moved_text), tuple(remaining), gripper, tuple(notes), moved,
                         tuple(removed))

    def _same_place(self, then: Sighting, now: Sighting) -> bool:
        if then.place != now.place:
            return False
        if then.place != TABLE or then.position is None or now.position is None:
            return True
        return math.dist(then.position[:2], now.position[:2]) <= self.move_distance_m


def _hidden_note(now: Sighting) -> str:
    if now.evidence:
        return f"{now.name} hidden: {now.evidence}"
    return (f"{now.name} hidden: its spot reads {now.spot_depth_mm:.0f} mm (median), nearer than the "
            f"{now.expected_depth_mm:.0f} mm it was at (something in front of it)")


def _gone_evidence(then: Sighting, now: Sighting) -> str:
    if now.evidence:
        return f"{now.name}: from {then.where()} to unknown; evidence: {now.evidence}"
    return (f"{now.name}: from {then.where()} to unknown; evidence: {then.pixels} px before, {now.pixels} px now; "
            f"its spot reads {now.spot_depth_mm:.0f} mm (median) where it was {now.expected_depth_mm:.0f} mm, mostly "
            "not nearer (nothing hides it)")


def _moved_evidence(then: Sighting, now: Sighting) -> str:
    if now.position is None:
        return f"{now.name}: from {then.where()} to {now.where()}; evidence: {now.evidence or 'none given'}"
    return (f"{now.name}: from {then.where()} to {now.where()}; evidence: {now.pixels} px at "
            f"({now.position[0]:.2f}, {now.position[1]:.2f}, {now.position[2]:.2f})")


@dataclass(frozen=True)
class GeometricTuning:
    """The geometric perceiver's thresholds (VerifierConfig's parameters of the same names, and two fixed ones)."""

    chroma_tolerance: float = 0.05   # an object's pixels are within this of its colour's chromaticity
    min_pixels: int = 10             # fewer pixels of an object's colour: not seen
    held_above_m: float = 0.06       # an object this far above the table top is in the gripper
    move_distance_m: float = 0.025   # an object on the table that moved this far moved
    occlusion_margin_m: float = 0.015  # an unseen object whose spot reads this much nearer than it was is hidden
    min_brightness: int = 60         # pixels whose r + g + b is below this are too dark to tell a colour
    hidden_share: float = 0.5        # the share of an unseen object's spot that must read nearer for it to be hidden


class GeometricPerceiver(Perceiver):
    """Colour + depth frames -> Perception, for one calibrated camera and catalogue."""

    backend = BACKEND_GEOMETRIC

    def __init__(self, camera: CameraModel, catalogue: Catalogue, tuning: Optional[GeometricTuning] = None) -> None:
        tuning = tuning or GeometricTuning()
        super().__init__(catalogue, tuning.move_distance_m)
        self.camera = camera
        self.chroma_tolerance = tuning.chroma_tolerance
        self.min_pixels = tuning.min_pixels
        self.held_above_m = tuning.held_above_m
        self.occlusion_margin_m = tuning.occlusion_margin_m
        self.min_brightness = tuning.min_brightness
        self.hidden_share = tuning.hidden_share
        self.references = {name: _chroma(np.asarray(color, dtype=np.float32)) for name, color in catalogue.colors.items()}
        # a pixel whose channels spread less than the least coloured object's (with margin) is grey: skipped
        self.min_spread = max(1, int(0.5 * min(max(c) - min(c) for c in catalogue.colors.values()))) \
            if catalogue.colors else 1
        h, w = camera.intrinsics.height, camera.intrinsics.width
        self.v, self.u = np.mgrid[0:h, 0:w].astype(np.float32) + 0.5

    def perceive(self, rgb: np.ndarray, depth_mm: np.ndarray, last: Optional[Perception] = None) -> Perception:
        """Where each object is in this frame; `last` gives the spots to look at for objects not seen now."""
        started = time.perf_counter()
        if rgb.shape[:2] != depth_mm.shape[:2] or rgb.shape[:2] != self.u.shape:
            raise ValueError(f"frames of {rgb.shape[:2]} / {depth_mm.shape[:2]} do not match the calibration's "
                             f"{self.u.shape}")
        # coloured pixels only: grey ones (table, floor, gripper) are most of the frame and no object's
        spread = rgb.max(axis=-1).astype(np.int16) - rgb.min(axis=-1)
        candidates = np.flatnonzero((spread >= self.min_spread) & (depth_mm.reshape(spread.shape) > 0))
        color = rgb.reshape(-1, 3)[candidates].astype(np.float32)
        total = color.sum(axis=-1)
        chroma = color[:, :2] / np.maximum(total, 1.0)[:, None]
        bright = total >= self.min_brightness
        u, v, depth = self.u.reshape(-1)[candidates], self.v.reshape(-1)[candidates], depth_mm.reshape(-1)[candidates]
        sightings = {}
        for name, ref in self.references.items():
            mask = bright & (np.abs(chroma - ref).max(axis=-1) <= self.chroma_tolerance)
            count = int(mask.sum())
            if count >= self.min_pixels:
                points = self.camera.back_project(u[mask], v[mask], depth[mask].astype(np.float64) / 1000)
                sightings[name] = self._seen(name, count, tuple(float(c) for c in np.median(points, axis=0)))
            else:
                sightings[name] = self._unseen(name, count, depth_mm, last.sightings.get(name) if last else None)
        return Perception(sightings, (time.perf_counter() - started) * 1000.0)

    def _seen(self, name: str, pixels: int, position: Point) -> Sighting:
        if position[2] > self.catalogue.table_z + self.held_above_m:
            place = GRIPPER
        else:
            place = next((r.name for r in self.catalogue.regions if r.contains(position)), TABLE)
        return Sighting(name, place, pixels, position)

    def _unseen(self, name: str, pixels: int, depth_mm: np.ndarray, last: Optional[Sighting]) -> Sighting:
        """Hidden when most of the object's last spot now reads nearer than the object did, else gone."""
        spot = None if last is None else last.position or last.spot
        if spot is None:
            return Sighting(name, GONE, pixels)
        uv, depth = self.camera.project(np.asarray([spot]))
        if not depth[0] > 0:
            return Sighting(name, GONE, pixels, spot=spot)
        radius = max(2.0, 0.5 * self.catalogue.object_size_m * self.camera.pixels_per_m(float(depth[0])))
        inside = (self.u - uv[0, 0]) ** 2 + (self.v - uv[0, 1]) ** 2 <= radius ** 2
        values = depth_mm[inside & (depth_mm > 0)]
        if values.size == 0:
            return Sighting(name, HIDDEN, pixels, spot=spot, expected_depth_mm=float(depth[0]) * 1000.0)
        reading, expected = float(np.median(values)), float(depth[0]) * 1000.0
        nearer = float(np.mean(values < expected - 1000.0 * self.occlusion_margin_m))
        place = HIDDEN if nearer >= self.hidden_share else GONE
        return Sighting(name, place, pixels, spot=spot, spot_depth_mm=reading, expected_depth_mm=expected)


def _chroma(color: np.ndarray) -> np.ndarray:
    return color[:2] / max(float(color.sum()), 1.0)
