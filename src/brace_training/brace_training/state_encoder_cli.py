"""`state_encoder_cli`: train GiG's GNN state encoder on oracle trajectories and save it.

Collects warehouse trajectories (seeds WAREHOUSE_TRAIN_SEED on, K = 1-6, tasks to any dock or to one) and TextWorld
trajectories (the planner's training games found in --game-dir; none is made here), trains with Eq. 2 and writes
the encoder (safetensors + JSON with the training facts) to --output, by default
~/.cache/brace_ros/encoders/gig-state-encoder/ (gig-state-encoder-smollm2/ for --features smollm2). It then prints
the separation on held-out warehouse seeds (0 on) and held-out TextWorld games. Progress on stderr.

    python -m brace_training.state_encoder_cli --features minilm
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from pathlib import Path
from typing import Optional

import torch

from brace_memory.state_encoder import FEATURE_SOURCES, MINILM, StateEncoder, default_encoder_dir

from .state_encoder_training import (
    AGENT_COUNTS,
    TASK_DOCKS,
    TEXTWORLD_HELD_OUT_SEEDS,
    TEXTWORLD_TRAIN_SEED,
    WAREHOUSE_TRAIN_SEED,
    TrainConfig,
    Trajectory,
    embed_trajectories,
    separation,
    textworld_trajectories,
    train,
    warehouse_trajectories,
)

GAME_DIR = Path("~/.cache/brace/textworld")
"""Where the TextWorld games are kept (textworld_finetune_cli and bench/textworld_memory.py use it too)."""


def log(text: str) -> None:
    """A progress line on stderr."""
    print(text, file=sys.stderr, flush=True)


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else the machine type."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    return value.strip()
    except OSError:
        pass
    return platform.machine()


def parse(argv: Optional[list[str]] = None) -> argparse.Namespace:
    """The command line."""
    d = TrainConfig()
    ap = argparse.ArgumentParser(prog="state_encoder_cli", description=__doc__.split("\n")[0])
    ap.add_argument("--features", choices=FEATURE_SOURCES, default=MINILM, help="node feature source")
    ap.add_argument("--output", type=Path, default=None, help="encoder folder (default: per feature source)")
    ap.add_argument("--epochs", type=int, default=d.epochs)
    ap.add_argument("--batch-size", type=int, default=d.batch_size, help="triplets per step")
    ap.add_argument("--lr", type=float, default=d.lr)
    ap.add_argument("--seed", type=int, default=d.seed, help="weights, batches and negatives")
    ap.add_argument("--warehouse-seeds", type=int, default=20,
                    help=f"training episodes' seeds {WAREHOUSE_TRAIN_SEED} on (each run for every K and task_docks)")
    ap.add_argument("--textworld-games", type=int, default=20,
                    help=f"training games, seeds {TEXTWORLD_TRAIN_SEED} on (only those in --game-dir)")
    ap.add_argument("--game-dir", type=Path, default=GAME_DIR)
    ap.add_argument("--check-seeds", type=int, default=10, help="held-out warehouse seeds (0 on) checked after")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (default 1: on these small graphs a second thread made a step 3x slower)")
    args = ap.parse_args(argv)
    for name in ("epochs", "batch_size", "threads"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    for name in ("warehouse_seeds", "textworld_games", "check_seeds"):
        if getattr(args, name) < 0:
            ap.error(f"--{name.replace('_', '-')} must be >= 0")
    if args.check_seeds > WAREHOUSE_TRAIN_SEED:
        ap.error(f"--check-seeds must stay below the training seeds ({WAREHOUSE_TRAIN_SEED})")
    return args


def collect(args: argparse.Namespace) -> tuple[list[Trajectory], dict]:
    """The training trajectories and the facts of where they came from."""
    warehouse_seeds = range(WAREHOUSE_TRAIN_SEED, WAREHOUSE_TRAIN_SEED + args.warehouse_seeds)
    trajectories = warehouse_trajectories(warehouse_seeds)
    log(f"warehouse: {len(trajectories)} trajectories from seeds {warehouse_seeds.start}..{warehouse_seeds.stop - 1}")
    games, missing = textworld_trajectories(range(TEXTWORLD_TRAIN_SEED, TEXTWORLD_TRAIN_SEED + args.textworld_games),
                                            args.game_dir)
    log(f"textworld: {len(games)} trajectories" + (f", {len(missing)} games not in {args.game_dir}" if missing else ""))
    facts = {"warehouse_seeds": [warehouse_seeds.start, warehouse_seeds.stop - 1], "agent_counts": list(AGENT_COUNTS),
             "task_docks": list(TASK_DOCKS), "warehouse_trajectories": len(trajectories),
             "textworld_seeds": sorted(set(range(TEXTWORLD_TRAIN_SEED, TEXTWORLD_TRAIN_SEED + args.textworld_games))
                                       - set(missing)), "textworld_trajectories": len(games)}
    return trajectories + games, facts


def check(encoder: StateEncoder, args: argparse.Namespace) -> dict:
    """Separation on held-out trajectories, per world (printed)."""
    held_out = {"warehouse": warehouse_trajectories(range(args.check_seeds)),
                "textworld": textworld_trajectories(TEXTWORLD_HELD_OUT_SEEDS, args.game_dir)[0]}
    out = {}
    for world, trajectories in held_out.items():
        if len(trajectories) < 2:
            continue
        s = separation(trajectories, embed_trajectories(encoder, trajectories)).summary()
        out[world] = s
        print(f"{world} held out: {s['intra_pairs']} consecutive pairs, {100 * s['intra_within_tau']:.1f}% within tau "
              f"(changed graphs: {100 * s['intra_changed_within_tau']:.1f}%); inter beyond tau "
              f"{100 * s['inter_beyond_tau']:.1f}%, median intra {s['intra_median']:.3f} / inter {s['inter_median']:.3f}")
    return out


def main(argv: Optional[list[str]] = None) -> int:
    """Collect, train, save, check."""
    args = parse(argv)
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    output = (args.output or default_encoder_dir(args.features)).expanduser()
    encoder = StateEncoder.create(args.features, seed=args.seed)
    trajectories, facts = collect(args)
    config = TrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, seed=args.seed)
    report = train(encoder, trajectories, config, log)
    encoder.training = {
        **facts, "epochs": report.epochs, "batch_size": config.batch_size, "lr": config.lr,
        "weight_decay": config.weight_decay, "alpha": config.alpha, "lambda": config.lam, "seed": config.seed,
        "trajectories": report.trajectories, "states": report.states, "pairs": report.pairs, "steps": report.steps,
        "loss_first": report.loss[0], "loss_last": report.loss[-1], "triplet_last": report.triplet[-1],
        "uniformity_last": report.uniformity[-1], "train_seconds": round(report.seconds, 1),
        "total_seconds": round(time.perf_counter() - started, 1), "threads": torch.get_num_threads(),
        "cpu": cpu_model(), "torch": torch.__version__,
        "date": datetime.date.today().isoformat()}
    encoder.save(output)
    print(f"trained {args.features} encoder: {report.pairs} transitions, {report.epochs} epochs, loss "
          f"{report.loss[0]:.3f} -> {report.loss[-1]:.3f} in {report.seconds:.0f} s "
          f"({time.perf_counter() - started:.0f} s in all); wrote {output}")
    if args.check_seeds:
        check(encoder, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
