"""`train-saved`: train a warehouse adapter or predictor bank from saved examples, on whatever accelerator is here.

`warehouse-finetune --save-examples F` and `warehouse-predictor --save-examples F`
build the oracle decision points where the world runs; this command trains
from those files alone (model, adapter, predictor), so it runs on a GPU host
that has PyTorch and transformers but not ROS. The model is float32 on the
first CUDA device when there is one, else on the CPU. Progress on stderr.

    python -m brace_training.train_saved_cli adapter --examples k8.jsonl.gz --init <adapter> --output new.safetensors
    python -m brace_training.train_saved_cli predictor --examples cases.jsonl.gz --adapter new.safetensors \\
        --init <predictor> --output pred.safetensors
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from brace_common.config import resolve_path
from brace_training.adapter_training import fit_and_save, training_pruning
from brace_training.cli_args import add_training_arguments, training_options
from brace_training.predictor_training import bank_to_train, train_bank
from brace_training.saved_examples import load_examples
from erecap_planner.adapter import merge_adapter
from erecap_planner.models import SMOLLM2, load_model


def _train_adapter(args, examples, model, options) -> None:
    if any(ex.token_budget is not None for ex in examples) and not args.predictor:
        raise SystemExit("train-saved: the examples hold pruning-aware ones (a token budget): --predictor is needed")
    pruning = training_pruning(model, args.predictor) if args.predictor else None
    init = Path(resolve_path(args.init)) if args.init else None
    fit_and_save(model, examples, args.output, args.rank, args.epochs, args.lr, init, pruning, options)


def _train_predictor(args, examples, model) -> None:
    if args.adapter:
        merge_adapter(model, resolve_path(args.adapter))
    cases = [(ex.prompt_ids, ex.target_ids) for ex in examples]
    train_bank(model, bank_to_train(model, args.init, args.seed), cases, args.keep_ratio, args.lr, args.seed, args.epochs,
               args.output)


def main(argv=None) -> int:
    """Train and save what the subcommand names."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    adapter = sub.add_parser("adapter", help="a LoRA adapter (warehouse-finetune's training)")
    adapter.add_argument("--rank", type=int, default=8)
    adapter.add_argument("--init", help="continue training this adapter (same rank; a path or package:// URI)")
    adapter.add_argument("--predictor", default="",
                         help="E-RECAP predictor bank of the pruning-aware examples (needed when there are any)")
    add_training_arguments(adapter)
    predictor = sub.add_parser("predictor", help="an E-RECAP predictor bank (warehouse-predictor's training)")
    predictor.add_argument("--adapter", default="", help="LoRA adapter merged first ('' = the off-the-shelf model)")
    predictor.add_argument("--init", help="continue from this predictor checkpoint")
    predictor.add_argument("--keep-ratio", type=float, default=0.7)
    for p in (adapter, predictor):
        p.add_argument("--examples", type=Path, nargs="+", required=True, help="saved examples files (--save-examples)")
        p.add_argument("--limit", type=int, default=0, help="at most this many examples, sampled (0 = all)")
        p.add_argument("--model", default=SMOLLM2)
        p.add_argument("--epochs", type=int, default=1 if p is adapter else 2)
        p.add_argument("--lr", type=float, default=1e-3)
        p.add_argument("--seed", type=int, default=0, help="sampling and initialisation seed")
        p.add_argument("--output", type=Path, required=True)
    args = ap.parse_args(argv)
    try:
        examples = load_examples(args.examples)
    except (OSError, ValueError) as exc:
        ap.error(str(exc))
    if not examples:
        ap.error("the examples files hold no example")
    if 0 < args.limit < len(examples):
        examples = random.Random(args.seed).sample(examples, args.limit)
    model, _ = load_model(args.model, device="auto", dtype="float32")
    print(f"{len(examples)} examples, mean prompt {sum(len(e.prompt_ids) for e in examples) / len(examples):.0f} "
          f"tokens, on {model.device}", file=sys.stderr)
    if args.what == "adapter":
        _train_adapter(args, examples, model, training_options(ap, args))
    else:
        _train_predictor(args, examples, model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
