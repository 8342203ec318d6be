"""Which tokens a pruning layer keeps (paper Eq. 4-5) and where pruning happens (Table 8).

At a pruning layer with N_l tokens, N_{l+1} = floor(r N_l) tokens survive: the
first `head` tokens, a tail window of max(tail_min, ceil(tail_frac N_l)) tokens,
and the top-scoring rest, in their original order. When the token budget B is
smaller than head + tail, the tail shrinks first, then the head, so the budget
is never exceeded.

Two-stage prefill (`first_cut` > 0, beyond the paper): the first pruning layer
keeps at most ceil(first_cut x B) tokens, and the later pruning layers go on
from there to B progressively. The layers after the first cut then run on
O(B) tokens whatever N is, so the prefill's cost follows the budget the
controller chose instead of the context's length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

# Paper Table 8: pruning layers start at 4 and repeat every 3 layers, stopping 3 short of the depth.
_TABLE8_FIRST, _TABLE8_STRIDE, _TABLE8_DEPTH = 4, 3, 28


def table8_layers(num_layers: int) -> list[int]:
    """Pruning layers of Table 8 for a model of `num_layers` decoder layers.

    28 layers give {4, 7, ..., 25} and 32 give {4, 7, ..., 28} as in the paper;
    shallower models get the same pattern scaled to their depth.
    """
    if num_layers < 2:
        return []
    if num_layers >= _TABLE8_DEPTH:
        first, stride = _TABLE8_FIRST, _TABLE8_STRIDE
    else:
        first = max(1, round(_TABLE8_FIRST * num_layers / _TABLE8_DEPTH))
        stride = max(1, round(_TABLE8_STRIDE * num_layers / _TABLE8_DEPTH))
    last = num_layers - max(1, round(_TABLE8_STRIDE * num_layers / _TABLE8_DEPTH))
    return list(range(first, last + 1, stride))


@dataclass(frozen=True)
class PruneSchedule:
    """Where and how much E-RECAP prunes."""

    layers: tuple[int, ...]
    keep_ratio: float = 0.7
    head_tokens: int = 4
    tail_min: int = 16
    tail_frac: float = 0.1
    first_cut: float = 0.0  # two-stage: the first pruning layer keeps <= ceil(first_cut x B) tokens (0 = off)
    extra: dict = field(default_factory=dict, compare=False)

    def validate(self, num_layers: int) -> None:
        """ValueError naming the offending setting."""
        if not 0.0 < self.keep_ratio <= 1.0:
            raise ValueError(f"keep_ratio {self.keep_ratio} is outside (0, 1]")
        if any(layer < 0 or layer >= num_layers for layer in self.layers):
            raise ValueError(f"pruning layers {list(self.layers)} exceed the model's depth of {num_layers} layers")
        if list(self.layers) != sorted(set(self.layers)):
            raise ValueError(f"pruning layers {list(self.layers)} must be strictly increasing")
        if self.head_tokens < 0 or self.tail_min < 0 or not 0.0 <= self.tail_frac <= 1.0:
            raise ValueError("head_tokens, tail_min must be >= 0 and tail_frac in [0, 1]")
        if self.first_cut != 0.0 and self.first_cut < 1.0:
            raise ValueError(f"first_cut {self.first_cut} must be 0 (off) or >= 1")

    def tail_size(self, n: int) -> int:
        """Tail window for a sequence of n tokens: max(tail_min, ceil(tail_frac n))."""
        return max(self.tail_min, math.ceil(self.tail_frac * n))

    def next_length(self, n: int, budget: int | None = None, ratio: float | None = None, round_up: bool = False) -> int:
        """N_{l+1} = floor(r N_l) (r = `ratio` or the schedule's; ceil with `round_up`), capped by the budget."""
        scaled = (self.keep_ratio if ratio is None else ratio) * n
        n_next = math.ceil(scaled - 1e-9) if round_up else math.floor(scaled + 1e-9)
        if budget is not None:
            n_next = min(n_next, budget)
        return max(0, min(n, n_next))


def select_kept(scores: torch.Tensor, n_keep: int, head: int, tail: int) -> torch.Tensor:
    """Indices (ascending) of the n_keep tokens kept: head, tail window, then top scores (Eq. 5)."""
    n = scores.shape[-1]
    n_keep = max(0, min(n, n_keep))
    if n_keep == n:
        return torch.arange(n, device=scores.device)
    tail = min(tail, max(0, n_keep - head))
    head = min(head, n_keep - tail)
    protected = torch.zeros(n, dtype=torch.bool, device=scores.device)
    protected[:head] = True
    if tail:
        protected[n - tail:] = True
    rest = n_keep - head - tail
    if rest > 0:
        masked = (scores if scores.dtype == torch.float64 else scores.float()).masked_fill(protected, float("-inf"))
        top = torch.topk(masked, rest, sorted=False).indices
        protected[top] = True
    return torch.nonzero(protected, as_tuple=False).squeeze(-1)
