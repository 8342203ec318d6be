"""`intersection-finetune`: fine-tune the planner LM (LoRA) on the drone intersection's oracle plans, and measure it.

Renders oracle intersection episodes' decision points as the AirSim planner does, continues from `--init` (a share
pruned by E-RECAP in the forward), and compares the old and new adapters with the oracle (docs/training.md).

    python -m brace_training.intersection_finetune_cli --seeds 6 --output src/sim_bridges/models/...
    python -m brace_training.intersection_finetune_cli --evaluate-only --adapters A.safetensors B.safetensors
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import yaml

from brace_common.action_schema import ActionSchema, Step
from brace_common.config import resolve_path
from brace_training.adapter_training import evaluation_model, fit_and_save, prune_share
from erecap_planner.call_path import CallOptions, CallRequest, LocalModel, PlannerCallPath
from erecap_planner.models import cache_root, load_model
from sim_bridges.airsim.intersection import IntersectionConfig, action_schema, same_step

from .cli_args import PREDICTOR, add_adapter_arguments, training_options
from .intersection_data import IntersectionPoint, decision_points
from .twin_finetune_cli import FIRST_CUT, LAYOUT, buffer_of, build_examples


def default_adapter() -> Path:
    """Where the intersection adapter is cached."""
    return cache_root() / "adapters" / "smollm2-135m-instruct-intersection-lora.safetensors"


def schema_for(agents: int) -> ActionSchema:
    """The planner's action schema of the K-drone intersection."""
    return ActionSchema.from_dict(action_schema(IntersectionConfig(num_agents=agents)))


def points_for(agents: tuple[int, ...], seeds: range, detour: float) -> dict[int, list[IntersectionPoint]]:
    """Decision points per K."""
    return {k: list(decision_points(seeds, k, detour=detour)) for k in agents}


def _same(a, b) -> bool:
    return same_step(Step(a.action, a.parameters), Step(b.action, b.parameters))


def evaluate(model_name: str, adapter: str, points: dict[int, list[IntersectionPoint]], budgets: list[int],
             predictor: str = PREDICTOR) -> list[dict]:
    """Oracle agreement of the planner's constrained call path with `adapter` merged ('' = none), one row per
    budget (0: unpruned; else E-RECAP with `predictor` at B_t = budget, Table 8 layers, the sim's first cut)."""
    model, tok, bank, schedule = evaluation_model(model_name, adapter, predictor, budgets, FIRST_CUT)
    rows = []
    for budget in budgets:
        plans = firsts = n = tokens_before = tokens_after = 0
        started = time.monotonic()
        for k, pts in points.items():
            local = LocalModel(model, tok, schedule if budget else None, bank if budget else None)
            options = CallOptions(compressor="erecap" if budget else "none", decoding="constrained", layout=LAYOUT)
            path = PlannerCallPath(local, options, schema_for(k))
            for point in pts:
                out = path.run(buffer_of(point), CallRequest(point.agent_id, budget or 8192, 60_000, 120_000))
                tokens_before += out.tokens_before
                tokens_after += out.tokens_after
                got = out.steps
                n += 1
                plans += len(got) == len(point.oracle) and all(_same(a, b) for a, b in zip(got, point.oracle, strict=True))
                firsts += bool(got) and _same(got[0], point.oracle[0])
        n = max(1, n)
        rows.append({"adapter": Path(adapter).name if adapter else "none", "budget": budget or "none", "points": n,
                     "tokens_before": round(tokens_before / n), "tokens_after": round(tokens_after / n),
                     "plan_agreement": round(plans / n, 3), "first_step_agreement": round(firsts / n, 3),
                     "seconds_per_call": round((time.monotonic() - started) / n, 2)})
    return rows


def main(argv=None) -> int:
    """Train the adapter (unless --evaluate-only) and print the agreement table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--seeds", type=int, default=6, help="training episodes per K (seeds 1000 on)")
    ap.add_argument("--eval-seeds", type=int, default=1, help="held-out episodes per K (seeds 0 on)")
    ap.add_argument("--eval-points", type=int, default=15, help="at most this many held-out decision points per K")
    ap.add_argument("--max-tokens", type=int, default=2400, help="longer prompts are skipped")
    ap.add_argument("--pruned", type=float, default=0.5,
                    help="share of the examples longer than --budget trained under E-RECAP pruning")
    ap.add_argument("--budget", type=int, default=384, help="B_t of the pruning-aware examples")
    add_adapter_arguments(ap, default_adapter(), examples=300, lr=1e-3, budgets=[0, 384],
                          detour="a drone flies a plausible wrong plan")
    args = ap.parse_args(argv)
    rng = random.Random(1000)
    if not args.evaluate_only:
        model, tok = load_model(args.model, device="auto", dtype="float32")
        points = points_for(tuple(args.agents), range(1000, 1000 + args.seeds), args.detour)
        examples = [ex for k, pts in points.items() for ex in build_examples(tok, schema_for(k), pts, rng)
                    if len(ex.prompt_ids) <= args.max_tokens]
        if len(examples) > args.examples:
            examples = rng.sample(examples, args.examples)
        pruning = prune_share(model, examples, args.pruned, args.budget, args.predictor, rng)
        print(f"{len(examples)} examples from {sum(len(p) for p in points.values())} decision points, mean prompt "
              f"{sum(len(e.prompt_ids) for e in examples) / len(examples):.0f} tokens, "
              f"{sum(e.token_budget is not None for e in examples)} pruned to B = {args.budget}", file=sys.stderr)
        init = Path(resolve_path(args.init)) if args.init else None
        fit_and_save(model, examples, args.output, args.rank, args.epochs, args.lr, init, pruning,
                     training_options(ap, args))
        del model
    held_out = {k: pts[:: max(1, len(pts) // args.eval_points)][: args.eval_points] for k, pts in
                points_for(tuple(args.agents), range(args.eval_seeds), args.detour).items()}
    adapters = args.adapters if args.adapters is not None else [args.init, str(args.output)]
    rows = [row for adapter in adapters for row in evaluate(args.model, adapter, held_out, args.budgets,
                                                              args.predictor)]
    print(yaml.safe_dump(rows, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
