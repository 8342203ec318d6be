"""Online model of a replanning call's latency from what sets it (beyond the paper).

A call's cost is the sum of its phases (paper Sec. 3.4), and each phase is
driven by something the controller knows or chooses:

  context_compress ~ c0 + c1 N                       rendering and scoring the whole context
  prefill          ~ p0 + p1 N + p2 A + p3 N^2 + p4 A^2   A = min(N, B_t): tokens the model keeps;
                                                     N for the layers before the first cut, attention quadratic
  decode           ~ d0 + d1 A + d_mode              the plan's length follows the mode; attention reads A keys
  queue            the backlog of calls in flight (predicted by the controller, not fitted here)

N is the context before compression, B_t the budget the controller picks. Each
phase is fitted by least squares on the most recent calls with every
coefficient kept non-negative (the best-fitting subset of terms with a
non-negative solution), so every prediction is non-decreasing in N and in B_t.
The `tail_quantile` of the residuals of the whole call is added as a tail
margin, so `predict_p95` estimates a high percentile rather than the mean, and
`budget_for(target, N, mode)` is the largest B_t whose predicted tail latency
stays within the target. With in-model E-RECAP run in one stage the fit finds a
large N term and a small A term: lowering B_t then buys little, and the
controller can see that in the coefficients.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from dataclasses import dataclass
from typing import Optional

import numpy as np

from brace_common.vocabulary import Phase

_SCALE = 1000.0  # tokens are fitted in thousands to keep the normal equations well conditioned


@dataclass(frozen=True)
class CallSample:
    """One finished call as the latency model sees it (ms; the queue wait left out)."""

    tokens_before: int
    tokens_after: int
    mode: int
    compress_ms: float
    prefill_ms: float
    decode_ms: float
    total_ms: float

    def valid(self) -> bool:
        """Finite, non-negative values."""
        values = (self.compress_ms, self.prefill_ms, self.decode_ms, self.total_ms)
        return self.tokens_before >= 0 and self.tokens_after >= 0 and all(math.isfinite(v) and v >= 0 for v in values)


def _nonneg_fit(features: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with non-negative slopes: the best subset of columns (column 0, the intercept, always in)."""
    k = features.shape[1]
    best, best_err = np.zeros(k), math.inf
    best[0] = float(np.median(y))
    for size in range(k):
        for subset in itertools.combinations(range(1, k), size):
            cols = (0, *subset)
            sol, *_ = np.linalg.lstsq(features[:, cols], y, rcond=None)
            if any(v < 0.0 for v in sol[1:]):
                continue
            coef = np.zeros(k)
            coef[list(cols)] = sol
            err = float(np.sum((features @ coef - y) ** 2))
            if err < best_err - 1e-9:
                best, best_err = coef, err
    return best


