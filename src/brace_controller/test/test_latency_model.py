"""Online latency model: fit, tail margin, closed-form budget inverse."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brace_controller.latency_model import LatencyModel


def fitted(a=50.0, b=0.5, c=1e-4, noise=5.0, n=200, seed=0) -> LatencyModel:
    rng = random.Random(seed)
    model = LatencyModel(window=256, min_samples=8)
    for _ in range(n):
        tokens = rng.randint(64, 4096)
        model.observe(tokens, a + b * tokens + c * tokens * tokens + rng.uniform(0, noise))
    return model


def test_not_ready_returns_upper_bound_and_nan():
    model = LatencyModel(min_samples=8)
    model.observe(100, 10.0)
    assert not model.ready
    assert model.budget_for(100.0, 16, 1024) == 1024
    assert math.isnan(model.predict_p95(100))


def test_fit_recovers_quadratic_and_margin_covers_noise():
    model = fitted()
    a, b, c = model.coef
    assert a == pytest.approx(52.5, abs=3.0)
    assert b == pytest.approx(0.5, rel=0.05)
    assert c == pytest.approx(1e-4, rel=0.1)
    assert 0.0 < model.margin_ms <= 5.0


@settings(max_examples=200, deadline=None)
@given(target=st.floats(min_value=10.0, max_value=5000.0), low=st.integers(1, 200), span=st.integers(0, 4000))
def test_budget_is_largest_meeting_target(target, low, span):
    model = fitted()
    high = low + span
    budget = model.budget_for(target, low, high)
    if budget is None:
        assert model.predict_p95(low) > target
        return
    assert low <= budget <= high
    assert model.predict_p95(budget) <= target + 1e-6
    if budget < high:
        assert model.predict_p95(budget + 1) > target - 1e-6


def test_fit_stays_non_decreasing_on_decreasing_data():
    model = LatencyModel(min_samples=8)
    for tokens in range(100, 2000, 100):
        model.observe(tokens, 3000.0 - tokens)
    _, b, c = model.coef
    assert b >= 0.0 and c >= 0.0
    assert model.budget_for(1e9, 16, 512) == 512


def test_bad_samples_are_ignored():
    model = LatencyModel(min_samples=3)
    for bad in (math.nan, math.inf, -1.0):
        model.observe(100, bad)
    model.observe(-5, 10.0)
    assert model.samples == 0
