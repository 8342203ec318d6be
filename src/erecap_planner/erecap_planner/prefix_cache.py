"""Reuse of the previous call's prefill where it is exact: the shared prompt prefix, below the first cut.

`PrefixCache` keeps the last prompt's keys / values of the layers before the first pruning layer and the hidden
states entering it; a new prompt runs those layers only past the common prefix (docs/planner.md, "Prefix reuse").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch


@dataclass
class PrefixStats:
    """How much prefill the cache saved: lookups, hits, tokens reused and recomputed in the early layers."""

    lookups: int = 0
    hits: int = 0
    tokens_reused: int = 0
    tokens_computed: int = 0

    @property
    def hit_rate(self) -> float:
        """Share of lookups that reused a prefix."""
        return self.hits / self.lookups if self.lookups else 0.0

    @property
    def reuse_share(self) -> float:
        """Share of the early layers' prompt tokens that were reused instead of computed."""
        total = self.tokens_reused + self.tokens_computed
        return self.tokens_reused / total if total else 0.0


@dataclass
class PrefixEntry:
    """The early layers' state of one prompt."""

    token_ids: torch.Tensor                      # [n] the prompt
    upto: int                                    # layers [0, upto) are cached
    keys: list[torch.Tensor] = field(default_factory=list)    # per layer [1, kv_heads, n, d]
    values: list[torch.Tensor] = field(default_factory=list)
    hidden: Optional[torch.Tensor] = None        # [1, n, d] entering layer `upto`


class PrefixCache:
    """The last prompt's early-layer prefill, and the statistics of its reuse."""

    def __init__(self, min_tokens: int = 16):
        self.entry: Optional[PrefixEntry] = None
        self.min_tokens = min_tokens
        self.stats = PrefixStats()

    def common_prefix(self, token_ids: torch.Tensor, upto: int) -> int:
        """Tokens of `token_ids` whose early-layer state the cache holds (0 when none or too few to matter).

        At least the prompt's last token is always recomputed, so the prefill has its logits.
        """
        entry = self.entry
        if entry is None or entry.upto != upto:
            return 0
        n = min(int(entry.token_ids.numel()), int(token_ids.numel()) - 1)
        if n <= 0:
            return 0
        same = entry.token_ids[:n] == token_ids[:n].to(entry.token_ids.device)
        differ = torch.nonzero(~same)
        p = int(differ[0, 0]) if differ.numel() else n
        return p if p >= self.min_tokens else 0

    def record(self, reused: int, total: int) -> None:
        """Count one lookup that reused `reused` of `total` prompt tokens."""
        self.stats.lookups += 1
        self.stats.hits += int(reused > 0)
        self.stats.tokens_reused += reused
        self.stats.tokens_computed += total - reused

    def store(self, entry: PrefixEntry) -> None:
        """Keep `entry` as the state the next prompt may reuse."""
        self.entry = entry

    def clear(self) -> None:
        """Forget the cached prompt (statistics stay)."""
        self.entry = None
