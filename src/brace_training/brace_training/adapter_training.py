"""Train low-rank adapters (LoRA) of the planner LM on (prompt, plan) pairs and save them.

Training wraps the attention projections with trainable low-rank updates
(W x + s B A x, A random, B zero at start) and minimises the LM loss on the
plan tokens only, weighted on the tokens the decoder chooses, with the prompt
detached by default (TrainingOptions, plan_batches). An example with a token
budget is trained pruning-aware: its prompt is pruned inside the forward
exactly as E-RECAP prunes it at inference (`pruned_target_loss`), so the
adapter learns to plan from what E-RECAP keeps. The planner merges the saved
adapter at load (erecap_planner.adapter.merge_adapter).
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from brace_common.config import resolve_path
from erecap_planner.adapter import AdapterMismatchError, merge_adapter, projections, signature
from erecap_planner.models import load_model
from erecap_planner.precision import resolve
from erecap_planner.predictor import PredictorBank
from erecap_planner.pruned_forward import pruned_target_loss
from erecap_planner.pruning import PruneSchedule, table8_layers

from .plan_batches import bucketed, detached_loss, full_loss, token_weights


class LoRALinear(nn.Module):
    """y = W x + scale * B (A x), W frozen."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float):
        super().__init__()
        self.base = base
        self.scale = alpha / rank
        self.lora_a = nn.Parameter(torch.empty(rank, base.in_features))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Base projection plus the low-rank update."""
        return self.base(x) + (x @ self.lora_a.T @ self.lora_b.T) * self.scale


@dataclass
class PlanExample:
    """One training pair: the rendered prompt's token ids and the target plan's token ids (as the decoder writes them)."""

    prompt_ids: list[int]
    target_ids: list[int]
    token_budget: Optional[int] = None     # train under E-RECAP pruning to this B_t (needs `pruning`)
    protect: Optional[list[bool]] = None   # protected prompt tokens (RenderedContext.protected)
    choice: Optional[list[bool]] = None    # per target token: the decoder chooses it (None: every token weighs 1)


PROMPT_GRADIENTS = ("full", "detached")
LOSS_MEANS = ("token", "example")


@dataclass(frozen=True)
class TrainingOptions:
    """How a round computes on this CPU, and what its loss weighs (docs/training.md, "Training speed").

    `dtype` 'auto' trains under bfloat16 autocast where the CPU computes bf16 natively (AMX, AVX512-BF16; as
    erecap_planner.precision decides for the planner) and in float32 elsewhere; `batch_size` examples of similar
    length share one optimizer step; `prompt_gradient` 'detached' runs the prompt without gradient (plan_batches);
    `forced_weight` is the loss weight of a plan token the constrained decoder forces (a choice weighs 1).
    `loss_mean` 'token' gives every weighted plan token of the round the same weight, whatever its plan's length;
    'example' averages within each example first, so a long plan's first choice weighed a fraction of a one-step
    plan's and a round learned `wait` where the oracle moves (docs/training.md)."""

    dtype: str = "auto"
    batch_size: int = 1
    prompt_gradient: str = "detached"
    forced_weight: float = 0.1
    loss_mean: str = "token"

    def __post_init__(self) -> None:
        if self.dtype not in ("auto", "float32", "bfloat16"):
            raise ValueError(f"dtype '{self.dtype}' is not one of auto, float32, bfloat16")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.prompt_gradient not in PROMPT_GRADIENTS:
            raise ValueError(f"prompt_gradient '{self.prompt_gradient}' is not one of {', '.join(PROMPT_GRADIENTS)}")
        if not 0.0 <= self.forced_weight <= 1.0:
            raise ValueError(f"forced_weight {self.forced_weight} is outside [0, 1]")
        if self.loss_mean not in LOSS_MEANS:
            raise ValueError(f"loss_mean '{self.loss_mean}' is not one of {', '.join(LOSS_MEANS)}")

    def autocast_dtype(self, device: torch.device) -> Optional[torch.dtype]:
        """bfloat16 where this round autocasts to it, None for float32."""
        dtype = self.dtype
        if dtype == "auto":
            dtype = resolve(device.type if device.type == "cpu" else "auto", "auto", "model").dtype
        return torch.bfloat16 if dtype == "bfloat16" else None


def describe(options: TrainingOptions, device: torch.device) -> str:
    """One line naming what a round runs: dtype (as resolved here), batch size, prompt gradient, forced weight."""
    autocast = options.autocast_dtype(device)
    return (f"{'bfloat16 autocast' if autocast is not None else 'float32'} on {device.type}, batch "
            f"{options.batch_size}, prompt gradient {options.prompt_gradient}, forced tokens weigh "
            f"{options.forced_weight:g}, loss mean per {options.loss_mean}")


