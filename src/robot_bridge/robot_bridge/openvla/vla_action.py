"""OpenVLA's 7-D action, from generated tokens to an end-effector step of the arm (pure functions, no ROS).

`[dx, dy, dz, droll, dpitch, dyaw, gripper]`: tokens to normalized values, un-normalisation with a dataset's
statistics (both done by the server and `predict_action`; here for a raw-token decoder and tests), scaling and
clipping to the arm (`to_arm`, `GripperMapping`) and anchoring. The numbers: docs/openvla_executor.md, "The action
pipeline (units)".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ACTION_DIM = 7
"""dx, dy, dz, droll, dpitch, dyaw, gripper."""
N_BINS = 256
"""Action bins per dimension (OpenVLA's `n_action_bins`)."""
VOCAB_SIZE = 32000
"""OpenVLA-7B's language vocabulary without the embedding pad (32,064 - 64)."""
GRIPPER_MODES = ("threshold", "continuous")


class ActionError(ValueError):
    """An action that cannot be turned into an arm command; `reason` is a short counter key."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def bin_edges(n_bins: int = N_BINS, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    """The `n_bins` uniform bin edges over [low, high] (OpenVLA's `bins`)."""
    if n_bins < 2 or not low < high:
        raise ValueError(f"need at least 2 bins over a non-empty interval, got {n_bins} over [{low}, {high}]")
    return np.linspace(low, high, n_bins)


def bin_centers(n_bins: int = N_BINS, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    """The `n_bins - 1` midpoints between consecutive bin edges (the values actions decode to)."""
    edges = bin_edges(n_bins, low, high)
    return (edges[:-1] + edges[1:]) / 2.0


def tokens_to_normalized(token_ids: Sequence[int] | np.ndarray, vocab_size: int = VOCAB_SIZE,
                         n_bins: int = N_BINS, strict: bool = True) -> np.ndarray:
    """Normalized actions in [-1, 1] for generated action token ids.

    Id `vocab_size - k` decodes to bin center `k - 1`, clipped to the last center. With `strict`,
    an id outside the action tokens [vocab_size - n_bins, vocab_size) raises ActionError (the model
    did not produce an action); without it such ids are clipped onto the first / last center, as
    the model's own decoder does.
    """
    ids = np.asarray(token_ids)
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise ActionError("bad_tokens", f"token ids must be a 1-D integer array, got {ids.dtype} of shape {ids.shape}")
    outside = (ids < vocab_size - n_bins) | (ids >= vocab_size)
    if strict and outside.any():
        raise ActionError("not_action_tokens", f"token ids {ids[outside].tolist()} are not among the last {n_bins} "
                          f"of a {vocab_size}-token vocabulary")
    centers = bin_centers(n_bins)
    index = np.clip(vocab_size - ids.astype(np.int64) - 1, 0, centers.shape[0] - 1)
    return centers[index]


def unnormalize(normalized: Sequence[float] | np.ndarray, q01: Sequence[float], q99: Sequence[float],
                mask: Sequence[bool] | None = None) -> np.ndarray:
    """Map [-1, 1] onto [q01, q99] where `mask` is true; masked-out dimensions pass through unchanged."""
    values = np.asarray(normalized, dtype=np.float64)
    low, high = np.asarray(q01, dtype=np.float64), np.asarray(q99, dtype=np.float64)
    keep = np.ones(values.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    if not values.shape == low.shape == high.shape == keep.shape:
        raise ActionError("bad_statistics", f"action {values.shape}, q01 {low.shape}, q99 {high.shape} and mask "
                          f"{keep.shape} must have one shape")
    return np.where(keep, 0.5 * (values + 1.0) * (high - low) + low, values)


REAL_KINDS = "iuf"
"""numpy dtype kinds of real numbers (signed, unsigned, floating): not bool, complex, text, objects or dates."""


def _items(items: list, dim: int) -> np.ndarray:
    if len(items) != dim or any(isinstance(v, (list, tuple, dict, np.ndarray)) for v in items):
        raise ActionError("bad_shape", f"the action is not {dim} numbers: {str(items)[:120]}")
    for value in items:
        if isinstance(value, (complex, np.complexfloating)):
            raise ActionError("not_real", f"the action holds a complex value: {str(items)[:120]}")
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ActionError("not_numeric", f"the action holds a {type(value).__name__}: {str(items)[:120]}")
    try:
        return np.array([float(v) for v in items], dtype=np.float64)
    except OverflowError:  # an integer beyond float range
        raise ActionError("non_finite", f"the action has a value beyond float range: {str(items)[:120]}") from None


def check_action(action, dim: int = ACTION_DIM) -> np.ndarray:
    """The action as a float64 array of shape (dim,) of finite real numbers; ActionError with the reason otherwise.

    Reasons: `not_real` (complex values: json_numpy carries complex dtypes, and a cast would drop the imaginary
    part without a word), `not_numeric` (booleans, strings, None, objects, dates: nothing numpy would quietly
    turn into a number counts as one), `bad_shape` (not a flat sequence of `dim`), `non_finite` (NaN,
    infinity, or a value beyond float range).
    """
    if isinstance(action, np.ndarray):
        kind = action.dtype.kind
        if kind == "c":
            raise ActionError("not_real", f"the action is complex ({action.dtype}): {str(action.tolist())[:120]}")
        if kind == "O":
            if action.ndim != 1:
                raise ActionError("bad_shape", f"the action has shape {action.shape}, expected ({dim},)")
            values = _items(action.tolist(), dim)
        elif kind not in REAL_KINDS:
            raise ActionError("not_numeric", f"the action's dtype {action.dtype} is not a real number type")
        elif action.shape != (dim,):
            raise ActionError("bad_shape", f"the action has shape {action.shape}, expected ({dim},)")
        else:
            with np.errstate(over="ignore"):  # a longdouble beyond float64 becomes inf: non_finite below
                values = action.astype(np.float64)
    elif isinstance(action, (list, tuple)):
        values = _items(list(action), dim)
    else:
        raise ActionError("bad_shape", f"the action is a {type(action).__name__}, not {dim} numbers: "
                          f"{str(action)[:80]}")
    if not np.isfinite(values).all():
        raise ActionError("non_finite", f"the action has non-finite values: {values.tolist()}")
    return values


@dataclass(frozen=True)
class ArmScaling:
    """From the model's action units (m, rad of its training data) to the arm's: scale, then clip per axis."""

    translation_scale: float = 1.0
    rotation_scale: float = 1.0
    max_translation_m: tuple[float, float, float] = (0.02, 0.02, 0.02)
    max_rotation_rad: tuple[float, float, float] = (0.1, 0.1, 0.1)

    def validate(self) -> None:
        """ValueError naming the first invalid field."""
        for name in ("translation_scale", "rotation_scale"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0.0:
                raise ValueError(f"{name}: {value} must be a positive finite number")
        for name in ("max_translation_m", "max_rotation_rad"):
            limits = getattr(self, name)
            if len(limits) != 3 or not all(math.isfinite(v) and v >= 0.0 for v in limits):
                raise ValueError(f"{name}: {list(limits)} must be three finite non-negative limits (x, y, z)")


@dataclass(frozen=True)
class GripperMapping:
    """Which action value means open, and how it becomes an opening in metres.

    `open_value` / `closed_value` are the action values of a fully open / closed gripper: 1 / 0 in
    OpenVLA's training mixture (BridgeData V2 after its transforms); a dataset with the inverse
    convention sets them the other way round (e.g. -1 / +1). The openness (0 = closed, 1 = open)
    is the action's position between them, clipped. `threshold` mode commands `open_m` when the
    openness is at least `threshold` and `closed_m` otherwise; `continuous` mode interpolates.
    """

    mode: str = "threshold"
    open_value: float = 1.0
    closed_value: float = 0.0
    threshold: float = 0.5
    open_m: float = 0.07
    closed_m: float = 0.0

    def validate(self) -> None:
        """ValueError naming the first invalid field."""
        if self.mode not in GRIPPER_MODES:
            raise ValueError(f"mode: '{self.mode}' is not one of {list(GRIPPER_MODES)}")
        for name in ("open_value", "closed_value", "threshold", "open_m", "closed_m"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name}: {getattr(self, name)} is not finite")
        if self.open_value == self.closed_value:
            raise ValueError(f"open_value: equals closed_value ({self.closed_value})")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold: {self.threshold} is outside [0, 1]")
        if not 0.0 <= self.closed_m < self.open_m:
            raise ValueError(f"open_m: needs 0 <= closed_m ({self.closed_m}) < open_m ({self.open_m})")

    def openness(self, value: float) -> float:
        """0 (closed) .. 1 (open): where `value` lies between closed_value and open_value, clipped."""
        fraction = (value - self.closed_value) / (self.open_value - self.closed_value)
        return min(1.0, max(0.0, fraction))

    def opening_m(self, value: float) -> float:
        """The gripper opening (m) an action's gripper value commands."""
        openness = self.openness(value)
        if self.mode == "threshold":
            return self.open_m if openness >= self.threshold else self.closed_m
        return self.closed_m + openness * (self.open_m - self.closed_m)


@dataclass(frozen=True)
class ArmAction:
    """One end-effector step in the arm's units: what EndEffectorDelta carries."""

    translation_m: tuple[float, float, float]
    rotation_rad: tuple[float, float, float]
    gripper_m: float
    clipped: bool  # a translation or rotation component was cut to its limit


def _clip(values: np.ndarray, limits: Sequence[float]) -> tuple[tuple[float, float, float], bool]:
    bound = np.asarray(limits, dtype=np.float64)
    clipped = np.clip(values, -bound, bound)
    return (float(clipped[0]), float(clipped[1]), float(clipped[2])), bool(np.any(clipped != values))


def anchored(arm: ArmAction, observed_xyz: Sequence[float], now_xyz: Sequence[float],
             scaling: ArmScaling) -> ArmAction:
    """`arm` re-expressed from where the end effector is now: the VLA computed its step from the pose it observed,
    and the arm applies a step to the pose it measures when the step arrives, so whatever the arm moved in between
    (the previous step, still under way when the VLA looked) is taken off; clipped to the per-axis limit again."""
    moved = np.subtract(np.asarray(now_xyz, dtype=np.float64), np.asarray(observed_xyz, dtype=np.float64))
    translation, cut = _clip(np.asarray(arm.translation_m, dtype=np.float64) - moved, scaling.max_translation_m)
    return ArmAction(translation, arm.rotation_rad, arm.gripper_m, arm.clipped or cut)


def to_arm(action, scaling: ArmScaling, gripper: GripperMapping) -> ArmAction:
    """Scale and clip an un-normalized 7-D action into an arm step (ActionError for a malformed action)."""
    values = check_action(action)
    translation, cut_t = _clip(values[0:3] * scaling.translation_scale, scaling.max_translation_m)
    rotation, cut_r = _clip(values[3:6] * scaling.rotation_scale, scaling.max_rotation_rad)
    return ArmAction(translation, rotation, gripper.opening_m(float(values[6])), cut_t or cut_r)
