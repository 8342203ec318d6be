#!/usr/bin/env python3
"""Adapter training on this CPU: examples/s of the old way (float32, batch 1, every token) against what ships, and
the held-out agreement of the same round trained both ways.

Every row trains one LoRA round of the warehouse planner (SmolLM2-135M-Instruct, rank 8, q/k/v/o) on the same
oracle-labelled examples (brace_training.finetune_cli's, training seeds >= 1000), from the same start (`--init`,
default the off-the-shelf model), and is then asked for its plan at the same held-out decision points (seeds
0..N-1, K = 4, unpruned, constrained decoding): first-step agreement with the oracle. Rows (TrainingOptions):

  reference        float32, one example per step, the whole prompt with gradient, every plan token weighing 1
  shipped          the defaults: bfloat16 autocast where the CPU computes bf16 natively, the prompt detached,
                   forced plan tokens weighing 0.1
  shipped, batch 4 the same with length-bucketed batches of 4

Targets (the CPU named in the table): the shipped row >= 3x the reference's examples/s on an AMX CPU, >= 1.5x
elsewhere; its held-out agreement within 2 points of the reference's; a 2,000-example round (extrapolated from the
measured rate) <= 45 min. Writes <out>/training_speed.{csv,png} (--out, default bench/out); exits 1 when a target
is missed. Run inside the workspace: `source scripts/env.sh && python bench/training_speed.py` (~40 min on 2 cores);
`--avx2` re-runs itself under the AVX2 dispatch caps.

Quick mode (`--quick`, what `make test` runs): 4 examples of K = 2, 2 held-out points, reference and shipped.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import time
from pathlib import Path

from report import cpu_report, describe_cpu, fill_defaults, print_written, reexec_as_avx2, report_checks, save_plot, write_csv

OUT = Path(__file__).resolve().parent / "out"
ROUND_EXAMPLES = 2000
ROUND_MINUTES = 45.0
"""A 2,000-example round takes at most this long on 2 cores."""
AGREEMENT_POINTS = 2.0
"""The shipped row's held-out agreement is within this many points of the reference's."""
SPEEDUP_AMX, SPEEDUP_OTHER = 3.0, 1.5
TRAIN_SEED = 1000
"""Training episodes start at this seed; held-out points come from seeds below it (never trained on)."""


def rows_of(names: list[str]):
    """The TrainingOptions of each row name."""
    from brace_training.adapter_training import REFERENCE, TrainingOptions

    table = {"reference": REFERENCE, "shipped": TrainingOptions(), "shipped, batch 4": TrainingOptions(batch_size=4)}
    return [(name, table[name]) for name in names]


def held_out_agreement(model, tok, tensors, points, agents: int) -> dict:
    """First-step and whole-plan agreement at `points` (K = `agents`) of the model with `tensors` merged (taken out
    again afterwards)."""
    import torch

    from brace_common.action_schema import ActionSchema
    from brace_training.planner_policy import PlannerPolicy
    from erecap_planner.adapter import projections
    from erecap_planner.call_path import CallOptions, LocalModel, PlannerCallPath
    from erecap_planner.pruning import PruneSchedule
    from sim_bridges.warehouse.warehouse_feed import action_schema
    from sim_bridges.warehouse.warehouse_world import Warehouse, WorldConfig

    targets = projections(model)
    saved = {name: linear.weight.detach().clone() for name, linear in targets.items()}
    with torch.no_grad():
        for name, linear in targets.items():
            linear.weight += tensors[f"{name}.lora_b"] @ tensors[f"{name}.lora_a"]
    try:
        schema = ActionSchema.from_dict(action_schema(Warehouse(WorldConfig(num_agents=agents))))
        policy = PlannerPolicy(PlannerCallPath(LocalModel(model, tok, PruneSchedule((), 1.0)),
                                               CallOptions(compressor="none", decoding="constrained"), schema), 100_000)
        for point in points:
            policy(point)
        return {"held_out_points": policy.calls, "first_step_agreement": round(policy.first_step_agreement, 4),
                "plan_agreement": round(policy.plans_agreed / policy.calls, 4)}
    finally:
        with torch.no_grad():
            for name, linear in targets.items():
                linear.weight.copy_(saved[name])


def draw(rows: list[dict]):
    """Examples/s and held-out agreement per row."""
    def figure(plt):
        fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
        names = [r["row"] for r in rows]
        a.bar(names, [r["examples_per_s"] for r in rows], color="tab:blue")
        a.set_ylabel("examples / s")
        b.bar(names, [r["first_step_agreement"] * 100 for r in rows], color="tab:green")
        b.set_ylabel("held-out first-step agreement %")
        b.set_ylim(0, 100)
        for ax in (a, b):
            ax.tick_params(axis="x", labelsize=8)
        fig.suptitle(f"training speed ({rows[0]['dtype_reference']} reference vs shipped)", fontsize=9)
        fig.tight_layout()
        return fig
    return figure


def main() -> int:
    """Train the rows' rounds, evaluate them, write the table; 1 when a target is missed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, help="training examples per row (default 200)")
    ap.add_argument("--episodes", type=int, help="training episodes per K (default 12)")
    ap.add_argument("--agents", type=int, nargs="+", help="training K (default 2 4)")
    ap.add_argument("--held-out", type=int, help="held-out decision points (seeds 0.., K = 4; default 60)")
    ap.add_argument("--held-out-agents", type=int, help="K of the held-out episodes (default 4)")
    ap.add_argument("--max-tokens", type=int, default=1400, help="longer prompts are skipped")
    ap.add_argument("--rows", nargs="+", choices=["reference", "shipped", "shipped, batch 4"])
    ap.add_argument("--init", default="", help="adapter the rounds continue from ('' = the off-the-shelf model)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--avx2", action="store_true", help="run under the AVX2 dispatch caps (re-executes itself)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--quick", action="store_true", help="smoke run (see the module docstring)")
    args = ap.parse_args()
    fill_defaults(args, quick=dict(examples=4, episodes=1, agents=[2], held_out=2, held_out_agents=2,
                                   rows=["reference", "shipped"]),
                  full=dict(examples=200, episodes=12, agents=[2, 4], held_out=60, held_out_agents=4,
                            rows=["reference", "shipped", "shipped, batch 4"]))
    if args.avx2:
        reexec_as_avx2()
    if args.quick:
        args.max_tokens = min(args.max_tokens, 700)

    import torch
    from safetensors.torch import load_file

    from brace_common.config import resolve_path
    from brace_training.adapter_training import describe, train_adapter
    from brace_training.finetune_cli import build_examples
    from brace_training.plan_data import decision_points
    from erecap_planner.models import SMOLLM2, load_model

    cpu = cpu_report()
    model, tok = load_model(SMOLLM2, device="cpu", dtype="float32")
    rng = random.Random(TRAIN_SEED)
    examples = build_examples(tok, args.episodes, tuple(args.agents), TRAIN_SEED, args.max_tokens, rng)
    if len(examples) > args.examples:
        examples = rng.sample(examples, args.examples)
    held_out = list(itertools.islice(decision_points(range(min(TRAIN_SEED, 50)), args.held_out_agents),
                                     args.held_out))
    assert all(p.seed < TRAIN_SEED for p in held_out), "a held-out point from a training seed"
    init = load_file(str(resolve_path(args.init))) if args.init else None
    print(f"{len(examples)} training examples (mean prompt {sum(len(e.prompt_ids) for e in examples) / len(examples):.0f}"
          f" tokens, plan {sum(len(e.target_ids) for e in examples) / len(examples):.0f}), {len(held_out)} held-out "
          f"points; {describe_cpu(cpu)}", file=sys.stderr, flush=True)

    rows = []
    for name, options in rows_of(args.rows):
        started = time.perf_counter()
        tensors = train_adapter(model, examples, lr=args.lr, init=init, options=options)
        seconds = time.perf_counter() - started
        rate = len(examples) / seconds
        rows.append({"row": name, "training": describe(options, torch.device("cpu")), "examples": len(examples),
                     "train_s": round(seconds, 1), "examples_per_s": round(rate, 4),
                     "round_2000_min": round(ROUND_EXAMPLES / rate / 60, 1),
                     **held_out_agreement(model, tok, tensors, held_out, args.held_out_agents), "cpu": cpu["cpu"],
                     "torch_capability": cpu["torch_capability"], "avx2_emulated": cpu["avx2_emulated"],
                     "dtype_reference": "float32"})
        print(rows[-1], file=sys.stderr, flush=True)

    print(f"\n## Adapter training speed and held-out agreement ({describe_cpu(cpu)})\n")
    print("| row | training | examples | examples/s | 2,000-example round (min) | held-out first step | whole plan |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['row']} | {r['training']} | {r['examples']} | {r['examples_per_s']:.3f} | {r['round_2000_min']} "
              f"| {r['first_step_agreement']:.1%} | {r['plan_agreement']:.1%} |")
    csv_path = write_csv(rows, args.out / "training_speed.csv")
    png_path = save_plot(args.out / "training_speed.png", draw(rows))
    by = {r["row"]: r for r in rows}
    checks = []
    if "reference" in by and "shipped" in by:
        ref, new = by["reference"], by["shipped"]
        target = SPEEDUP_AMX if "amx_bf16" in cpu["flags"].split() and not cpu["avx2_emulated"] else SPEEDUP_OTHER
        speedup = new["examples_per_s"] / ref["examples_per_s"]
        checks.append((f"shipped >= {target:g}x the reference's examples/s", speedup >= target, f"{speedup:.2f}x"))
        gap = (ref["first_step_agreement"] - new["first_step_agreement"]) * 100
        checks.append((f"held-out agreement within {AGREEMENT_POINTS:g} points of the reference's",
                       gap <= AGREEMENT_POINTS, f"{new['first_step_agreement']:.1%} vs {ref['first_step_agreement']:.1%}"))
        fastest = min(r["round_2000_min"] for r in rows if r["row"] != "reference")
        checks.append((f"a {ROUND_EXAMPLES}-example round <= {ROUND_MINUTES:g} min", fastest <= ROUND_MINUTES,
                       f"{fastest} min"))
    status = report_checks(checks)
    print_written(csv_path, png_path)
    return status


if __name__ == "__main__":
    sys.exit(main())