class LatencyModel:
    """Sliding-window, per-phase fit of call latency in N, A = min(N, B_t) and the mode, with a tail margin."""

    def __init__(self, window: int = 256, min_samples: int = 8, tail_quantile: float = 0.95):
        if min_samples < 3 or window < min_samples:
            raise ValueError("need 3 <= min_samples <= window")
        self.window = window
        self.min_samples = min_samples
        self.tail_quantile = tail_quantile
        self._samples: deque[CallSample] = deque(maxlen=window)
        self.compress_coef = np.zeros(2)
        self.prefill_coef = np.zeros(5)
        self.decode_coef = np.zeros(2)
        self.mode_decode_ms: dict[int, float] = {}
        self.margin_ms = 0.0
        self._cache()

    @property
    def ready(self) -> bool:
        """True once enough calls have been seen to trust the fit."""
        return len(self._samples) >= self.min_samples

    @property
    def samples(self) -> int:
        """Calls currently in the window."""
        return len(self._samples)

    def observe(self, sample: CallSample) -> None:
        """Add one finished call and refit. Samples with non-finite or negative values are ignored."""
        if not sample.valid():
            return
        self._samples.append(sample)
        if self.ready:
            self._fit()

    @staticmethod
    def _prefill_features(n: np.ndarray, a: np.ndarray) -> np.ndarray:
        n, a = n / _SCALE, a / _SCALE
        return np.stack([np.ones_like(n), n, a, n * n, a * a], axis=1)

    def _fit(self) -> None:
        s = list(self._samples)
        n = np.array([x.tokens_before for x in s], dtype=float)
        a = np.array([x.tokens_after for x in s], dtype=float)
        ones = np.ones_like(n)
        self.compress_coef = _nonneg_fit(np.stack([ones, n / _SCALE], axis=1), np.array([x.compress_ms for x in s]))
        self.prefill_coef = _nonneg_fit(self._prefill_features(n, a), np.array([x.prefill_ms for x in s]))
        # Decode: a shared term in A plus a per-mode offset (the mode sets how long a plan is).
        decode = np.array([x.decode_ms for x in s])
        self.decode_coef = _nonneg_fit(np.stack([ones, a / _SCALE], axis=1), decode)
        residual = decode - np.stack([ones, a / _SCALE], axis=1) @ self.decode_coef
        modes = np.array([x.mode for x in s])
        self.mode_decode_ms = {int(m): float(np.mean(residual[modes == m])) for m in np.unique(modes)}
        self._cache()
        predicted = np.array([self.predict_mean(x.tokens_before, x.tokens_after, x.mode) for x in s])
        total = np.array([x.total_ms for x in s])
        self.margin_ms = max(0.0, float(np.quantile(total - predicted, self.tail_quantile)))

    def _cache(self) -> None:
        """The fitted coefficients as plain floats: a decision predicts a call a dozen times (budget_for)."""
        self._compress = tuple(float(v) for v in self.compress_coef)
        self._prefill = tuple(float(v) for v in self.prefill_coef)
        self._decode = tuple(float(v) for v in self.decode_coef)
        offsets = list(self.mode_decode_ms.values())
        self._default_offset = sum(offsets) / len(offsets) if offsets else 0.0

    def _phases(self, tokens_before: float, tokens_after: float, mode: int) -> tuple[float, float, float]:
        n = float(tokens_before) / _SCALE
        a = min(float(tokens_after), float(tokens_before)) / _SCALE
        c0, c1 = self._compress
        p0, p1, p2, p3, p4 = self._prefill
        d0, d1 = self._decode
        offset = self.mode_decode_ms.get(int(mode), self._default_offset)
        return (max(0.0, c0 + c1 * n), max(0.0, p0 + p1 * n + p2 * a + p3 * n * n + p4 * a * a),
                max(0.0, d0 + d1 * a + offset))

    def predict_phases(self, tokens_before: float, tokens_after: float, mode: int) -> dict[str, float]:
        """Predicted mean milliseconds of each fitted phase."""
        compress, prefill, decode = self._phases(tokens_before, tokens_after, mode)
        return {Phase.CONTEXT_COMPRESS.value: compress, Phase.PREFILL.value: prefill, Phase.DECODE.value: decode}

    def predict_mean(self, tokens_before: float, tokens_after: float, mode: int = 0) -> float:
        """Predicted mean latency of a call (ms, queue excluded)."""
        return sum(self._phases(tokens_before, tokens_after, mode))

    def predict_p95(self, tokens_before: float, tokens_after: float, mode: int = 0) -> float:
        """Predicted mean plus the tail margin (ms); NaN before the model is ready."""
        if not self.ready:
            return math.nan
        return sum(self._phases(tokens_before, tokens_after, mode)) + self.margin_ms

    def budget_for(self, target_ms: float, tokens_before: int, mode: int, low: int, high: int) -> Optional[int]:
        """Largest B_t in [low, high] with predict_p95(N, min(N, B_t)) <= target_ms.

        Returns `high` before the model is ready, and None when even `low` is
        predicted to miss the target. The prediction is non-decreasing in B_t,
        so a bisection finds it.
        """
        if not self.ready:
            return high
        if self.predict_p95(tokens_before, min(low, tokens_before), mode) > target_ms:
            return None
        if self.predict_p95(tokens_before, min(high, tokens_before), mode) <= target_ms:
            return high
        lo, hi = low, high  # p95(lo) fits, p95(hi) does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.predict_p95(tokens_before, min(mid, tokens_before), mode) <= target_ms:
                lo = mid
            else:
                hi = mid
        return lo

    def describe(self) -> dict[str, str]:
        """The fitted coefficients, readable (for /diagnostics)."""
        p = self.prefill_coef
        return {
            "compress_ms": f"{self.compress_coef[0]:.3g} + {self.compress_coef[1]:.3g} N/1k",
            "prefill_ms": f"{p[0]:.3g} + {p[1]:.3g} N/1k + {p[2]:.3g} A/1k + {p[3]:.3g} (N/1k)^2 + {p[4]:.3g} (A/1k)^2",
            "decode_ms": f"{self.decode_coef[0]:.3g} + {self.decode_coef[1]:.3g} A/1k + mode "
                         + ", ".join(f"{m}: {v:.3g}" for m, v in sorted(self.mode_decode_ms.items())),
            "tail_margin_ms": f"{self.margin_ms:.3g}",
        }
