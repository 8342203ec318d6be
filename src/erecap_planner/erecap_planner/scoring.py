"""Candidate-action scoring on the (pruned) KV cache: constrained decoding for small planners.

Every valid skill call of the action schema is written as the JSON the planner
would emit; after the prompt and a shared JSON prefix, each candidate's
continuation is scored by its mean log-likelihood per token in one batched forward over
the prefill's cache (each layer attends over the keys it kept). The best
candidate is the plan. Small models that cannot be trusted to write valid JSON
still choose among valid actions, and pruning that drops what mattered changes
the choice.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable
from typing import Optional

import torch

from brace_common.action_schema import ActionSchema, Step
from brace_common.validation import InvalidInput

from .pruned_forward import ErecapModel, PrefillResult
from .transformer import KVCache

JSON_PREFIX = '{"plan": [{"action": "'
MAX_CANDIDATES = 4096
"""The most skill calls a schema may enumerate (the cross product of its enumerated parameters): each is tokenised
into the constrained decoder and scored. The largest shipped schema (the warehouse at K = 8) has 106; above the cap a
schema is refused (docs/hardening.md measures the planner's cost at it)."""


CANDIDATE_BATCH = 8
"""Candidates scored in one forward: bounds its memory (logits of batch x tokens x vocabulary) whatever their number."""


class CandidateLimit(InvalidInput):
    """A schema enumerates more skill calls than MAX_CANDIDATES (an InvalidInput: a schema from the graph is
    refused and counted as `too_many_candidates`)."""

    def __init__(self, message: str) -> None:
        super().__init__("too_many_candidates", message)


def candidate_count(schema: ActionSchema) -> int:
    """How many skill calls `enumerate_steps` would list, computed without listing them."""
    total = 0
    for spec in schema.actions.values():
        required = [p for p in spec.parameters.values() if p.required]
        if all(p.choices is not None for p in required):
            total += math.prod(len(p.choices) for p in required)
    return total


def enumerate_steps(schema: ActionSchema, limit: int = MAX_CANDIDATES) -> list[Step]:
    """Every skill call whose parameters all have enumerated choices (optional ones left out); CandidateLimit when
    there would be more than `limit`."""
    count = candidate_count(schema)
    if count > limit:
        raise CandidateLimit(f"the schema enumerates {count} skill calls (at most {limit}: fewer choices per "
                             "parameter, or a parameter without enumerated choices)")
    steps = []
    for spec in schema.actions.values():
        required = {name: p for name, p in spec.parameters.items() if p.required}
        if any(p.choices is None for p in required.values()):
            continue
        names = list(required)
        for values in itertools.product(*(required[n].choices for n in names)):
            steps.append(Step(spec.name, dict(zip(names, values, strict=True))))
    return steps


def candidate_text(step: Step) -> str:
    """The continuation after JSON_PREFIX that writes `step` and closes the plan."""
    return f'{step.action}", "parameters": {json.dumps(step.parameters)}}}]}}'


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


def best_step(runner: ErecapModel, prefill: PrefillResult, tokenizer, steps: list[Step],
              should_abort: Optional[Callable[[], bool]] = None) -> tuple[Step, float]:
    """The highest-scoring candidate and its mean log-likelihood per token (`should_abort`: see score_candidates)."""
    scores = score_candidates(runner, prefill, tokenizer, steps, should_abort=should_abort)
    i = int(torch.argmax(scores))
    return steps[i], float(scores[i])
