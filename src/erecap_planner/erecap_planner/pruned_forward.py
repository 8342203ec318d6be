"""E-RECAP pruned prefill and KV-cached decode for Llama / Qwen2 / Mistral (transformers 5.x).

The decoder layers are run one by one. Before each pruning layer the predictor
scores the tokens, `select_kept` keeps N_{l+1} of them (Eq. 4-5), and the hidden
states, their original positions and hence the rotary embeddings shrink with
them; every later layer, and its KV cache, holds only the kept tokens. The
causal mask is built on the compacted sequence (the kept tokens stay in order),
never from the gappy positions, which transformers would read as packed-sequence
boundaries. The decode that follows attends over each layer's shorter cache.
With keep ratio 1 and no budget the result equals the unmodified model.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import DynamicCache

from .predictor import PredictorBank
from .pruning import PruneSchedule, select_kept

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "mistral")


class CallAborted(RuntimeError):
    """The prefill was stopped between layers (deadline passed or call cancelled)."""


class PruningPass:
    """Which tokens each pruning layer keeps in one prompt's forward (Eq. 4-5 aimed at the budget B_t).

    Shared by the pruned prefill and pruning-aware training, so both select
    exactly the same tokens. The per-layer ratio is max(r, (min(B, N0)/N0)^(1/|P|)):
    a generous budget is used rather than undershot (a prompt already within B is
    kept whole, as every other compressor keeps it); the last pruning layer then
    caps at B. `protect` ([N0] bool) marks tokens that outrank every predictor
    score while the budget allows; the predictor still orders them.
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
        self.ratio, self.aiming = schedule.keep_ratio, False
        if token_budget is not None and layers:
            budget_ratio = (min(token_budget, n0) / n0) ** (1.0 / len(layers))
            self.ratio, self.aiming = max(self.ratio, budget_ratio), budget_ratio > self.ratio

    def keep(self, idx: int, hidden: torch.Tensor, positions: torch.Tensor) -> Optional[torch.Tensor]:
        """Indices (into the current sequence) that layer `idx` keeps, or None when it keeps every token.

        `hidden` [N_l, d] are the prompt tokens' states entering the layer, `positions` their original positions.
        """
        if idx not in self.schedule.layers:
            return None
        n = hidden.shape[0]
        budget = self.token_budget if idx == self.last_layer else None
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
    cache: DynamicCache               # per-layer KV of the tokens each layer kept
    kept_index: torch.Tensor          # original positions of the tokens after the last pruning layer
    lengths: list[int]                # N entering the model, then after each pruning layer
    next_position: int                # rotary position of the first generated token
    prune_ms: float                   # time spent scoring and selecting tokens

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
    """A causal LM with E-RECAP progressive pruning in its prefill."""

    def __init__(self, model, schedule: Optional[PruneSchedule] = None, predictors: Optional[PredictorBank] = None):
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
        self.backbone = model.model
        self._explicit_mask = config._attn_implementation not in ("sdpa", "flash_attention_2", "flash_attention_3")

    @property
    def device(self) -> torch.device:
        """Device of the model's weights."""
        return self.model.device

    def _causal_mask(self, n: int, dtype: torch.dtype) -> Optional[torch.Tensor]:
        # SDPA / flash derive causality from a missing mask; eager attention needs it spelled out.
        if not self._explicit_mask or n <= 1:
            return None
        return causal_mask(n, dtype, self.device)

    def _rotary(self, hidden, positions):
        # Rotary embeddings of the tokens' original positions; recomputed only when the set changes.
        position_ids = positions[None]
        return position_ids, self.backbone.rotary_emb(hidden, position_ids=position_ids)

    @staticmethod
    def _run_layer(layer, hidden, rotary, cache, mask):
        position_ids, cos_sin = rotary
        return layer(hidden, attention_mask=mask, position_ids=position_ids, past_key_values=cache,
                     use_cache=True, position_embeddings=cos_sin)

    @torch.inference_mode()
    def prefill(self, input_ids: torch.Tensor, token_budget: Optional[int] = None,
                stop_after_pruning: bool = False, all_logits: bool = False,
                protect: Optional[torch.Tensor] = None,
                should_abort: Optional[Callable[[], bool]] = None) -> PrefillResult:
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
        """
        if input_ids.dim() == 2:
            if input_ids.shape[0] != 1:
                raise ValueError("batch size must be 1")
            input_ids = input_ids[0]
        ids = input_ids.to(self.device)
        n0 = int(ids.numel())
        hidden = self.backbone.embed_tokens(ids)[None]
        positions = torch.arange(n0, device=self.device)
        cache = DynamicCache(config=self.config)
        schedule = self.schedule
        pruning = PruningPass(schedule, self.predictors, n0, token_budget, protect)
        lengths = [n0]
        prune_s = 0.0
        mask = self._causal_mask(n0, hidden.dtype)
        rotary = self._rotary(hidden, positions)
        for idx, layer in enumerate(self.backbone.layers[: self.config.num_hidden_layers]):
            if should_abort is not None and should_abort():
                raise CallAborted(f"stopped before layer {idx}")
            if idx in schedule.layers:
                _sync(self.device)
                t0 = time.perf_counter()
                keep = pruning.keep(idx, hidden[0], positions)
                if keep is not None:
                    hidden = hidden[:, keep]
                    positions = positions[keep]
                    mask = self._causal_mask(hidden.shape[1], hidden.dtype)
                    rotary = self._rotary(hidden, positions)
                _sync(self.device)
                prune_s += time.perf_counter() - t0
                lengths.append(int(hidden.shape[1]))
                if stop_after_pruning and idx == pruning.last_layer:
                    empty = torch.empty(0, device=self.device)
                    return PrefillResult(empty, cache, positions.clone(), lengths, n0, prune_s * 1000.0)
            hidden = self._run_layer(layer, hidden, rotary, cache, mask)
        hidden = self.backbone.norm(hidden)
        logits = self.model.lm_head(hidden[0] if all_logits else hidden[0, -1])
        return PrefillResult(logits, cache, positions.clone(), lengths, n0, prune_s * 1000.0)

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
        cache = prefill.cache
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
            hidden = self.backbone.embed_tokens(torch.tensor([[token]], device=self.device))
            rotary = self._rotary(hidden, torch.tensor([position], device=self.device))
            for layer in self.backbone.layers[: self.config.num_hidden_layers]:
                hidden = self._run_layer(layer, hidden, rotary, cache, None)
            logits = self.model.lm_head(self.backbone.norm(hidden)[0, -1])
            position += 1
        return result


def pruned_target_loss(model, schedule: PruneSchedule, predictors: PredictorBank, prompt_ids: torch.Tensor,
                       target_ids: torch.Tensor, token_budget: Optional[int] = None,
                       protect: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Next-token loss of `target_ids` read from the prompt as the pruned prefill leaves it.

    The prompt is pruned at every pruning layer exactly as `ErecapModel.prefill`
    prunes it (same PruningPass); the target tokens are never pruned and, like
    the decode, attend at each layer to the prompt tokens that layer kept. The
    loss is differentiable in the model's weights (pruning-aware fine-tuning);
    the selection itself is not.
    """
    backbone = model.model
    device = next(model.parameters()).device
    ids = torch.cat([prompt_ids.reshape(-1), target_ids.reshape(-1)]).to(device)
    n_prompt = int(prompt_ids.numel())
    pruning = PruningPass(schedule, predictors, n_prompt, token_budget, protect)
    hidden = backbone.embed_tokens(ids)[None]
    positions = torch.arange(ids.numel(), device=device)
    mask = causal_mask(ids.numel(), hidden.dtype, device)
    cos_sin = backbone.rotary_emb(hidden, position_ids=positions[None])
    with masked_training_attention(device):
        for idx, layer in enumerate(backbone.layers[: model.config.num_hidden_layers]):
            with torch.no_grad():
                keep = pruning.keep(idx, hidden[0, :n_prompt].detach(), positions[:n_prompt])
            if keep is not None:  # mask and rotary embeddings change only with the kept set
                keep = torch.cat([keep, torch.arange(n_prompt, hidden.shape[1], device=device)])
                n_prompt -= hidden.shape[1] - keep.numel()
                hidden, positions = hidden[:, keep], positions[keep]
                mask = causal_mask(hidden.shape[1], hidden.dtype, device)
                cos_sin = backbone.rotary_emb(hidden, position_ids=positions[None])
            hidden = layer(hidden, attention_mask=mask, position_ids=positions[None], past_key_values=None,
                           use_cache=False, position_embeddings=cos_sin)
    logits = model.lm_head(backbone.norm(hidden))[0, n_prompt - 1:-1]
    return torch.nn.functional.cross_entropy(logits.float(), target_ids.reshape(-1).to(device))
