"""Which tokens a pruning layer keeps inside the model (paper Eq. 4-5), on a tensor of scores.

At a pruning layer with N_l tokens, floor(r N_l) survive: the first `head` tokens, a tail window and the top-scoring
rest, in their original order; a budget B below head + tail shrinks the tail first, then the head. The schedule
(where, how much) is prune_schedule.py's.
"""

from __future__ import annotations

import torch

from .prune_schedule import PruneSchedule, table8_layers

__all__ = ["PruneSchedule", "select_kept", "table8_layers"]


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
