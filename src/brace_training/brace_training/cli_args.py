"""The command-line arguments the adapter fine-tuning commands share (training, the adapters they evaluate)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Optional

from erecap_planner.models import SMOLLM2

WAREHOUSE_ADAPTER = "package://sim_bridges/models/smollm2-135m-instruct-warehouse-lora.safetensors"
"""The warehouse adapter the other domains' adapters continue from."""

PREDICTOR = "package://sim_bridges/models/smollm2-135m-instruct-warehouse-erecap.safetensors"
"""The warehouse E-RECAP predictor bank."""


def add_adapter_arguments(ap: argparse.ArgumentParser, output: Optional[Path], examples: int, lr: float, budgets: list[int],
                          detour: str) -> None:
    """--model, --examples, --detour, --epochs, --rank, --lr, --init, --output, --evaluate-only, --adapters,
    --budgets and --predictor, with this command's defaults (`detour` says what a detour is here)."""
    ap.add_argument("--model", default=SMOLLM2)
    ap.add_argument("--examples", type=int, default=examples, help="at most this many training examples (sampled)")
    ap.add_argument("--detour", type=float, default=0.25, help=f"probability that {detour} instead of the oracle's")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--lr", type=float, default=lr)
    ap.add_argument("--init", default=WAREHOUSE_ADAPTER, help="adapter to continue from ('' = from scratch)")
    ap.add_argument("--output", type=Path, default=output)
    ap.add_argument("--evaluate-only", action="store_true", help="no training: evaluate --adapters")
    ap.add_argument("--adapters", nargs="*", default=None, help="adapters to evaluate (default: --init and --output)")
    ap.add_argument("--budgets", type=int, nargs="*", default=budgets,
                    help="evaluate unpruned (0) and under E-RECAP at these B_t")
    ap.add_argument("--predictor", default=PREDICTOR, help="E-RECAP predictor bank (pruned training and evaluation)")
    add_training_arguments(ap)


def add_training_arguments(ap: argparse.ArgumentParser) -> None:
    """--dtype, --batch-size, --prompt-gradient, --forced-weight and --loss-mean: how a round computes
    (TrainingOptions)."""
    ap.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                    help="auto: bfloat16 autocast where the CPU computes bf16 natively, else float32")
    ap.add_argument("--batch-size", type=int, default=1, help="examples of similar length per optimizer step")
    ap.add_argument("--prompt-gradient", default="detached", choices=["detached", "full"],
                    help="detached: the prompt runs without gradient, only the plan tokens with it")
    ap.add_argument("--forced-weight", type=float, default=0.1,
                    help="loss weight of a plan token the constrained decoder forces (a chosen one weighs 1)")
    ap.add_argument("--loss-mean", default="token", choices=["token", "example"],
                    help="token: every weighted plan token of the round weighs the same; example: each example's mean")


def training_options(ap: argparse.ArgumentParser, args: argparse.Namespace):
    """The TrainingOptions of the parsed --dtype, --batch-size, --prompt-gradient, --forced-weight and --loss-mean (an
    invalid one stops the command naming it)."""
    # heavy: adapter_training imports torch
    from .adapter_training import TrainingOptions

    try:
        return TrainingOptions(args.dtype, args.batch_size, args.prompt_gradient, args.forced_weight, args.loss_mean)
    except ValueError as exc:
        ap.error(str(exc))
