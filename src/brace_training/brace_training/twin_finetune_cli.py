"""`twin-finetune`: fine-tune the planner LM (LoRA) on a twin task's oracle plans (PickFruit or PushT), and measure
what it changed.

Renders the task's decision points as the robot planner does, continues from `--init`, and compares the old and new
adapters' plans with the oracle at held-out points (docs/training.md).

    python -m brace_training.twin_finetune_cli --task pickfruit --seeds 120 --output src/robot_bridge/models/...
    python -m brace_training.twin_finetune_cli --task pusht --evaluate-only --adapters A.safetensors B.safetensors
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from brace_common.action_schema import ActionSchema
from brace_common.config import resolve_path
from brace_common.vocabulary import Mode
from brace_training.adapter_training import PlanExample, evaluation_model, fit_and_save
from erecap_planner.call_path import CallOptions, CallRequest, LocalModel, PlannerCallPath, request_text
from erecap_planner.constrained import ConstrainedPlanDecoder
from erecap_planner.context import ContextBuffer
from erecap_planner.models import cache_root, load_model
from erecap_planner.scoring import enumerate_steps

from . import pickfruit_data, pusht_data
from .cli_args import PREDICTOR, add_adapter_arguments, training_options
from .pickfruit_data import TwinPoint

LAYOUT = "stable_first"
FIRST_CUT = 1.5
MODES = (Mode.FULL_REPLAN, Mode.PARTIAL_REPLAN, Mode.REUSE_SUBPLAN)


@dataclass(frozen=True)
class TwinTraining:
    """What fine-tuning needs of a twin task: its schema, its decision points and the parameter that decides."""

    schema: str
    decision_points: Callable[..., Iterator[TwinPoint]]     # (seeds, detour=) -> points
    key: str                                                # the first step's parameter agreement is counted on
    adapter: str                                            # the cached adapter's file name


TASKS = {
    "pickfruit": TwinTraining("package://robot_bridge/config/pickfruit_actions.yaml", pickfruit_data.decision_points,
                              "object", "smollm2-135m-instruct-pickfruit-lora.safetensors"),
    "pusht": TwinTraining("package://robot_bridge/config/pusht_actions.yaml", pusht_data.decision_points,
                          "part", "smollm2-135m-instruct-pusht-lora.safetensors"),
}
"""The twin tasks one can fine-tune for."""


def default_adapter(task: str) -> Path:
    """Where the task's adapter is cached."""
    return cache_root() / "adapters" / TASKS[task].adapter


def load_schema(path: str) -> ActionSchema:
    """An action schema from its file."""
    return ActionSchema.from_dict(yaml.safe_load(Path(resolve_path(path)).read_text()) or {})


def buffer_of(point: TwinPoint) -> ContextBuffer:
    """The planner's context buffer at a decision point."""
    buf = ContextBuffer()
    buf.extend(point.entries)
    return buf


def build_examples(tokenizer, schema: ActionSchema, points: list[TwinPoint], rng: random.Random) -> list[PlanExample]:
    """(prompt, oracle plan) pairs, each in a random request mode."""
    decoder = ConstrainedPlanDecoder(tokenizer, enumerate_steps(schema), schema.max_steps, schema.min_steps)
    out = []
    for point in points:
        ctx = buffer_of(point).render(tokenizer, point.agent_id,
                                      request_text(schema, point.agent_id, int(rng.choice(MODES))), layout=LAYOUT)
        out.append(PlanExample(list(ctx.token_ids), decoder.token_ids(point.oracle), protect=list(ctx.protected),
                               choice=decoder.choice_mask(point.oracle)))
    return out


def evaluate(model_name: str, adapter: str, schema: ActionSchema, points: list[TwinPoint], key: str,
             budgets: list[int] = (0,), predictor: str = PREDICTOR) -> list[dict]:
    """Oracle agreement of the planner's constrained call path with `adapter` merged ('' = none), one row per budget:
    the whole plan, and the first step's parameter `key` (`<key>_agreement`).

    Budget 0: unpruned; else E-RECAP with `predictor` at B_t = budget (Table 8 layers, the robot's first cut).
    """
    model, tok, bank, schedule = evaluation_model(model_name, adapter, predictor, budgets, FIRST_CUT)
    rows = []
    for budget in budgets:
        local = LocalModel(model, tok, schedule if budget else None, bank if budget else None)
        options = CallOptions(compressor="erecap" if budget else "none", decoding="constrained", layout=LAYOUT)
        path = PlannerCallPath(local, options, schema)
        plans = keys = tokens_after = 0
        started = time.monotonic()
        for point in points:
            out = path.run(buffer_of(point), CallRequest(point.agent_id, budget or 4096, 60_000, 120_000))
            tokens_after += out.tokens_after
            got = [(s.action, s.parameters) for s in out.steps]
            plans += got == [(s.action, s.parameters) for s in point.oracle]
            keys += bool(got) and got[0][1].get(key) == point.oracle[0].parameters[key]
        n = max(1, len(points))
        rows.append({"adapter": Path(adapter).name if adapter else "none", "budget": budget or "none",
                     "points": len(points), "tokens_after": round(tokens_after / n),
                     "plan_agreement": round(plans / n, 3), f"{key}_agreement": round(keys / n, 3),
                     "seconds_per_call": round((time.monotonic() - started) / n, 2)})
    return rows


def main(argv=None) -> int:
    """Train the adapter (unless --evaluate-only) and print the agreement table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", choices=sorted(TASKS), default="pickfruit", help="the twin task")
    ap.add_argument("--seeds", type=int, default=120, help="training episodes (seeds 1000 on)")
    ap.add_argument("--eval-seeds", type=int, default=20, help="held-out episodes (seeds 0 on)")
    ap.add_argument("--eval-points", type=int, default=40, help="at most this many held-out decision points")
    add_adapter_arguments(ap, None, examples=300, lr=5e-4, budgets=[0, 256],
                          detour="the arm executes a plan for the wrong fruit (PushT: part)")
    args = ap.parse_args(argv)
    task = TASKS[args.task]
    args.output = args.output or default_adapter(args.task)
    schema = load_schema(task.schema)
    rng = random.Random(1000)
    if not args.evaluate_only:
        model, tok = load_model(args.model, device="auto", dtype="float32")
        points = list(task.decision_points(range(1000, 1000 + args.seeds), detour=args.detour))
        examples = build_examples(tok, schema, points, rng)
        if len(examples) > args.examples:
            examples = rng.sample(examples, args.examples)
        print(f"{len(examples)} examples from {len(points)} decision points, mean prompt "
              f"{sum(len(e.prompt_ids) for e in examples) / len(examples):.0f} tokens", file=sys.stderr)
        init = Path(resolve_path(args.init)) if args.init else None
        fit_and_save(model, examples, args.output, args.rank, args.epochs, args.lr, init,
                     options=training_options(ap, args))
        del model
    held_out = list(task.decision_points(range(args.eval_seeds), detour=args.detour))[: args.eval_points]
    adapters = args.adapters if args.adapters is not None else [args.init, str(args.output)]
    rows = [row for adapter in adapters for row in evaluate(args.model, adapter, schema, held_out, task.key, args.budgets,
                                                              args.predictor)]
    print(yaml.safe_dump(rows, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
