"""Length-bucketed batches of plan examples and their loss, weighted on the tokens the planner chooses.

ROS-free. A batch is a few examples of similar length (little padding), left-padded for the whole forward or, with
`detached` prompts, the prompt run once without gradient into a KV cache and only the plan tokens run with it:
the backward pass then covers the ~50 plan tokens instead of the ~1,000 prompt tokens. The loss is a weighted mean
of the plan tokens' cross-entropy: a token the constrained decoder chooses (an action or entity id) weighs 1, a
forced one (JSON syntax) `forced_weight`, so a planner that picks `wait` where the oracle moves shows in the loss
instead of hiding behind the syntax it gets right (docs/training.md).
"""

from __future__ import annotations

import random
from typing import Optional

import torch

IGNORE = -100
"""The label of a position that has no target (padding, prompt)."""


def token_weights(choice: Optional[list[bool]], length: int, forced_weight: float) -> list[float]:
    """The loss weight of each of `length` plan tokens: 1 where `choice` marks a choice, `forced_weight` elsewhere
    (every token 1 without a mask)."""
    if choice is None:
        return [1.0] * length
    if len(choice) != length:
        raise ValueError(f"choice mask has {len(choice)} entries for {length} target tokens")
    return [1.0 if c else forced_weight for c in choice]


def bucketed(lengths: list[int], size: int, rng: random.Random) -> list[list[int]]:
    """Indices in batches of at most `size`, neighbours in length together, the batches in random order."""
    if size < 1:
        raise ValueError(f"batch size must be >= 1, got {size}")
    order = sorted(rng.sample(range(len(lengths)), len(lengths)), key=lambda i: lengths[i])
    batches = [order[i:i + size] for i in range(0, len(order), size)]
    rng.shuffle(batches)
    return batches


def _weighted_mean(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    ce = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                           ignore_index=IGNORE, reduction="none")
    w = weights.reshape(-1)
    return (ce * w).sum() / w.sum().clamp(min=1e-8)


def full_loss(model, batch: list, forced_weight: float, device) -> torch.Tensor:
    """The weighted plan loss of `batch` (PlanExamples) in one forward over prompt and plan, left-padded."""
    seqs = [ex.prompt_ids + ex.target_ids for ex in batch]
    width, span = max(map(len, seqs)), max(len(ex.target_ids) for ex in batch)
    ids = torch.zeros(len(batch), width, dtype=torch.long)
    mask = torch.zeros(len(batch), width, dtype=torch.long)
    labels = torch.full((len(batch), span), IGNORE, dtype=torch.long)
    weights = torch.zeros(len(batch), span)
    for row, (ex, seq) in enumerate(zip(batch, seqs, strict=True)):
        ids[row, width - len(seq):] = torch.tensor(seq)
        mask[row, width - len(seq):] = 1
        n = len(ex.target_ids)
        labels[row, span - n:] = torch.tensor(ex.target_ids)
        weights[row, span - n:] = torch.tensor(token_weights(ex.choice, n, forced_weight))
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    # Only the positions that predict a plan token reach the LM head (Gemma's 262k vocabulary would cost more).
    logits = model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
                   logits_to_keep=span + 1).logits[:, :-1]
    return _weighted_mean(logits, labels.to(device), weights.to(device))


def detached_loss(model, batch: list, forced_weight: float, device) -> torch.Tensor:
    """The weighted plan loss of `batch` with the prompt's KV computed without gradient: the prompt (but its last
    token) left-padded in one no-grad forward, then its last token and the plan, right-padded, with gradient."""
    heads = [ex.prompt_ids[:-1] for ex in batch]
    tails = [ex.prompt_ids[-1:] + ex.target_ids[:-1] for ex in batch]
    if min(map(len, heads)) == 0:
        raise ValueError("a detached prompt needs at least two prompt tokens")
    width, span = max(map(len, heads)), max(map(len, tails))
    head_ids = torch.zeros(len(batch), width, dtype=torch.long)
    head_mask = torch.zeros(len(batch), width, dtype=torch.long)
    tail_ids = torch.zeros(len(batch), span, dtype=torch.long)
    tail_mask = torch.zeros(len(batch), span, dtype=torch.long)
    labels = torch.full((len(batch), span), IGNORE, dtype=torch.long)
    weights = torch.zeros(len(batch), span)
    for row, (ex, head, tail) in enumerate(zip(batch, heads, tails, strict=True)):
        head_ids[row, width - len(head):] = torch.tensor(head)
        head_mask[row, width - len(head):] = 1
        tail_ids[row, :len(tail)] = torch.tensor(tail)
        tail_mask[row, :len(tail)] = 1
        labels[row, :len(tail)] = torch.tensor(ex.target_ids)
        weights[row, :len(tail)] = torch.tensor(token_weights(ex.choice, len(tail), forced_weight))
    with torch.no_grad():
        cache = model(input_ids=head_ids.to(device), attention_mask=head_mask.to(device),
                      position_ids=(head_mask.cumsum(1) - 1).clamp(min=0).to(device), use_cache=True,
                      logits_to_keep=1).past_key_values
    starts = torch.tensor([len(h) for h in heads])[:, None]
    logits = model(input_ids=tail_ids.to(device), attention_mask=torch.cat([head_mask, tail_mask], 1).to(device),
                   position_ids=(starts + torch.arange(span)[None]).to(device), past_key_values=cache).logits
    return _weighted_mean(logits, labels.to(device), weights.to(device))
