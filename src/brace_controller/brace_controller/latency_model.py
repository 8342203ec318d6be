"""Online model of replanning latency as a function of planner-input tokens.

Beyond the paper: latency_ms ~ a + b N + c N^2 is fitted by least squares on
the most recent calls, and the `tail_quantile` of the fit residuals is added
as a tail margin, so `predict_p95(N)` estimates a high percentile rather than
the mean. `budget_for(target_ms, ...)` returns the largest N whose predicted
tail latency stays within the target. The fit is constrained to be
non-decreasing in N (b, c >= 0), which makes that inverse a closed form; the
work is done when a call is recorded, so budget queries are O(1).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Optional

import numpy as np


class LatencyModel:
    """Sliding-window fit of latency vs tokens after compression, with a tail margin."""

    def __init__(self, window: int = 256, min_samples: int = 8, tail_quantile: float = 0.95):
        if min_samples < 3 or window < min_samples:
            raise ValueError("need 3 <= min_samples <= window")
        self.window = window
        self.min_samples = min_samples
        self.tail_quantile = tail_quantile
        self._tokens: deque[float] = deque(maxlen=window)
        self._latency: deque[float] = deque(maxlen=window)
        self.coef: tuple[float, float, float] = (0.0, 0.0, 0.0)
        self.margin_ms = 0.0

    @property
    def ready(self) -> bool:
        """True once enough calls have been seen to trust the fit."""
        return len(self._tokens) >= self.min_samples

    @property
    def samples(self) -> int:
        """Calls currently in the window."""
        return len(self._tokens)

    def observe(self, tokens_after: int, latency_ms: float) -> None:
        """Add one finished call and refit. Non-finite or negative values are ignored."""
        if tokens_after < 0 or not math.isfinite(latency_ms) or latency_ms < 0:
            return
        self._tokens.append(float(tokens_after))
        self._latency.append(float(latency_ms))
        if self.ready:
            self._fit()

    def _fit(self) -> None:
        n = np.fromiter(self._tokens, dtype=float)
        y = np.fromiter(self._latency, dtype=float)
        # Scale N to keep the normal equations well conditioned for N in the thousands.
        scale = max(float(n.max()), 1.0)
        x = n / scale
        coef = (float(np.median(y)), 0.0, 0.0)
        for columns in ((0, 1, 2), (0, 1), (0, 2)):
            design = np.stack([x**p for p in columns], axis=1)
            sol, *_ = np.linalg.lstsq(design, y, rcond=None)
            if all(v >= 0.0 for p, v in zip(columns, sol, strict=True) if p > 0):
                full = dict(zip(columns, sol, strict=True))
                coef = (float(full.get(0, 0.0)), float(full.get(1, 0.0)) / scale, float(full.get(2, 0.0)) / scale**2)
                break
        self.coef = coef
        residuals = y - self.predict_mean(n)
        self.margin_ms = max(0.0, float(np.quantile(residuals, self.tail_quantile)))

    def predict_mean(self, tokens):  # accepts a float or an ndarray
        """Fitted latency a + bN + cN^2 (ms)."""
        a, b, c = self.coef
        return a + b * tokens + c * tokens * tokens

    def predict_p95(self, tokens: float) -> float:
        """Fitted latency plus the tail margin (ms); NaN before the model is ready."""
        if not self.ready:
            return math.nan
        return float(self.predict_mean(tokens)) + self.margin_ms

    def budget_for(self, target_ms: float, low: int, high: int) -> Optional[int]:
        """Largest N in [low, high] with predict_p95(N) <= target_ms.

        Returns `high` before the model is ready, and None when even `low` is
        predicted to miss the target.
        """
        if not self.ready:
            return high
        a, b, c = self.coef
        room = target_ms - a - self.margin_ms
        if self.predict_p95(low) > target_ms:
            return None
        if b <= 0.0 and c <= 0.0:
            return high
        # Positive root of c N^2 + b N - room = 0 in the form that stays exact as c -> 0.
        n_max = 2.0 * room / (b + math.sqrt(b * b + 4.0 * c * room))
        return int(max(low, min(high, math.floor(n_max))))
