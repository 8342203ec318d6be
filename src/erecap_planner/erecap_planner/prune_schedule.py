"""Where E-RECAP prunes and how much (paper Eq. 4-5, Table 8), without torch: the schedule and Eq. 5 on a list.

`PruneSchedule` says which layers prune, the keep ratio r and the forced head and tail window; `kept_positions`
is Eq. 5's selection over plain scores (what prompt-level compressors use; pruning.select_kept is the same on a
tensor inside the model). docs/planner.md explains the two-stage prefill (`first_cut`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

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


def kept_positions(scores: Sequence[float], n_keep: int, head: int, tail: int) -> list[int]:
    """Positions (ascending) of the n_keep tokens kept: head, tail window, then the top scores (Eq. 5; equal scores
    go to the earlier position)."""
    n = len(scores)
    n_keep = max(0, min(n, n_keep))
    if n_keep == n:
        return list(range(n))
    tail = min(tail, max(0, n_keep - head))
    head = min(head, n_keep - tail)
    forced = set(range(head)) | set(range(n - tail, n))
    rest = sorted((i for i in range(n) if i not in forced), key=lambda i: -scores[i])[:n_keep - head - tail]
    return sorted(forced | set(rest))
