"""`textworld-finetune`: fine-tune the planner LM (LoRA) on TextWorld cooking games' oracle commands, and measure it.

Renders training games' decision points in the memory benchmark's configurations, continues from `--init`, compares
the old and new adapters at held-out points, and optionally trains the predictor bank (docs/training.md).

    python -m brace_training.textworld_finetune_cli --seeds 30 --predictor-cases 48
    python -m brace_training.textworld_finetune_cli --evaluate-only --adapters A.safetensors B.safetensors
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import torch
import yaml

from brace_common.config import resolve_path
from brace_training.adapter_training import PlanExample, evaluation_model, fit_and_save
from brace_training.predictor_training import train_bank
from erecap_planner.call_path import CallOptions, LocalModel, PlannerCallPath
from erecap_planner.predictor import PredictorBank
from erecap_planner.pruned_forward import ErecapModel
from erecap_planner.pruning import PruneSchedule
from erecap_planner.scoring import best_step, candidate_target
from sim_bridges.textworld.textworld_game import command_step
from sim_bridges.textworld.textworld_games import LEVELS, GameSpec

from .cli_args import add_adapter_arguments, training_options
from .textworld_data import TextWorldPoint, decision_points

TRAIN_SEEDS = 100_000
"""Training games are seeds TRAIN_SEEDS on; the adapter's held-out check uses EVAL_SEEDS on; the benchmark's games
(bench/textworld_memory.py) are seeds below TRAIN_SEEDS and never trained on."""
EVAL_SEEDS = 200_000
MAX_PROMPT_TOKENS = 768
"""Training prompts are rendered to at most this many tokens (the oldest history yields first): a call under
B_t = 512 reads fewer, and a step of training costs about the prompt's length."""
ADAPTER = "src/sim_bridges/models/smollm2-135m-instruct-textworld-lora.safetensors"
"""Where the adapter is written (installed with sim_bridges, used by params/textworld/control.yaml)."""
PREDICTOR_OUTPUT = "src/sim_bridges/models/smollm2-135m-instruct-textworld-erecap.safetensors"
"""Where the TextWorld E-RECAP predictor bank is written (used by params/textworld/control.yaml)."""
PRUNED_PROMPT_TOKENS = 1536
"""Prompts of the predictor's cases and of the pruned evaluation are rendered to at most this many tokens: E-RECAP
meets the long flat contexts that recency would cut."""
FIRST_CUT = 1.5
"""The pruned evaluation's first cut (x B_t at the first pruning layer), as the planner's."""


def target_ids(tokenizer, command: str) -> list[int]:
    """The tokens the candidates decoding scores for `command`: the JSON prefix, then the candidate (each tokenised
    on its own, as scoring does)."""
    return candidate_target(tokenizer, command_step(command))[0]


def examples_of(tokenizer, points: list[TextWorldPoint]) -> list[PlanExample]:
    """(prompt, oracle command) training pairs."""
    out = []
    for p in points:
        target, choice = candidate_target(tokenizer, command_step(p.oracle))
        out.append(PlanExample(p.prompt_ids, target, protect=p.protect, choice=choice))
    return out


def render_points(model_name: str, seeds: range, folder: Path, specs: list[GameSpec], detour: float, per_game: int,
                  max_tokens: int = MAX_PROMPT_TOKENS):
    """Decision points of `seeds` at each of `specs` rendered with the base tokenizer (the prompt does not depend on
    the weights)."""
    model, tok, _, _ = evaluation_model(model_name, "", "", [0], 0.0)
    path = PlannerCallPath(LocalModel(model, tok, PruneSchedule((), 1.0)),
                           CallOptions(compressor="none", decoding="candidates", max_context_tokens=max_tokens))
    return tok, [p for spec in specs for p in decision_points(path, seeds, folder, spec, detour, per_game)]


def agreement(model_name: str, adapter: str, points: list[TextWorldPoint], budget: int = 0,
              predictor: str = "") -> dict:
    """How often the candidates decoding picks the oracle's command at `points` with `adapter`: unpruned (budget 0)
    or pruned inside the model to B_t = `budget` by E-RECAP with `predictor` (protected tokens kept)."""
    model, tok, bank, schedule = evaluation_model(model_name, adapter, predictor, [budget], FIRST_CUT)
    runner = ErecapModel(model)
    pruned = ErecapModel(model, schedule, bank, stack=runner.stack) if budget else None
    hits, kept, started = 0, 0, time.monotonic()
    for point in points:
        ids = torch.tensor(point.prompt_ids)
        pre = (pruned.prefill(ids, token_budget=budget, protect=torch.tensor(point.protect)) if pruned is not None
               else runner.prefill(ids))
        kept += pre.tokens_after if pruned is not None else len(point.prompt_ids)
        step, _ = best_step(runner, pre, tok, [command_step(c) for c in point.admissible])
        hits += step.parameters["text"] == point.oracle
    n = max(1, len(points))
    return {"adapter": Path(adapter).name if adapter else "none", "budget": budget or "unpruned",
            "predictor": Path(predictor).name if budget else "", "points": len(points),
            "tokens_before": round(sum(len(p.prompt_ids) for p in points) / n), "tokens_after": round(kept / n),
            "oracle_agreement": round(hits / n, 3), "seconds_per_call": round((time.monotonic() - started) / n, 2)}


