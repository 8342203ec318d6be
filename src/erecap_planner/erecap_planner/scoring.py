"""Candidate-action scoring on the (pruned) KV cache: constrained decoding for small planners.

`best_step` scores every valid skill call's JSON by mean log-likelihood per token in one batched forward over the
prefill's cache and returns the best (docs/planner.md, "Candidate scoring").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Optional

import torch

from brace_common.action_schema import Step

from .candidates import MAX_CANDIDATES, CandidateLimit, candidate_count, enumerate_steps
from .pruned_forward import ErecapModel, PrefillResult
from .transformer import KVCache

JSON_PREFIX = '{"plan": [{"action": "'
__all__ = ["CANDIDATE_BATCH", "JSON_PREFIX", "MAX_CANDIDATES", "CandidateLimit", "best_step", "candidate_count",
           "candidate_target", "candidate_text", "enumerate_steps", "ranked_steps", "score_candidates"]
CANDIDATE_BATCH = 8
"""Candidates scored in one forward: bounds its memory (logits of batch x tokens x vocabulary) whatever their number."""


def candidate_text(step: Step) -> str:
    """The continuation after JSON_PREFIX that writes `step` and closes the plan."""
    return f'{step.action}", "parameters": {json.dumps(step.parameters)}}}]}}'


def candidate_target(tokenizer, step: Step) -> tuple[list[int], list[bool]]:
    """What a fine-tune trains for `step` under candidates decoding: the token ids (JSON_PREFIX, then the candidate,
    each tokenised on its own as scoring does) and the choice mask (the prefix is forced, the candidate scored)."""
    prefix = tokenizer(JSON_PREFIX, add_special_tokens=False)["input_ids"]
    candidate = tokenizer(candidate_text(step), add_special_tokens=False)["input_ids"]
    return prefix + candidate, [False] * len(prefix) + [True] * len(candidate)


def _extend(runner: ErecapModel, cache: KVCache, ids: torch.Tensor, start_pos: int,
            valid: Optional[torch.Tensor] = None, last_only: bool = False, store: bool = True,
            should_abort: Optional[Callable[[], bool]] = None) -> torch.Tensor:
    """Run [B, q] new tokens over `cache` (appending to it unless `store` is false); logits [B, q | 1, vocab]."""
    with torch.inference_mode():
        return runner.stack.extend(cache, ids, start_pos, valid=valid, last_only=last_only, store=store,
                                   should_abort=should_abort)


@torch.inference_mode()
def score_candidates(runner: ErecapModel, prefill: PrefillResult, tokenizer, steps: list[Step],
                     normalise: bool = True, should_abort: Optional[Callable[[], bool]] = None) -> torch.Tensor:
    """Log-likelihood of each candidate step after the prompt, per token (or summed), shape [len(steps)].

    Candidates are scored CANDIDATE_BATCH at a time; `should_abort()` is checked before every layer of each batch
    (true raises CallAborted: a call stops at its deadline). Extends `prefill.cache` with the shared JSON prefix: the
    prefill cannot be decoded from afterwards.
    """
    device = runner.device
    prefix = tokenizer(JSON_PREFIX, add_special_tokens=False)["input_ids"]
    cache = prefill.cache
    logits = _extend(runner, cache, torch.tensor([prefix], device=device), prefill.next_position,
                     last_only=True)[0, -1]
    first_logp = torch.log_softmax(logits.float(), -1)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    scores = []
    for start in range(0, len(steps), CANDIDATE_BATCH):
        texts = [tokenizer(candidate_text(s), add_special_tokens=False)["input_ids"]
                 for s in steps[start:start + CANDIDATE_BATCH]]
        width = max(len(t) for t in texts)
        ids = torch.full((len(texts), width), pad_id, dtype=torch.long, device=device)
        valid = torch.zeros((len(texts), width), dtype=torch.bool, device=device)
        for i, t in enumerate(texts):
            ids[i, : len(t)] = torch.tensor(t)
            valid[i, : len(t)] = True
        # Every candidate attends to the shared cache; their own keys are not kept (store=False).
        out = _extend(runner, cache, ids, prefill.next_position + len(prefix), valid, store=False,
                      should_abort=should_abort)
        rest = torch.log_softmax(out[:, :-1].float(), -1).gather(-1, ids[:, 1:, None])[..., 0]
        total = first_logp[ids[:, 0]] + rest.masked_fill(~valid[:, 1:], 0.0).sum(-1)
        # Mean log-likelihood per token: summed scores would favour the shortest call (wait) whatever the context.
        scores.append(total / valid.sum(-1) if normalise else total)
    return torch.cat(scores)


def ranked_steps(runner: ErecapModel, prefill: PrefillResult, tokenizer, steps: list[Step],
                 should_abort: Optional[Callable[[], bool]] = None) -> list[Step]:
    """Every candidate, the highest-scoring first (equal scores keep `steps`' order, so the first is best_step's);
    `should_abort`: see score_candidates."""
    scores = score_candidates(runner, prefill, tokenizer, steps, should_abort=should_abort)
    return [steps[int(i)] for i in torch.argsort(scores, descending=True, stable=True)]


def best_step(runner: ErecapModel, prefill: PrefillResult, tokenizer, steps: list[Step],
              should_abort: Optional[Callable[[], bool]] = None) -> tuple[Step, float]:
    """The highest-scoring candidate and its mean log-likelihood per token (`should_abort`: see score_candidates)."""
    scores = score_candidates(runner, prefill, tokenizer, steps, should_abort=should_abort)
    i = int(torch.argmax(scores))
    return steps[i], float(scores[i])
