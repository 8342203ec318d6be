"""Online latency model: per-phase fit in N, A = min(N, B_t) and the mode; tail margin; budget inverse."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from brace_controller.latency_model import CallSample, LatencyModel


def sample(n, a, prefill, decode=0.0, compress=0.0, mode=0, extra=0.0) -> CallSample:
    return CallSample(n, a, mode, compress, prefill, decode, compress + prefill + decode + extra)


def two_stage(n_ms=0.2, a_ms=2.0, a2_ms=0.0, base=30.0, noise=5.0, n=200, seed=0) -> LatencyModel:
    """Calls whose prefill costs base + n_ms N + a_ms A (+ a2_ms A^2/1000): a pruned prefill that tracks B_t."""
    rng = random.Random(seed)
    model = LatencyModel(window=256, min_samples=8)
    for _ in range(n):
        tokens = rng.randint(256, 4096)
        kept = rng.randint(64, tokens)
        prefill = base + n_ms * tokens + a_ms * kept + a2_ms * kept * kept / 1000.0
        model.observe(sample(tokens, kept, prefill, decode=400.0 + 0.1 * kept, compress=5.0 + 0.01 * tokens,
                             extra=rng.uniform(0, noise)))
    return model


def test_not_ready_returns_upper_bound_and_nan():
    model = LatencyModel(min_samples=8)
    model.observe(sample(100, 100, 10.0))
    assert not model.ready
    assert model.budget_for(100.0, 2000, 0, 16, 1024) == 1024
    assert math.isnan(model.predict_p95(100, 100))


def test_phases_are_fitted_separately_and_recovered():
    model = two_stage(a2_ms=0.5)
    p = model.prefill_coef  # [1, N/1k, A/1k, (N/1k)^2, (A/1k)^2] in ms
    assert abs(p[0] - 30.0) < 3.0 and abs(p[1] - 200.0) < 5.0 and abs(p[2] - 2000.0) < 20.0 and abs(p[4] - 500.0) < 10.0
    phases = model.predict_phases(2000, 384, 0)
    assert abs(phases["decode"] - (400.0 + 38.4)) < 5.0 and abs(phases["context_compress"] - 25.0) < 2.0
    assert 0.0 < model.margin_ms <= 5.0


def test_the_budget_decides_the_cost_only_when_the_prefill_tracks_it():
    tracked = two_stage(n_ms=0.05, a_ms=2.0)
    assert tracked.predict_mean(4096, 384) < 0.5 * tracked.predict_mean(4096, 4096)
    flat = two_stage(n_ms=2.0, a_ms=0.0)  # one-stage pruning: the prefill is set by N, B_t buys nothing there
    assert abs(flat.predict_phases(4096, 384, 0)["prefill"] - flat.predict_phases(4096, 4096, 0)["prefill"]) < 50.0
    assert flat.budget_for(flat.predict_p95(4096, 4096) - 500.0, 4096, 0, 64, 2048) is None


def test_decode_follows_the_mode():
    model = LatencyModel(min_samples=4)
    for i in range(20):
        model.observe(sample(1000 + i, 300, 500.0, decode=900.0 if i % 2 else 300.0, mode=i % 2))
    assert model.predict_phases(1000, 300, 1)["decode"] > model.predict_phases(1000, 300, 0)["decode"] + 500.0


_QUADRATIC = two_stage(a2_ms=0.3)


@settings(max_examples=200, deadline=None)
@given(target=st.floats(min_value=10.0, max_value=20000.0), n=st.integers(64, 8192), low=st.integers(1, 200),
       span=st.integers(0, 4000))
def test_budget_is_the_largest_meeting_the_target(target, n, low, span):
    model = _QUADRATIC
    high = low + span
    budget = model.budget_for(target, n, 0, low, high)
    if budget is None:
        assert model.predict_p95(n, min(n, low)) > target
        return
    assert low <= budget <= high
    assert model.predict_p95(n, min(n, budget)) <= target + 1e-6
    if budget < high:
        assert model.predict_p95(n, min(n, budget + 1)) > target - 1e-6


def test_fit_stays_non_decreasing_on_decreasing_data():
    model = LatencyModel(min_samples=8)
    for tokens in range(100, 2000, 100):
        model.observe(sample(tokens, tokens, 3000.0 - tokens))
    assert all(v >= 0.0 for v in model.prefill_coef[1:])
    assert model.predict_mean(1900, 1900) >= model.predict_mean(100, 100) - 1e-9
    assert model.budget_for(1e9, 2000, 0, 16, 512) == 512


def test_bad_samples_are_ignored():
    model = LatencyModel(min_samples=3)
    for bad in (math.nan, math.inf, -1.0):
        model.observe(sample(100, 100, bad))
    model.observe(sample(-5, 10, 10.0))
    assert model.samples == 0


def test_a_planner_servers_queue_and_prefill_are_learnt_as_the_prefill():
    from brace_common.replanning import CallRecord
    from brace_common.vocabulary import CallStatus
    from brace_controller.convert import latency_sample

    phases = {"queue": 50.0, "context_compress": 20.0, "retrieve": 1.0, "request": 30.0, "first_token": 400.0,
              "decode": 900.0, "parse": 1.0}
    record = CallRecord("a", 1, CallStatus.OK, True, 1402.0, 384, slo_ms=2000.0, tokens_before=2000,
                        phase_ms=phases)
    sample = latency_sample(record)
    assert (sample.compress_ms, sample.prefill_ms, sample.decode_ms) == (21.0, 430.0, 901.0)
    assert sample.total_ms == 1352.0 and sample.tokens_after == 384


def test_calls_cut_off_past_their_slo_teach_the_model_a_saturated_planner():
    # a fleet's shared server: every call hits its hard deadline in the server's queue and prefill; learning only
    # from answered calls, the model never saw it and the controller kept admitting calls no one could serve
    from brace_common.replanning import CallRecord
    from brace_common.vocabulary import CallStatus
    from brace_controller.convert import informs_latency, latency_sample

    def record(status, latency_ms, phases, slo_ms=4500.0):
        return CallRecord("a", 1, status, False, latency_ms, 384, slo_ms=slo_ms, tokens_before=1200, phase_ms=phases)

    cut = record(CallStatus.DEADLINE, 13500.0, {"queue": 5.0, "context_compress": 300.0, "request": 13195.0})
    assert informs_latency(cut) and latency_sample(cut).prefill_ms == 13195.0
    assert informs_latency(record(CallStatus.CANCELLED, 13500.0, {"context_compress": 300.0, "first_token": 13200.0}))
    assert informs_latency(record(CallStatus.PLANNER_ERROR, 900.0, {"prefill": 500.0, "decode": 400.0}))
    # what says nothing about the planner's cost: a call superseded or expired while it waited, one cancelled before
    # its SLO had passed, one no planner answered
    assert not informs_latency(record(CallStatus.CANCELLED, 6000.0, {"queue": 6000.0}))
    assert not informs_latency(record(CallStatus.DEADLINE, 13500.0, {"queue": 13500.0}))
    assert not informs_latency(record(CallStatus.CANCELLED, 800.0, {"context_compress": 300.0, "request": 500.0}))
    assert not informs_latency(record(CallStatus.UNAVAILABLE, 13500.0, {"request": 13500.0}))
    model = LatencyModel(min_samples=3)
    for _ in range(3):
        model.observe(latency_sample(cut))
    assert model.predict_p95(1200, 384, 0) >= 13000.0  # the SLO is out of reach: the gate can defer
