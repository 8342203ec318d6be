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
from typing import Optional

import torch
from transformers import DynamicCache

from .plan_parser import ActionSchema, Step
from .pruned_forward import ErecapModel, PrefillResult

JSON_PREFIX = '{"plan": [{"action": "'


def enumerate_steps(schema: ActionSchema) -> list[Step]:
    """Every skill call whose parameters all have enumerated choices (optional ones left out)."""
    steps = []
    for spec in schema.actions.values():
        required = {name: p for name, p in spec.params.items() if p.required}
        if any(p.choices is None for p in required.values()):
            continue
        names = list(required)
        for values in itertools.product(*(required[n].choices for n in names)):
            steps.append(Step(spec.name, dict(zip(names, values, strict=True))))
    return steps


def candidate_text(step: Step) -> str:
    """The continuation after JSON_PREFIX that writes `step` and closes the plan."""
    return f'{step.action}", "parameters": {json.dumps(step.parameters)}}}]}}'


def _mask(q: int, past: int, valid: Optional[torch.Tensor], dtype, device) -> torch.Tensor:
    # Queries see every cached key and, causally, the new tokens; padding keys are never attended.
    neg = torch.finfo(dtype).min
    new = torch.full((q, q), neg, dtype=dtype, device=device).triu(1)
    mask = torch.cat([torch.zeros((q, past), dtype=dtype, device=device), new], dim=1)[None, None]
    if valid is not None:  # [B, q] key validity of the new tokens
        pad = torch.zeros((valid.shape[0], 1, 1, past + q), dtype=dtype, device=device)
        pad[:, 0, 0, past:] = torch.where(valid, 0.0, neg).to(dtype)
        mask = mask + pad
    return mask


@torch.inference_mode()
def _extend(runner: ErecapModel, cache: DynamicCache, ids: torch.Tensor, start_pos: int,
            valid: Optional[torch.Tensor] = None, last_only: bool = False) -> torch.Tensor:
    """Run [B, q] new tokens over `cache` (appending to it); return logits [B, q, vocab] ([B, 1, vocab] last_only)."""
    backbone = runner.backbone
    hidden = backbone.embed_tokens(ids)
    q = ids.shape[1]
    position_ids = (torch.arange(q, device=ids.device) + start_pos)[None].expand(ids.shape[0], -1)
    cos_sin = backbone.rotary_emb(hidden, position_ids=position_ids)
    for idx, layer in enumerate(backbone.layers[: runner.config.num_hidden_layers]):
        past = cache.get_seq_length(idx)
        mask = _mask(q, past, valid, hidden.dtype, hidden.device)
        hidden = layer(hidden, attention_mask=mask, position_ids=position_ids, past_key_values=cache,
                       use_cache=True, position_embeddings=cos_sin)
    if last_only:  # the vocabulary projection is a fifth of a token's cost: skip it where no one reads it
        hidden = hidden[:, -1:]
    return runner.model.lm_head(backbone.norm(hidden))


@torch.inference_mode()
def score_candidates(runner: ErecapModel, prefill: PrefillResult, tokenizer, steps: list[Step],
                     normalise: bool = True) -> torch.Tensor:
    """Log-likelihood of each candidate step after the prompt, per token (or summed), shape [len(steps)].

    Extends `prefill.cache` with the shared JSON prefix: the prefill cannot be decoded from afterwards.
    """
    device = runner.device
    prefix = tokenizer(JSON_PREFIX, add_special_tokens=False)["input_ids"]
    cache = prefill.cache
    logits = _extend(runner, cache, torch.tensor([prefix], device=device), prefill.next_position,
                     last_only=True)[0, -1]
    texts = [tokenizer(candidate_text(s), add_special_tokens=False)["input_ids"] for s in steps]
    width = max(len(t) for t in texts)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.full((len(texts), width), pad_id, dtype=torch.long, device=device)
    valid = torch.zeros((len(texts), width), dtype=torch.bool, device=device)
    for i, t in enumerate(texts):
        ids[i, : len(t)] = torch.tensor(t)
        valid[i, : len(t)] = True
    batch = DynamicCache(config=runner.config)
    for idx, layer in enumerate(cache.layers[: runner.config.num_hidden_layers]):
        batch.update(layer.keys.expand(len(texts), -1, -1, -1), layer.values.expand(len(texts), -1, -1, -1), idx)
    out = _extend(runner, batch, ids, prefill.next_position + len(prefix), valid)
    first = torch.log_softmax(logits.float(), -1)[ids[:, 0]]
    rest = torch.log_softmax(out[:, :-1].float(), -1).gather(-1, ids[:, 1:, None])[..., 0]
    rest = rest.masked_fill(~valid[:, 1:], 0.0)
    total = first + rest.sum(-1)
    # Mean log-likelihood per token: summed scores would favour the shortest call (wait) whatever the context.
    return total / valid.sum(-1) if normalise else total


def best_step(runner: ErecapModel, prefill: PrefillResult, tokenizer, steps: list[Step]) -> tuple[Step, float]:
    """The highest-scoring candidate and its mean log-likelihood per token."""
    scores = score_candidates(runner, prefill, tokenizer, steps)
    i = int(torch.argmax(scores))
    return steps[i], float(scores[i])
