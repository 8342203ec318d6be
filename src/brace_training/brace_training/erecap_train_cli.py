"""`erecap-train`: train E-RECAP predictors on generated embodied contexts (with a progress bar).

    erecap-train --model smollm2-135m-instruct --cases 64 --tokens 768 --epochs 2 \\
                 --out ~/.cache/brace_ros/predictors/smollm2-erecap.safetensors

Saliency is computed once per case (one forward + backward of the frozen
model), then the predictors are trained for the given epochs. The checkpoint
records the model architecture and pruning layers it belongs to.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from erecap_planner.models import SMOLLM2, cache_root, load_model
from erecap_planner.predictor import PredictorBank
from erecap_planner.pruning import PruneSchedule, table8_layers

from .datagen import make_case
from .predictor_training import Example, PredictorTrainer, mean_loss, target_text

REQUEST = "Plan the next step for agent_0."


def build_examples(tokenizer, cases: int, tokens: int, prefix: str = "train") -> list[Example]:
    """Generated cases as (prompt, target) token examples."""
    examples = []
    for i in range(cases):
        case = make_case(f"{prefix}-{i}", tokens, tokenizer)
        prompt = case.buffer.render(tokenizer, case.agent_id, REQUEST).token_ids
        target = tokenizer(target_text(case.target), add_special_tokens=False)["input_ids"]
        examples.append(Example(torch.tensor(prompt), torch.tensor(target)))
    return examples


def default_output() -> Path:
    """Where a trained SmolLM2 predictor is kept by default."""
    return cache_root().parent / "predictors" / "smollm2-135m-instruct-erecap.safetensors"


def main(argv=None) -> int:
    """Parse arguments, train, save, report the loss before / after."""
    parser = argparse.ArgumentParser(prog="erecap-train", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=SMOLLM2)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--cases", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=768, help="context length of each case")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--keep-ratio", type=float, default=0.7)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--lambda-m", type=float, default=1.0)
    parser.add_argument("--lambda-r", type=float, default=1.0)
    parser.add_argument("--lm-weight", type=float, default=1.0, help="weight of L_L (0 skips the soft-pruned LM pass)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(default_output()))
    args = parser.parse_args(argv)

    model, tokenizer = load_model(args.model, args.device)
    layers = table8_layers(model.config.num_hidden_layers)
    schedule = PruneSchedule(tuple(layers), args.keep_ratio)
    bank = PredictorBank.for_model(model.config, layers, seed=args.seed)
    trainer = PredictorTrainer(model, bank, schedule, lr=args.lr, lambda_m=args.lambda_m, lambda_r=args.lambda_r,
                               lm_weight=args.lm_weight, seed=args.seed)
    examples = build_examples(tokenizer, args.cases, args.tokens)
    started = time.monotonic()
    with tqdm(total=len(examples), desc="saliency", unit="case") as bar:
        prepared = []
        for ex in examples:
            prepared.extend(trainer.prepare([ex]))
            bar.update(1)
    with tqdm(total=args.epochs * len(prepared), desc="train", unit="step") as bar:
        def progress(i, total, losses):
            bar.update(1)
            bar.set_postfix(loss=f"{losses.total:.3f}", lm=f"{losses.lm:.3f}", rank=f"{losses.ranking:.3f}")

        history = trainer.fit(prepared, args.epochs, progress)
    out = Path(args.out).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    bank.save(out)
    print(f"trained {len(layers)} predictors (layers {layers}) on {len(prepared)} cases x {args.epochs} epochs "
          f"in {time.monotonic() - started:.0f} s; loss {mean_loss(history, True):.3f} -> {mean_loss(history, False):.3f}")
    print(f"saved {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
