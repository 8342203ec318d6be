"""`warehouse-predictor`: train the E-RECAP token-utility predictors on the embedded warehouse.

The generic predictor (`erecap-train`) learns from generated contexts with the
off-the-shelf model. In the warehouse the planner runs the model with the
warehouse adapter merged and answers with whole plans, so this trains the
predictors on that model and on oracle decision points: the saliency and the
soft-pruned LM loss (paper Eq. 7, 9, 10) are those of the oracle plan's tokens
as constrained decoding writes them. Progress on stderr.

    python -m brace_training.predictor_cli --episodes 4 --cases 48 --epochs 2
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from brace_common.config import resolve_path
from brace_training.predictor_training import bank_to_train, train_bank
from erecap_planner.adapter import merge_adapter
from erecap_planner.models import load_model

from .cli_args import WAREHOUSE_ADAPTER
from .finetune_cli import add_data_arguments, build_examples
from .saved_examples import save_examples


def main(argv=None) -> int:
    """Train and save the predictor bank."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_arguments(ap, episodes=4, seed=2000, max_tokens=1600, epochs=2)
    ap.add_argument("--adapter", default=WAREHOUSE_ADAPTER, help="LoRA adapter merged first ('' = the off-the-shelf model)")
    ap.add_argument("--cases", type=int, default=48, help="at most this many decision points (sampled)")
    ap.add_argument("--keep-ratio", type=float, default=0.7)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--init", help="continue from this predictor checkpoint")
    ap.add_argument("--output", type=Path, help="where the bank is saved (needed unless --save-examples)")
    args = ap.parse_args(argv)
    if args.output is None and args.save_examples is None:
        ap.error("--output is needed to train (or --save-examples to only build the cases)")
    rng = random.Random(args.seed)
    model, tok = load_model(args.model, device="auto", dtype="float32")
    if args.adapter:
        merge_adapter(model, resolve_path(args.adapter))
    bank = bank_to_train(model, args.init, args.seed)
    points = build_examples(tok, args.episodes, tuple(args.agents), args.seed, args.max_tokens, rng, args.detour,
                            floor_plan=args.floor_plan)
    if not points:
        ap.error(f"no decision point fits in --max-tokens {args.max_tokens}")
    points = rng.sample(points, min(args.cases, len(points)))
    if args.save_examples:
        print(f"saved {save_examples(args.save_examples, points)} cases to {args.save_examples}", file=sys.stderr)
        return 0
    train_bank(model, bank, [(p.prompt_ids, p.target_ids) for p in points], args.keep_ratio, args.lr, args.seed,
               args.epochs, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
