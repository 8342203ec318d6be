"""Eq. 4-5 selection and the Table 8 schedule."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from erecap_planner.pruning import PruneSchedule, select_kept, table8_layers


def test_table8_layers_match_the_paper():
    assert table8_layers(28) == [4, 7, 10, 13, 16, 19, 22, 25]
    assert table8_layers(32) == [4, 7, 10, 13, 16, 19, 22, 25, 28]
    assert table8_layers(30) == [4, 7, 10, 13, 16, 19, 22, 25]  # SmolLM2-135M
    assert table8_layers(6) == [1, 2, 3, 4, 5][: len(table8_layers(6))] and all(0 < x < 6 for x in table8_layers(6))


def test_next_length_is_floor_r_n_capped_by_budget():
    s = PruneSchedule(layers=(1,), keep_ratio=0.7)
    assert s.next_length(100) == 70 and s.next_length(10) == 7
    assert s.next_length(100, budget=50) == 50
    assert PruneSchedule(layers=(), keep_ratio=1.0).next_length(33) == 33
    assert s.tail_size(100) == 16 and s.tail_size(1000) == 100


@pytest.mark.parametrize("bad", [dict(keep_ratio=0.0), dict(keep_ratio=1.2), dict(layers=(9,)), dict(layers=(3, 2))])
def test_schedule_validation(bad):
    kwargs = {"layers": (1, 2), "keep_ratio": 0.7, **bad}
    with pytest.raises(ValueError):
        PruneSchedule(**kwargs).validate(num_layers=6)


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 400), frac=st.floats(0.0, 1.0), head=st.integers(0, 8), tail=st.integers(0, 64),
       seed=st.integers(0, 1000))
def test_selection_properties(n, frac, head, tail, seed):
    """Exactly n_keep indices, sorted and unique; head then tail are kept first; the rest are top scores."""
    n_keep = int(frac * n)
    scores = torch.randn(n, generator=torch.Generator().manual_seed(seed))
    kept = select_kept(scores, n_keep, head, tail)
    assert kept.numel() == n_keep
    assert torch.equal(kept, torch.sort(torch.unique(kept)).values)
    if n_keep == n:
        return
    t = min(tail, max(0, n_keep - head))
    h = min(head, n_keep - t)
    kept_set = set(kept.tolist())
    assert set(range(h)) <= kept_set
    assert set(range(n - t, n)) <= kept_set
    rest = kept_set - set(range(h)) - set(range(n - t, n))
    others = set(range(n)) - kept_set
    if rest and others - set(range(h)) - set(range(n - t, n)):
        worst_kept = min(scores[i].item() for i in rest)
        best_dropped = max(scores[i].item() for i in others if h <= i < n - t)
        assert worst_kept >= best_dropped
