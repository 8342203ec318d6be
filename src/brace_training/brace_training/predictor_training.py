"""Train the E-RECAP predictors (paper Eq. 7, 9, 10) on generated embodied contexts.

Saliency targets from the LM loss of the correct next action, then L = L_L + lambda1 L_M + lambda2 L_R with only the
predictor weights trained (docs/training.md).
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F

from brace_common.config import resolve_path
from erecap_planner.predictor import PredictorBank
from erecap_planner.pruned_forward import causal_mask, masked_training_attention
from erecap_planner.pruning import PruneSchedule, table8_layers
from erecap_planner.transformer import DecoderStack


@dataclass
class Example:
    """Prompt ids, target ids, and (after `compute_saliency`) per-layer saliency of the prompt tokens."""

    prompt_ids: torch.Tensor
    target_ids: torch.Tensor
    saliency: Optional[dict[int, torch.Tensor]] = None


def target_text(step) -> str:
    """The JSON the planner should write for one step."""

    return json.dumps({"plan": [{"action": step.action, "parameters": step.parameters}]})


def _layer_loop(model, embeds: torch.Tensor, mask: Optional[torch.Tensor], hook=None, first: int = 0):
    """Logits of the decoder layers (no cache) under an explicit float attention mask, from position `first` on;
    `hook(idx, hidden)` may return an additive key bias that is added to the mask from that layer on."""
    stack = DecoderStack(model, packed=False)
    positions = torch.arange(embeds.shape[1], device=embeds.device)
    with masked_training_attention(embeds.device):
        out = stack.forward(embeds, positions, key_bias=hook, mask=mask)
    # Only the positions the loss reads reach the LM head: a large vocabulary over the whole prompt costs more
    # than the layers.
    return stack.logits(out.hidden[:, first:])


def _target_loss(logits: torch.Tensor, ids: torch.Tensor, n_prompt: int) -> torch.Tensor:
    # Next-token loss on the target part only; `logits` start at the prompt's last position (first = n_prompt - 1).
    return F.cross_entropy(logits[0, :-1].float(), ids[n_prompt:])


def compute_saliency(model, example: Example, layers: list[int]) -> dict[int, torch.Tensor]:
    """Eq. 7 at the input of every pruning layer, for the prompt tokens."""
    device = model.device
    ids = torch.cat([example.prompt_ids, example.target_ids]).to(device)
    n_prompt = example.prompt_ids.numel()
    captured: dict[int, torch.Tensor] = {}

    def hook(idx, hidden):
        if idx in layers:
            captured[idx] = hidden
        return None

    embeds = model.model.embed_tokens(ids)[None].detach().requires_grad_(True)
    with torch.enable_grad():
        logits = _layer_loop(model, embeds, causal_mask(ids.numel(), embeds.dtype, device), hook, n_prompt - 1)
        loss = _target_loss(logits, ids, n_prompt)
        # Gradients w.r.t. the hidden states only: the model's own weights get no .grad.
        grads = torch.autograd.grad(loss, [captured[i] for i in layers])
    return {idx: (g[0, :n_prompt] * captured[idx][0, :n_prompt]).sum(-1).abs().detach().float().cpu()
            for idx, g in zip(layers, grads, strict=True)}


def _standardise(x: torch.Tensor) -> torch.Tensor:
    x = torch.log(x + 1e-8)
    return (x - x.mean()) / (x.std() + 1e-6)


def ranking_loss(pred: torch.Tensor, sal: torch.Tensor, pairs: int, generator: torch.Generator) -> torch.Tensor:
    """Eq. 10 on `pairs` random token pairs: log(1 + exp(-(pi_i - pi_j) sign(pihat_i - pihat_j)))."""
    n = pred.numel()
    i = torch.randint(0, n, (pairs,), generator=generator)
    j = torch.randint(0, n, (pairs,), generator=generator)
    sign = torch.sign(sal[i] - sal[j]).to(pred.device)
    keep = sign != 0
    if not keep.any():
        return pred.sum() * 0.0
    return F.softplus(-(pred[i.to(pred.device)] - pred[j.to(pred.device)]) * sign)[keep].mean()


@dataclass
class StepLosses:
    """The terms of Eq. 9 for one example."""

    total: float
    lm: float
    magnitude: float
    ranking: float


class PredictorTrainer:
    """Optimises a PredictorBank for a frozen model."""

    def __init__(self, model, bank: PredictorBank, schedule: PruneSchedule, lr: float = 1e-3,
                 lambda_m: float = 1.0, lambda_r: float = 1.0, lm_weight: float = 1.0, pairs: int = 2048, seed: int = 0):
        self.model = model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.bank = bank.to(model.device).train()
        self.schedule = schedule
        self.layers = list(schedule.layers)
        self.optimizer = torch.optim.AdamW(self.bank.parameters(), lr=lr)
        self.lambda_m, self.lambda_r, self.lm_weight, self.pairs = lambda_m, lambda_r, lm_weight, pairs
        self.generator = torch.Generator().manual_seed(seed)

    def prepare(self, examples: Iterable[Example]) -> list[Example]:
        """Compute and attach the saliency of every example."""
        prepared = []
        for ex in examples:
            ex.saliency = compute_saliency(self.model, ex, self.layers)
            prepared.append(ex)
        return prepared

    def _soft_lm_loss(self, ex: Example) -> torch.Tensor:
        device = self.model.device
        ids = torch.cat([ex.prompt_ids, ex.target_ids]).to(device)
        n_prompt, n = ex.prompt_ids.numel(), ids.numel()
        protected = torch.zeros(n, dtype=torch.bool, device=device)
        protected[: self.schedule.head_tokens] = True
        protected[n_prompt - self.schedule.tail_size(n_prompt):] = True  # tail window and the target itself

        def hook(idx, hidden):
            if idx not in self.layers:
                return None
            score = self.bank.score(idx, hidden[0].detach())
            return F.logsigmoid(score).masked_fill(protected, 0.0).to(hidden.dtype)

        embeds = self.model.model.embed_tokens(ids)[None].detach()
        logits = _layer_loop(self.model, embeds, causal_mask(n, embeds.dtype, device), hook, n_prompt - 1)
        return _target_loss(logits, ids, n_prompt)

    def step(self, ex: Example) -> StepLosses:
        """One optimisation step on one example."""
        device = self.model.device
        ids = ex.prompt_ids.to(device)
        hidden_states: dict[int, torch.Tensor] = {}

        def capture(idx: int, hidden: torch.Tensor) -> None:
            if idx in self.layers:
                hidden_states[idx] = hidden
            return None

        with torch.no_grad():
            stack = DecoderStack(self.model, packed=False)
            stack.forward(stack.embed(ids[None]), torch.arange(ids.numel(), device=device), key_bias=capture,
                          stop=max(self.layers) + 1)
        magnitude = torch.zeros((), device=device)
        ranking = torch.zeros((), device=device)
        for idx in self.layers:
            pred = self.bank.score(idx, hidden_states[idx][0].detach()).float()
            target = _standardise(ex.saliency[idx]).to(device)
            magnitude = magnitude + F.mse_loss(pred, target)
            ranking = ranking + ranking_loss(pred, ex.saliency[idx], self.pairs, self.generator)
        magnitude, ranking = magnitude / len(self.layers), ranking / len(self.layers)
        lm = self._soft_lm_loss(ex) if self.lm_weight > 0 else torch.zeros((), device=device)
        total = self.lm_weight * lm + self.lambda_m * magnitude + self.lambda_r * ranking
        self.optimizer.zero_grad()
        total.backward()
        self.optimizer.step()
        return StepLosses(total.item(), lm.item(), magnitude.item(), ranking.item())

    def fit(self, examples: list[Example], epochs: int, progress=None) -> list[StepLosses]:
        """Train for `epochs` passes; `progress(i, total, losses)` is called after every step."""
        history = []
        total = epochs * len(examples)
        for epoch in range(epochs):
            order = torch.randperm(len(examples), generator=self.generator).tolist()
            for k, i in enumerate(order):
                losses = self.step(examples[i])
                history.append(losses)
                if progress is not None:
                    progress(epoch * len(examples) + k + 1, total, losses)
        self.bank.trained = True
        self.bank.eval()
        return history


def mean_loss(history: list[StepLosses], first: bool, fraction: float = 0.25) -> float:
    """Mean total loss over the first or last `fraction` of a training history."""
    k = max(1, math.ceil(len(history) * fraction))
    window = history[:k] if first else history[-k:]
    return sum(h.total for h in window) / len(window)


def bank_to_train(model, init: Optional[str], seed: int) -> PredictorBank:
    """The predictor bank a training starts from: the checkpoint `init` (a path or package:// URI), else a fresh bank
    for the model's Table 8 layers."""
    if init:
        return PredictorBank.load(resolve_path(init), model.config)
    return PredictorBank.for_model(model.config, table8_layers(model.config.num_hidden_layers), seed=seed)


def train_bank(model, bank: PredictorBank, cases: list[tuple[list[int], list[int]]], keep_ratio: float, lr: float,
               seed: int, epochs: int, output: Path) -> Path:
    """Train `bank` for `model` on (prompt ids, target ids) cases (saliency of the target's tokens, Eq. 7-10) with
    progress on stderr, and save it to `output`."""
    layers = list(bank.layers)
    trainer = PredictorTrainer(model, bank, PruneSchedule(tuple(layers), keep_ratio), lr=lr, seed=seed)
    examples = [Example(torch.tensor(prompt), torch.tensor(target)) for prompt, target in cases]
    print(f"{len(examples)} cases, mean prompt {sum(len(p) for p, _ in cases) / max(1, len(cases)):.0f} tokens",
          file=sys.stderr)
    started = time.monotonic()
    prepared = []
    for i, ex in enumerate(examples, 1):
        prepared.extend(trainer.prepare([ex]))
        print(f"\rsaliency {i}/{len(examples)}  {time.monotonic() - started:.0f} s", end="", file=sys.stderr, flush=True)

    def progress(i: int, total: int, losses) -> None:
        print(f"\rtrain {i}/{total} loss {losses.total:.3f} (lm {losses.lm:.3f})  {time.monotonic() - started:.0f} s",
              end="", file=sys.stderr, flush=True)

    history = trainer.fit(prepared, epochs, progress)
    output.parent.mkdir(parents=True, exist_ok=True)
    bank.save(output)
    print(f"\npredictors of layers {layers}: loss {mean_loss(history, True):.3f} -> {mean_loss(history, False):.3f}; "
          f"{output} in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return output
