"""Context compressors behind one interface (`make_compressor`): none, random, recency, summary, prompt-level erecap.

Each keeps the same forced set (head, tail window, protected tokens) and fills the rest of B by its own score
(Eq. 5), so every one but `none` keeps at most B tokens. Each method: docs/planner.md, "Compressors".
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional

from brace_common.config import ConfigError

from .context import RenderedContext
from .prune_schedule import PruneSchedule, kept_positions

_PROTECTED_SCORE = 1e9
_KIND_PRIORITY = {"failure_trace": 3, "action_outcome": 2, "message": 1}


@dataclass
class Compressed:
    """The compressor's output: kept token positions (ascending) and their ids."""

    kept_index: list[int]
    token_ids: list[int]
    tokens_before: int

    @property
    def tokens_after(self) -> int:
        """Tokens passed to the planner."""
        return len(self.token_ids)

    def position_of(self, index: int) -> int:
        """Where original token `index` (or the first kept one after it) is in the kept tokens."""
        return bisect.bisect_left(self.kept_index, index)




class Compressor:
    """Base: keep the forced set, fill the rest of the budget by `prunable_scores`."""

    name = "base"

    def __init__(self, schedule: Optional[PruneSchedule] = None):
        self.schedule = schedule or PruneSchedule(layers=(), keep_ratio=1.0)

    def prunable_scores(self, ctx: RenderedContext) -> list[float]:
        """Score of every token (only prunable tokens' scores matter)."""
        raise NotImplementedError

    def compress(self, ctx: RenderedContext, budget: int,
                 should_abort: Optional[Callable[[], bool]] = None) -> Compressed:
        """Keep at most `budget` tokens of `ctx` (the context is bounded by the call's token cap, so this is
        short work; a compressor that runs a model checks `should_abort` between its layers)."""
        n = len(ctx)
        if budget >= n:
            return Compressed(list(range(n)), list(ctx.token_ids), n)
        # Protected tokens outrank everything; past the budget they yield by the context's overflow rule, and where
        # the template and request alone exceed it, the latest of them win (the request stays whole).
        scores = [_PROTECTED_SCORE + i if protected else float(score) for i, (protected, score)
                  in enumerate(zip(self.protected(ctx, budget), self.prunable_scores(ctx), strict=True))]
        kept = kept_positions(scores, budget, self.schedule.head_tokens, self.schedule.tail_size(n))
        return Compressed(kept, [ctx.token_ids[i] for i in kept], n)

    def protected(self, ctx: RenderedContext, budget: int) -> list[bool]:
        """`ctx`'s protected mask fitted to `budget` less the unprotected tokens of the head and tail window."""
        return ctx.protected_within(budget - self.forced_unprotected(ctx))

    def forced_unprotected(self, ctx: RenderedContext) -> int:
        """Unprotected tokens the head and tail window force into every cut."""
        n = len(ctx)
        head, tail = self.schedule.head_tokens, self.schedule.tail_size(n)
        return sum(1 for i in range(n) if not ctx.protected[i] and (i < head or i >= n - tail))


class NoCompression(Compressor):
    """The No BRACE baseline: the whole context, whatever the budget."""

    name = "none"

    def compress(self, ctx: RenderedContext, budget: int,
                 should_abort: Optional[Callable[[], bool]] = None) -> Compressed:
        """Every token."""
        return Compressed(list(range(len(ctx))), list(ctx.token_ids), len(ctx))


class RandomTruncation(Compressor):
    """Random prunable tokens, reproducible for the same context and seed."""

    name = "random"

    def __init__(self, schedule: Optional[PruneSchedule] = None, seed: int = 0):
        super().__init__(schedule)
        self.seed = seed

    def prunable_scores(self, ctx: RenderedContext) -> list[float]:
        """Uniform random scores seeded by the context's content (torch's generator: the same draws as ever)."""
        import torch  # heavy: only this baseline draws with it

        digest = hashlib.sha256(f"{self.seed}:{ctx.text}".encode()).digest()
        generator = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))
        return torch.rand(len(ctx), generator=generator, dtype=torch.float64).tolist()