def train_predictor(args, specs: list[GameSpec]) -> Path:
    """The E-RECAP predictor bank for the new adapter, on `--predictor-cases` training decision points rendered to
    PRUNED_PROMPT_TOKENS, continued from `--predictor`."""
    tok, points = render_points(args.model, range(TRAIN_SEEDS, TRAIN_SEEDS + args.seeds), args.game_dir, specs,
                                args.detour, args.per_game, PRUNED_PROMPT_TOKENS)
    points = random.Random(TRAIN_SEEDS + 1).sample(points, min(args.predictor_cases, len(points)))
    model, _, _, _ = evaluation_model(args.model, str(args.output), "", [0], 0.0)
    bank = PredictorBank.load(resolve_path(args.predictor), model.config)
    return train_bank(model, bank, [(p.prompt_ids, target_ids(tok, p.oracle)) for p in points], 0.7, 1e-3,
                      TRAIN_SEEDS, 2, args.predictor_output)


def fit_examples(ap: argparse.ArgumentParser, args, examples: list[PlanExample], points: int) -> None:
    """Train `--output` from `--init` on at most `--examples` of `examples` (sampled), reporting what it trains on."""
    if len(examples) > args.examples:
        examples = random.Random(TRAIN_SEEDS).sample(examples, args.examples)
    print(f"{len(examples)} examples from {points} decision points, mean prompt "
          f"{sum(len(e.prompt_ids) for e in examples) / len(examples):.0f} tokens", file=sys.stderr)
    model, _, _, _ = evaluation_model(args.model, "", "", [0], 0.0)
    init = Path(resolve_path(args.init)) if args.init else None
    fit_and_save(model, examples, args.output, args.rank, args.epochs, args.lr, init,
                 options=training_options(ap, args))


def main(argv=None) -> int:
    """Train the adapter (unless --evaluate-only) and print the agreement table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=30, help=f"training games (seeds {TRAIN_SEEDS} on)")
    ap.add_argument("--eval-seeds", type=int, default=3, help=f"held-out games (seeds {EVAL_SEEDS} on)")
    ap.add_argument("--per-game", type=int, default=10, help="decision points drawn per game")
    ap.add_argument("--levels", nargs="+", default=["L3"], choices=list(LEVELS),
                    help="the difficulty ladder's levels the games are drawn at (each gets --seeds games)")
    ap.add_argument("--game-dir", type=Path, default=Path("~/.cache/brace/textworld").expanduser())
    add_adapter_arguments(ap, Path(ADAPTER), examples=240, lr=5e-4, budgets=[0],
                          detour="the player runs another harmless admissible command")
    ap.add_argument("--predictor-cases", type=int, default=0,
                    help="train the E-RECAP predictor for the new adapter on this many decision points (0: none)")
    ap.add_argument("--predictor-output", type=Path, default=Path(PREDICTOR_OUTPUT))
    args = ap.parse_args(argv)
    specs = [GameSpec(0).at_level(level) for level in args.levels]
    if not args.evaluate_only:
        tok, points = render_points(args.model, range(TRAIN_SEEDS, TRAIN_SEEDS + args.seeds), args.game_dir, specs,
                                    args.detour, args.per_game)
        fit_examples(ap, args, examples_of(tok, points), len(points))
        if args.predictor_cases > 0:
            args.predictor = str(train_predictor(args, specs))
    seeds = range(EVAL_SEEDS, EVAL_SEEDS + args.eval_seeds)
    _, held_out = render_points(args.model, seeds, args.game_dir, specs, args.detour, args.per_game)
    long = (render_points(args.model, seeds, args.game_dir, specs, args.detour, args.per_game, PRUNED_PROMPT_TOKENS)[1]
            if any(args.budgets) else [])
    adapters = args.adapters if args.adapters is not None else [args.init, str(args.output)]
    rows = [agreement(args.model, a, long if b else held_out, b, args.predictor if b else "")
            for a in adapters for b in args.budgets]
    print(yaml.safe_dump(rows, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