REFERENCE = TrainingOptions(dtype="float32", batch_size=1, prompt_gradient="full", forced_weight=1.0,
                            loss_mean="example")
"""The rounds before the training path was sped up: float32, one example per step, every plan token weighing 1,
each example's loss its own mean."""


def example_weight(ex: PlanExample, forced_weight: float) -> float:
    """The summed loss weight of an example's plan tokens."""
    return sum(token_weights(ex.choice, len(ex.target_ids), forced_weight))


def token_scale(batch: list[PlanExample], forced_weight: float, mean_weight: float) -> float:
    """What turns a batch's weighted mean loss into its share of the round's per-token loss: the batch's summed
    weight over that of `len(batch)` average examples (`mean_weight` each)."""
    return sum(example_weight(ex, forced_weight) for ex in batch) / (mean_weight * len(batch))


def target_loss(model, prompt_ids: list[int], target_ids: list[int], device) -> torch.Tensor:
    """Mean cross-entropy of `target_ids` after `prompt_ids` (teacher-forced).

    Only the positions that predict a target token reach the LM head: with a large vocabulary (Gemma's 262k) the
    head over the whole prompt would cost more than the layers."""
    ids = torch.tensor([prompt_ids + target_ids], device=device)
    logits = model(input_ids=ids, logits_to_keep=len(target_ids) + 1).logits[0, :-1]
    return torch.nn.functional.cross_entropy(logits.float(), torch.tensor(target_ids, device=device))


def train_adapter(model, examples: list[PlanExample], rank: int = 8, alpha: float = 16.0,
                  epochs: int = 1, lr: float = 1e-3, seed: int = 0,
                  progress: Optional[Callable[[int, int, float], None]] = None,
                  init: Optional[dict[str, torch.Tensor]] = None,
                  pruning: Optional[tuple[PruneSchedule, PredictorBank]] = None,
                  options: TrainingOptions = TrainingOptions()) -> dict[str, torch.Tensor]:
    """Train LoRA on `examples` (loss on target tokens); return the adapter tensors. `model` is left unchanged.

    `init` (a saved adapter's tensors, same rank) continues an earlier training instead of starting from B = 0.
    `pruning` (schedule, predictors) is the E-RECAP that examples with a token budget are trained under (one
    example per forward, the whole prompt with gradient). `options`: dtype, batching, prompt gradient, weights;
    `progress` is called once per optimizer step with the examples done so far.
    """
    if pruning is None and any(ex.token_budget is not None for ex in examples):
        raise ValueError("examples with a token budget need `pruning` (schedule, predictors)")
    torch.manual_seed(seed)
    rng = random.Random(seed)
    wrapped: dict[str, LoRALinear] = {}
    for name, linear in projections(model).items():
        parent = model.get_submodule(name.rsplit(".", 1)[0])
        wrapped[name] = LoRALinear(linear, rank, alpha).to(linear.weight.device)
        if init is not None:
            a, b = init[f"{name}.lora_a"], init[f"{name}.lora_b"]
            if a.shape != wrapped[name].lora_a.shape:
                raise AdapterMismatchError(f"init adapter has rank {a.shape[0]}, training uses rank {rank}")
            with torch.no_grad():
                wrapped[name].lora_a.copy_(a.float())
                wrapped[name].lora_b.copy_(b.float() / wrapped[name].scale)  # saved with the scale folded in
        setattr(parent, name.rsplit(".", 1)[-1], wrapped[name])
    for p in model.parameters():
        p.requires_grad_(False)
    params = [p for w in wrapped.values() for p in (w.lora_a, w.lora_b)]
    for p in params:
        p.requires_grad_(True)
    optim = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    device = next(model.parameters()).device
    autocast = options.autocast_dtype(device)
    loss_of = detached_loss if options.prompt_gradient == "detached" else full_loss
    mean_weight = sum(example_weight(ex, options.forced_weight) for ex in examples) / max(1, len(examples))
    pruned = [i for i, ex in enumerate(examples) if ex.token_budget is not None]
    plain = [i for i, ex in enumerate(examples) if ex.token_budget is None]
    model.train()
    try:
        steps: list[list[int]] = []
        for _ in range(epochs):
            epoch = [[i] for i in pruned] + [[plain[j] for j in b] for b in bucketed(
                [len(examples[i].prompt_ids) + len(examples[i].target_ids) for i in plain], options.batch_size, rng)]
            steps += rng.sample(epoch, len(epoch))
        done = 0
        for batch in steps:
            with torch.autocast(device.type, dtype=autocast, enabled=autocast is not None):
                first = examples[batch[0]]
                if first.token_budget is not None:
                    protect = torch.tensor(first.protect) if first.protect is not None else None
                    weights = torch.tensor(token_weights(first.choice, len(first.target_ids), options.forced_weight))
                    loss = pruned_target_loss(model, *pruning, torch.tensor(first.prompt_ids),
                                              torch.tensor(first.target_ids), first.token_budget, protect, weights)
                else:
                    loss = loss_of(model, [examples[i] for i in batch], options.forced_weight, device)
                if options.loss_mean == "token":
                    loss = loss * token_scale([examples[i] for i in batch], options.forced_weight, mean_weight)
            optim.zero_grad()
            loss.backward()
            optim.step()
            done += len(batch)
            if progress is not None:
                progress(done, len(examples) * epochs, loss.item())
    finally:
        model.eval()
        for name, w in wrapped.items():
            parent = model.get_submodule(name.rsplit(".", 1)[0])
            setattr(parent, name.rsplit(".", 1)[-1], w.base)
    tensors = {}
    for name, w in wrapped.items():
        tensors[f"{name}.lora_a"] = w.lora_a.detach().cpu().contiguous()
        tensors[f"{name}.lora_b"] = (w.lora_b.detach() * w.scale).cpu().contiguous()  # scale folded into B
    return tensors


