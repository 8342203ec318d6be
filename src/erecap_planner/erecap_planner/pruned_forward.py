"""E-RECAP pruned prefill and KV-cached decode for Llama / Qwen2 / Mistral (on `transformer.DecoderStack`).

The decoder layers are run one by one. Before each pruning layer the predictor
scores the tokens, `select_kept` keeps N_{l+1} of them (Eq. 4-5), and the hidden
states, their original positions and hence the rotary embeddings shrink with
them; every later layer, and its KV cache, holds only the kept tokens. The
causal mask is built on the compacted sequence (the kept tokens stay in order),
never from the gappy positions. The decode that follows attends over each
layer's shorter cache. With keep ratio 1 and no budget the result equals the
unmodified model.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from .predictor import PredictorBank
from .prefix_cache import PrefixCache, PrefixEntry
from .pruning import PruneSchedule, select_kept
from .transformer import SUPPORTED_MODEL_TYPES, CallAborted, DecoderStack, KVCache

__all__ = ["SUPPORTED_MODEL_TYPES", "CallAborted", "DecodeResult", "ErecapModel", "PrefillResult", "PruningPass",
           "causal_mask", "masked_training_attention", "pruned_target_loss"]


class PruningPass:
    """Which tokens each pruning layer keeps in one prompt's forward (Eq. 4-5 aimed at the budget B_t).

    Shared by the pruned prefill and pruning-aware training, so both select
    exactly the same tokens. The per-layer ratio is max(r, (min(B, N0)/N0)^(1/|P|)):
    a generous budget is used rather than undershot (a prompt already within B is
    kept whole, as every other compressor keeps it); the last pruning layer then
    caps at B. With the schedule's `first_cut` (two-stage) the first pruning
    layer keeps at most ceil(first_cut B) tokens and the ratio aims from there to B
    over the remaining layers. `protect` ([N0] bool) marks tokens that outrank
    every predictor score while the budget allows; the predictor still orders them.
    """

    def __init__(self, schedule: PruneSchedule, predictors: Optional[PredictorBank], n0: int,
                 token_budget: Optional[int] = None, protect: Optional[torch.Tensor] = None):
        self.schedule = schedule
        self.predictors = predictors
        self.token_budget = token_budget
        self.protect = protect
        layers = list(schedule.layers)
        if token_budget is not None and token_budget < n0 and not layers:
            raise ValueError("a token budget below the prompt length needs at least one pruning layer")
        self.last_layer = layers[-1] if layers else -1
        self.first_layer = layers[0] if layers else -1
        self.first_keep: Optional[int] = None
        aim_from, aim_layers = n0, len(layers)
        if token_budget is not None and layers and schedule.first_cut > 0:
            cut = math.ceil(schedule.first_cut * token_budget)
            if cut < n0:
                self.first_keep, aim_from, aim_layers = cut, cut, len(layers) - 1
        self.ratio, self.aiming = schedule.keep_ratio, False
        if token_budget is not None and aim_layers > 0:
            budget_ratio = (min(token_budget, aim_from) / aim_from) ** (1.0 / aim_layers)
            self.ratio, self.aiming = max(self.ratio, budget_ratio), budget_ratio > self.ratio

    def keep(self, idx: int, hidden: torch.Tensor, positions: torch.Tensor) -> Optional[torch.Tensor]:
        """Indices (into the current sequence) that layer `idx` keeps, or None when it keeps every token.

        `hidden` [N_l, d] are the prompt tokens' states entering the layer, `positions` their original positions.
        """
        if idx not in self.schedule.layers:
            return None
        n = hidden.shape[0]
        budget = self.token_budget if idx == self.last_layer else None
        if idx == self.first_layer and self.first_keep is not None:
            n_next = min(n, self.first_keep, budget if budget is not None else n)
        else:
            n_next = self.schedule.next_length(n, budget, self.ratio, round_up=self.aiming)
        if n_next >= n:
            return None
        scores = self.predictors.score(idx, hidden)
        if self.protect is not None:
            scores = scores.float()
            lift = (scores.max() - scores.min() + 1.0).clamp(min=1.0)
            scores = scores + self.protect.to(hidden.device)[positions].float() * lift
        return select_kept(scores, n_next, self.schedule.head_tokens, self.schedule.tail_size(n))


def causal_mask(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """[1, 1, n, n] additive causal mask (0 on and below the diagonal, the dtype's minimum above)."""
    return torch.full((n, n), torch.finfo(dtype).min, dtype=dtype, device=device).triu(1)[None, None]


def masked_training_attention(device: torch.device):
    """Attention kernel for training forwards that pass an explicit additive mask.

    CUDA's memory-efficient SDPA kernel cannot back-propagate through an additive
    mask of arbitrary length ("LSE is not correctly aligned", seen on an H100);
    the math kernel can. CPU keeps its default kernel.
    """
    return sdpa_kernel(SDPBackend.MATH) if device.type == "cuda" else contextlib.nullcontext()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class PrefillResult:
    """What the pruned prefill leaves for the decode and for accounting."""

    logits: torch.Tensor              # [vocab] next-token logits after the prompt
    cache: KVCache                    # per-layer KV of the tokens each layer kept
    kept_index: torch.Tensor          # original positions of the tokens after the last pruning layer
    lengths: list[int]                # N entering the model, then after each pruning layer
    next_position: int                # rotary position of the first generated token
    prune_ms: float                   # time spent scoring and selecting tokens
    tokens_reused: int = 0            # prompt tokens whose early-layer prefill came from the prefix cache

    @property
    def tokens_after(self) -> int:
        """Planner-input tokens after compression (the last pruning layer's output)."""
        return int(self.kept_index.numel())


@dataclass
class DecodeResult:
    """Greedy decode output."""

    token_ids: list[int] = field(default_factory=list)
    stop_reason: str = "max_tokens"   # eos | max_tokens | deadline | stop


class ErecapModel:
    """A causal LM with E-RECAP progressive pruning in its prefill.

    `stack` shares one packed DecoderStack between several ErecapModels of the
    same model (the planner's pruned and unpruned paths); without it one is
    built with `decode_weights`.
    """

    def __init__(self, model, schedule: Optional[PruneSchedule] = None, predictors: Optional[PredictorBank] = None,
                 stack: Optional[DecoderStack] = None, decode_weights: str = "model", cache_reserve: int = 128):
        config = model.config
        if config.model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(f"model type '{config.model_type}' is not supported (supported: {SUPPORTED_MODEL_TYPES})")
        self.model = model.eval()
        self.config = config
        self.schedule = schedule or PruneSchedule(layers=(), keep_ratio=1.0)
        self.schedule.validate(config.num_hidden_layers)
        if self.schedule.layers and predictors is None:
            raise ValueError("pruning layers are set but no predictor bank was given")
        if predictors is not None:
            predictors.check_compatible(config, list(self.schedule.layers))
            predictors.to(model.device)
        self.predictors = predictors
        self.stack = stack if stack is not None else DecoderStack(model, packed=True, decode_weights=decode_weights)
        self.cache_reserve = cache_reserve

    @property
    def device(self) -> torch.device:
        """Device of the model's weights."""
        return self.model.device

    @torch.inference_mode()
    def prefill(self, input_ids: torch.Tensor, token_budget: Optional[int] = None,
                stop_after_pruning: bool = False, all_logits: bool = False,
                protect: Optional[torch.Tensor] = None,
                should_abort: Optional[Callable[[], bool]] = None,
                prefix: Optional[PrefixCache] = None) -> PrefillResult:
        """Run the prompt through the model, pruning at the schedule's layers.

        `token_budget` caps the tokens left after the last pruning layer (B_t);
        the per-layer ratio is raised to (B_t / N)^(1/|P|) when r alone would undershoot it,
        so a prompt of at most B_t tokens is not pruned. Without a budget, r alone applies.
        `stop_after_pruning` stops after the last pruning layer (prompt-level
        mode: only the kept positions are wanted; logits are then empty).
        `all_logits` returns logits for every kept position (for tests).
        `protect` ([N] bool) marks tokens that outrank every predictor score
        (protected context blocks); they are kept while the budget allows, and
        when it does not, the predictor chooses among them too.
        `should_abort()` is checked before every layer; true raises CallAborted.
        `prefix` reuses the previous prompt's prefill for the common prefix in
        the layers before the first pruning layer (exact) and keeps this one's.
        """
        if input_ids.dim() == 2:
            if input_ids.shape[0] != 1:
                raise ValueError("batch size must be 1")
            input_ids = input_ids[0]
        ids = input_ids.to(self.device)
        n0 = int(ids.numel())
        stack = self.stack
        positions = torch.arange(n0, device=self.device)
        cache = KVCache(stack.num_layers, self.cache_reserve, expected=n0)
        start, reused = 0, 0
        if prefix is not None:
            start = self.schedule.layers[0] if self.schedule.layers else stack.num_layers
            hidden, reused = self._early_layers(ids, cache, start, prefix, should_abort)
        else:
            hidden = stack.embed(ids[None])
        pruning = PruningPass(self.schedule, self.predictors, n0, token_budget, protect)
        lengths = [n0]
        prune_s = [0.0]

        def select(idx: int, h: torch.Tensor, pos: torch.Tensor) -> Optional[torch.Tensor]:
            if idx not in self.schedule.layers:
                return None
            _sync(self.device)
            t0 = time.perf_counter()
            keep = pruning.keep(idx, h, pos)
            _sync(self.device)
            prune_s[0] += time.perf_counter() - t0
            lengths.append(int(h.shape[0]) if keep is None else int(keep.numel()))
            return keep

        if stop_after_pruning and pruning.last_layer >= 0:
            out = stack.forward(hidden, positions, cache, start=start, stop=pruning.last_layer, select=select,
                                should_abort=should_abort)
            keep = select(pruning.last_layer, out.hidden[0], out.positions)
            kept = out.positions if keep is None else out.positions[keep]
            return PrefillResult(torch.empty(0, device=self.device), cache, kept.clone(), lengths, n0,
                                 prune_s[0] * 1000.0, reused)
        out = stack.forward(hidden, positions, cache, start=start, select=select, should_abort=should_abort)
        if all_logits and reused:
            raise ValueError("all_logits needs the whole prompt computed (no prefix reuse)")
        logits = stack.logits(out.hidden[0] if all_logits else out.hidden[0, -1])
        return PrefillResult(logits, cache, out.positions.clone(), lengths, n0, prune_s[0] * 1000.0, reused)

    def _early_layers(self, ids: torch.Tensor, cache: KVCache, upto: int, prefix: PrefixCache,
                      should_abort: Optional[Callable[[], bool]]) -> tuple[torch.Tensor, int]:
        """Layers [0, upto) of the prompt, reusing the cached common prefix; the hidden states entering `upto`."""
        stack = self.stack
        n0 = int(ids.numel())
        p = prefix.common_prefix(ids, upto)
        entry = prefix.entry
        for layer in range(upto):
            if p:
                cache.append(layer, entry.keys[layer][:, :, :p], entry.values[layer][:, :, :p])
        out = stack.forward(stack.embed(ids[None, p:]), torch.arange(p, n0, device=self.device), cache, stop=upto,
                            should_abort=should_abort)
        hidden = torch.cat([entry.hidden[:, :p], out.hidden], dim=1) if p else out.hidden
        views = [cache.view(layer) for layer in range(upto)]
        prefix.store(PrefixEntry(ids.clone(), upto, [k for k, _ in views], [v for _, v in views], hidden))
        prefix.record(p, n0)
        return hidden, p

    @torch.inference_mode()
    def decode(self, prefill: PrefillResult, max_new_tokens: int, eos_token_ids: tuple[int, ...] = (),
               deadline: Optional[float] = None, should_stop: Optional[Callable[[list[int]], bool]] = None) -> DecodeResult:
        """Greedy decode on the pruned KV cache.

        Stops at an EOS token, after `max_new_tokens`, when time.monotonic()
        passes `deadline`, or when `should_stop(tokens)` returns true.
        """
        result = DecodeResult()
        logits = prefill.logits
        position = prefill.next_position
        while True:
            token = int(torch.argmax(logits))
            result.token_ids.append(token)
            if token in eos_token_ids:
                result.stop_reason = "eos"
                break
            if len(result.token_ids) >= max_new_tokens:
                result.stop_reason = "max_tokens"
                break
            if should_stop is not None and should_stop(result.token_ids):
                result.stop_reason = "stop"
                break
            if deadline is not None and time.monotonic() >= deadline:
                result.stop_reason = "deadline"
                break
            ids = torch.tensor([[token]], device=self.device)
            logits = self.stack.extend(prefill.cache, ids, position, last_only=True)[0, -1]
            position += 1
        return result


def pruned_target_loss(model, schedule: PruneSchedule, predictors: PredictorBank, prompt_ids: torch.Tensor,
                       target_ids: torch.Tensor, token_budget: Optional[int] = None,
                       protect: Optional[torch.Tensor] = None, weights: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Next-token loss of `target_ids` read from the prompt as the pruned prefill leaves it (mean over the target
    tokens, or weighted by `weights`, one per target token).

    The prompt is pruned at every pruning layer exactly as `ErecapModel.prefill`
    prunes it (same PruningPass); the target tokens are never pruned and, like
    the decode, attend at each layer to the prompt tokens that layer kept. The
    loss is differentiable in the model's weights (pruning-aware fine-tuning);
    the selection itself is not.
    """
    stack = DecoderStack(model, packed=False)
    device = next(model.parameters()).device
    ids = torch.cat([prompt_ids.reshape(-1), target_ids.reshape(-1)]).to(device)
    n_prompt = [int(prompt_ids.numel())]
    pruning = PruningPass(schedule, predictors, n_prompt[0], token_budget, protect)

    def select(idx: int, hidden: torch.Tensor, positions: torch.Tensor) -> Optional[torch.Tensor]:
        n = n_prompt[0]
        with torch.no_grad():
            keep = pruning.keep(idx, hidden[:n].detach(), positions[:n])
        if keep is None:
            return None
        n_prompt[0] = int(keep.numel())
        return torch.cat([keep, torch.arange(n, hidden.shape[0], device=device)])  # the target is never pruned

    with masked_training_attention(device):
        out = stack.forward(stack.embed(ids[None]), torch.arange(ids.numel(), device=device), select=select)
    logits = stack.logits(out.hidden)[0, n_prompt[0] - 1:-1]
    if weights is None:
        return torch.nn.functional.cross_entropy(logits.float(), target_ids.reshape(-1).to(device))
    ce = torch.nn.functional.cross_entropy(logits.float(), target_ids.reshape(-1).to(device), reduction="none")
    w = weights.reshape(-1).to(device)
    return (ce * w).sum() / w.sum().clamp(min=1e-8)