class RecencyTruncation(Compressor):
    """The most recent prunable tokens."""

    name = "recency"

    def prunable_scores(self, ctx: RenderedContext) -> list[float]:
        """Later tokens score higher."""
        return [float(i) for i in range(len(ctx))]


class StructuredSummary(Compressor):
    """Extractive summary: protected blocks verbatim, then whole history entries by priority."""

    name = "summary"

    def compress(self, ctx: RenderedContext, budget: int,
                 should_abort: Optional[Callable[[], bool]] = None) -> Compressed:
        """Forced set, then entries in priority order while they fit whole."""
        n = len(ctx)
        if budget >= n:
            return Compressed(list(range(n)), list(ctx.token_ids), n)
        # Whole entries replace the raw tail window here: only protected tokens are forced.
        forced = _ForcedOnly(PruneSchedule(layers=(), head_tokens=0, tail_min=0, tail_frac=0.0)).compress(ctx, budget).kept_index
        kept = set(forced)
        room = budget - len(kept)
        spans = ctx.entry_spans()
        candidates = []
        for entry_index, tokens in spans.items():
            missing = [i for i in tokens if i not in kept]
            if missing:
                entry = ctx.entries[entry_index]
                candidates.append((_KIND_PRIORITY.get(entry.kind, 0), entry.step, entry_index, missing))
        for _, _, _, missing in sorted(candidates, key=lambda c: (-c[0], -c[1], -c[2])):
            if len(missing) <= room:
                kept.update(missing)
                room -= len(missing)
        order = sorted(kept)
        return Compressed(order, [ctx.token_ids[i] for i in order], n)


class _ForcedOnly(Compressor):
    """Scores that keep only the forced set (prunable tokens never win)."""

    def prunable_scores(self, ctx: RenderedContext) -> list[float]:
        """Below every protected token's score."""
        return [-1e18] * len(ctx)

    def compress(self, ctx: RenderedContext, budget: int,
                 should_abort: Optional[Callable[[], bool]] = None) -> Compressed:
        n_forced = sum(ctx.protected) + self.forced_unprotected(ctx)
        return Compressor.compress(self, ctx, min(budget, n_forced))


class ErecapPromptCompressor(Compressor):
    """Prompt-level E-RECAP: the pruned prefill's kept tokens become the prompt (for remote planners)."""

    name = "erecap"

    def __init__(self, scorer, schedule: Optional[PruneSchedule] = None):
        super().__init__(schedule or scorer.schedule)
        self.scorer = scorer

    def compress(self, ctx: RenderedContext, budget: int,
                 should_abort: Optional[Callable[[], bool]] = None) -> Compressed:
        """Run the scorer model up to its last pruning layer with budget B and protected tokens (CallAborted
        once `should_abort()` is true, checked before every layer)."""
        import torch  # heavy: the scorer is a local model

        n = len(ctx)
        if budget >= n:
            return Compressed(list(range(n)), list(ctx.token_ids), n)
        ids = torch.tensor(ctx.token_ids)
        out = self.scorer.prefill(ids, token_budget=budget, stop_after_pruning=True,
                                  protect=torch.tensor(self.protected(ctx, budget)), should_abort=should_abort)
        kept = out.kept_index.tolist()
        return Compressed(kept, [ctx.token_ids[i] for i in kept], n)


BASELINES = {c.name: c for c in (NoCompression, RandomTruncation, RecencyTruncation, StructuredSummary)}


def make_compressor(name: str, schedule: Optional[PruneSchedule] = None, scorer=None) -> Compressor:
    """A compressor by name: none, random, recency, summary, erecap (needs `scorer`)."""
    if name == "erecap":
        if scorer is None:
            raise ConfigError("compressor", "the erecap compressor needs a scorer model")
        return ErecapPromptCompressor(scorer, schedule)
    if name not in BASELINES:
        raise ConfigError("compressor", f"unknown compressor '{name}' (known: erecap, {', '.join(BASELINES)})")
    return BASELINES[name](schedule)