def save_adapter(tensors: dict[str, torch.Tensor], model, path: str | Path, dtype=torch.float16) -> Path:
    """Write the adapter with the base model's signature."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.to(dtype) for k, v in tensors.items()}, str(path), metadata=signature(model))
    return path




def prune_share(model, examples: list[PlanExample], share: float, budget: int, predictor_path: str,
                rng: random.Random) -> Optional[tuple[PruneSchedule, PredictorBank]]:
    """Mark a `share` of the examples longer than `budget` to train under E-RECAP pruning to B = `budget` (Table 8
    layers, keep 0.7, the predictor bank at `predictor_path`); the (schedule, bank) to train with, None for share 0."""
    if share <= 0:
        return None
    for ex in examples:
        if len(ex.prompt_ids) > budget and rng.random() < share:
            ex.token_budget = budget
    return training_pruning(model, predictor_path)


def training_pruning(model, predictor_path: str) -> tuple[PruneSchedule, PredictorBank]:
    """The E-RECAP pruning-aware examples train under: Table 8 layers, keep 0.7, the bank at `predictor_path` on the
    model's device."""
    bank = PredictorBank.load(resolve_path(predictor_path), model.config).to(model.device)
    return PruneSchedule(tuple(table8_layers(model.config.num_hidden_layers)), 0.7), bank


def evaluation_model(model_name: str, adapter: str, predictor: str, budgets, first_cut: float):
    """What an oracle-agreement evaluation runs: the fp32 CPU model and tokenizer with `adapter` merged ('' = none),
    and, when a budget is not 0, the predictor bank and the schedule (Table 8 layers, keep 0.7, `first_cut`)."""
    model, tok = load_model(model_name, device="cpu", dtype="float32")
    if adapter:
        merge_adapter(model, resolve_path(adapter))
    bank = PredictorBank.load(resolve_path(predictor), model.config) if any(budgets) else None
    schedule = PruneSchedule(tuple(table8_layers(model.config.num_hidden_layers)), 0.7, first_cut=first_cut)
    return model, tok, bank, schedule


def fit_and_save(model, examples: list[PlanExample], output: Path, rank: int = 8, epochs: int = 1, lr: float = 1e-3,
                 init: Optional[Path] = None, pruning: Optional[tuple[PruneSchedule, PredictorBank]] = None,
                 options: TrainingOptions = TrainingOptions()) -> Path:
    """Train an adapter (from `init`'s tensors when given) with progress on stderr, and save it to `output`."""
    started, window = time.monotonic(), []

    def progress(i: int, total: int, loss: float) -> None:
        window.append(loss)
        if len(window) >= 10 or i == total:
            elapsed = time.monotonic() - started
            print(f"\r[{i}/{total}] loss {sum(window) / len(window):.3f}  {elapsed:.0f} s  {i / elapsed:.2f} examples/s",
                  end="", file=sys.stderr, flush=True)
            window.clear()

    print(f"training: {describe(options, next(model.parameters()).device)}", file=sys.stderr)
    tensors = train_adapter(model, examples, rank=rank, epochs=epochs, lr=lr, progress=progress,
                            init=load_file(str(init)) if init else None, pruning=pruning, options=options)
    path = save_adapter(tensors, model, output)
    elapsed = time.monotonic() - started
    print(f"\nadapter: {path} ({path.stat().st_size / 1e6:.1f} MB) in {elapsed:.0f} s, "
          f"{len(examples) * epochs / max(elapsed, 1e-9):.2f} examples/s", file=sys.stderr)
    return path
