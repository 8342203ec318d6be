"""`recap-finetune`: fine-tune the planner LM (LoRA) to decompose and refine TextWorld cooking games as ReCAP's π and
ρ (recap_recursion), on the oracle's decomposition, and measure its agreement with it.

Training games are seeds 100,000 on at the chosen ladder levels, held-out games seeds 200,000 on; the benchmark's
games (seeds below 100,000) are never trained on. Targets are the constrained ReCAP decoder's own tokens (thought and
subtasks), the loss weighted on its choices. docs/training.md.

    python -m brace_training.recap_finetune_cli --levels L1 L2 L3 --seeds 12
    python -m brace_training.recap_finetune_cli --evaluate-only --adapters A.safetensors
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import yaml

from brace_memory.recap import MAX_DEPTH
from brace_training.adapter_training import PlanExample, evaluation_model
from erecap_planner.call_path import CallOptions, LocalModel, PlannerCallPath
from erecap_planner.pruned_forward import ErecapModel
from erecap_planner.recap_decoding import RecapDecoder, thought_tokens
from sim_bridges.textworld.textworld_games import LEVELS, GameSpec

from .cli_args import add_adapter_arguments
from .recap_data import RecapPoint, recap_memory, recap_points
from .textworld_finetune_cli import EVAL_SEEDS, MAX_PROMPT_TOKENS, TRAIN_SEEDS, fit_examples

TEXTWORLD_ADAPTER = "package://sim_bridges/models/smollm2-135m-instruct-textworld-lora.safetensors"
"""The adapter ReCAP's training continues from (the flat TextWorld planner's)."""
ADAPTER = "src/sim_bridges/models/smollm2-135m-instruct-textworld-recap-lora.safetensors"
"""Where the ReCAP adapter is written."""
THINK_TOKENS = 32
"""The thought's token bound the decoder is trained and run with (the planner's recap_think_tokens default)."""


def render(model_name: str, seeds: range, levels: list[str], folder: Path, detour: float, per_game: int,
           wrong: float = 0.0, read_rate: float = 0.0) -> tuple[object, list[RecapPoint]]:
    """Decision points of `seeds` at each of `levels`, rendered with the base tokenizer (at `read_rate` cut to B_t by
    the recency rows' compressor)."""
    model, tok, _, schedule = evaluation_model(model_name, "", "", [0], 0.0)
    path = PlannerCallPath(LocalModel(model, tok, schedule),
                           CallOptions(compressor="recency", decoding="json", layout="recap", recursion=True,
                                       max_context_tokens=MAX_PROMPT_TOKENS), memory=recap_memory())
    points = []
    for level in levels:
        points += recap_points(path, seeds, folder, GameSpec(0).at_level(level), detour, per_game,
                               wrong_rate=wrong, read_rate=read_rate)
    return tok, points


def decoder(tok, point: RecapPoint, vocabulary: list[int]) -> RecapDecoder:
    """The constrained ReCAP decoder at `point`'s state."""
    primitives, composites, limit = point.entries()
    return RecapDecoder(tok, primitives, composites, limit, THINK_TOKENS, vocabulary=vocabulary)


def examples_of(tok, points: list[RecapPoint]) -> list[PlanExample]:
    """(prompt, oracle answer) pairs in the decoder's tokens, its choices marked."""
    vocabulary = thought_tokens(tok)
    out = []
    for p in points:
        dec = decoder(tok, p, vocabulary)
        out.append(PlanExample(p.prompt_ids, dec.token_ids(p.thought, p.subtasks), protect=p.protect,
                               choice=dec.choice_mask(p.thought, p.subtasks)))
    return out


def agreement(model_name: str, adapter: str, points: list[RecapPoint]) -> dict:
    """How often the constrained ReCAP decoder with `adapter` answers the oracle's S[0] (and its whole S), by call
    kind; its mean seconds per call."""
    model, tok, _, _ = evaluation_model(model_name, adapter, "", [0], 0.0)
    runner, vocabulary = ErecapModel(model), thought_tokens(tok)
    hits = {"decompose": [0, 0], "refine": [0, 0]}
    whole, started = 0, time.monotonic()
    for p in points:
        out = decoder(tok, p, vocabulary).decode(runner, runner.prefill(torch.tensor(p.prompt_ids)),
                                                 deepest=p.depth >= MAX_DEPTH - 1)
        tally = hits[p.kind.label]
        tally[0] += out.subtasks[:1] == p.subtasks[:1]
        tally[1] += 1
        whole += out.subtasks == p.subtasks
    n = max(1, len(points))
    return {"adapter": Path(adapter).name if adapter else "none", "points": len(points),
            "tokens_before": round(sum(len(p.prompt_ids) for p in points) / n),
            "first_subtask_agreement": round(sum(h[0] for h in hits.values()) / n, 3),
            **{f"{k}_agreement": round(h[0] / h[1], 3) if h[1] else "" for k, h in hits.items()},
            "whole_answer_agreement": round(whole / n, 3),
            "seconds_per_call": round((time.monotonic() - started) / n, 2)}


def main(argv=None) -> int:
    """Train the adapter (unless --evaluate-only) and print the agreement table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=12, help=f"training games per level (seeds {TRAIN_SEEDS} on)")
    ap.add_argument("--eval-seeds", type=int, default=3, help=f"held-out games per level (seeds {EVAL_SEEDS} on)")
    ap.add_argument("--levels", nargs="+", default=list(LEVELS), choices=list(LEVELS))
    ap.add_argument("--per-game", type=int, default=16, help="decision points drawn per game")
    ap.add_argument("--wrong", type=float, default=0.15,
                    help="share of calls whose frames take a wrong decomposition (the targets teach the repair)")
    ap.add_argument("--read-rate", type=float, default=0.5,
                    help="share of prompts cut to B_t by recency, as the recap / recency row reads them")
    ap.add_argument("--game-dir", type=Path, default=Path("~/.cache/brace/textworld").expanduser())
    add_adapter_arguments(ap, Path(ADAPTER), examples=480, lr=5e-4, budgets=[0],
                          detour="the player runs another harmless admissible command")
    ap.set_defaults(init=TEXTWORLD_ADAPTER)
    args = ap.parse_args(argv)
    if not args.evaluate_only:
        tok, points = render(args.model, range(TRAIN_SEEDS, TRAIN_SEEDS + args.seeds), args.levels, args.game_dir,
                             args.detour, args.per_game, args.wrong, args.read_rate)
        fit_examples(ap, args, examples_of(tok, points), len(points))
    _, held_out = render(args.model, range(EVAL_SEEDS, EVAL_SEEDS + args.eval_seeds), args.levels, args.game_dir,
                         args.detour, args.per_game, args.wrong, args.read_rate)
    adapters = args.adapters if args.adapters is not None else [args.init, str(args.output)]
    print(yaml.safe_dump([agreement(args.model, a, held_out) for a in adapters], sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
