"""`warehouse-finetune`: fine-tune the planner LM (LoRA) on the embedded warehouse's oracle plans.

Renders every oracle decision point as the planner node would and trains an adapter on the plan tokens, optionally
pruning-aware (`--pruned`), with memory (`--memory`) and haystack cases (`--haystack`); docs/training.md.

    python -m brace_training.finetune_cli --episodes 40 --epochs 1
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from brace_common.action_schema import ActionSchema, Step
from brace_common.config import resolve_path
from brace_memory.rag import load_passages
from brace_memory.system import MemorySystem, MemorySystemConfig
from brace_training.adapter_training import PlanExample, fit_and_save, training_pruning
from erecap_planner.config import PlannerConfig
from erecap_planner.constrained import ConstrainedPlanDecoder
from erecap_planner.memory_phase import MemoryUse
from erecap_planner.models import SMOLLM2, cache_root, load_model
from sim_bridges.warehouse.warehouse_feed import action_schema
from sim_bridges.warehouse.warehouse_world import FLOOR_PLANS, Warehouse, WorldConfig

from .cli_args import PREDICTOR, WAREHOUSE_ADAPTER, add_training_arguments, training_options
from .haystack_training import haystack_examples
from .plan_data import DecisionPoint, Policy, decision_points
from .planner_policy import PlannerPolicy, load_policy
from .prompts import call_budget, call_prompt, mode_budgets, prompt_path, use_memory
from .saved_examples import save_examples

CORPUS = "package://sim_bridges/config/warehouse_corpus.yaml"
"""The warehouse's static corpus (rag_static)."""
RUN_EPISODES = 3
"""A memory is kept over this many consecutive training episodes, as a run keeps it over its episodes."""


@dataclass(frozen=True)
class MemoryConfig:
    """The memory modules of one kind of training episode (the variants of runs/variants.yaml)."""

    name: str
    modules: tuple[str, ...]


MEMORY_CONFIGS = (MemoryConfig("omniact", ("episodic", "reflective")), MemoryConfig("rag_static", ("rag_static",)),
                  MemoryConfig("rag_memory", ("rag_memory",)), MemoryConfig("gig", ("state_graph", "lookahead")))
"""brace_erecap_memory, rag_static_erecap, rag_memory_erecap, brace_erecap_gig (the loop warning and Bounded
Lookahead's lines); OmniAct's memory is drawn twice as often."""
MEMORY_WEIGHTS = (2, 1, 1, 1)


def default_adapter() -> Path:
    """Where the warehouse adapter is cached."""
    return cache_root() / "adapters" / "smollm2-135m-instruct-warehouse-lora.safetensors"


def plan_steps(point: DecisionPoint) -> list[Step]:
    """The oracle's plan at `point` as the decoder's steps."""
    return [Step(s.action, dict(s.parameters)) for s in point.oracle]


def target_ids(point: DecisionPoint, decoder: ConstrainedPlanDecoder) -> list[int]:
    """The oracle plan's token ids exactly as constrained decoding writes them."""
    return decoder.token_ids(plan_steps(point))


def memory_use(config: MemoryConfig, planner: PlannerConfig = PlannerConfig()) -> MemoryUse:
    """A fresh in-process memory of `config` with the planner's defaults (share, lines, window) and the corpus."""
    corpus = load_passages(resolve_path(CORPUS)) if "rag_static" in config.modules else []
    return MemoryUse(MemorySystem(MemorySystemConfig(config.modules, max_lines=planner.memory_max_lines), corpus=corpus),
                     planner.memory_share, planner.recap_window)


def build_examples(tokenizer, episodes: int, agents: tuple[int, ...], seed0: int, max_tokens: int,
                   rng: random.Random, detour: float = 0.0, memory_share: float = 0.0,
                   floor_plan: str | tuple[str, ...] = "compact", policy_for: Optional[Callable[[ActionSchema], Policy]] = None,
                   on_policy: float = 0.0, pruned: float = 0.0) -> list[PlanExample]:
    """Examples from oracle episodes for every K in `agents` on each warehouse map of `floor_plan` (prompts longer than
    max_tokens skipped), every prompt built by the planner's call path (prompts.py) at the B_t the controller would
    give the point's mode; a share `memory_share` of the episodes read with memory (MEMORY_CONFIGS); a share
    `pruned` of the examples longer than their B_t trained under E-RECAP pruning to it; with `policy_for` (the K's
    schema -> a planner) a share `on_policy` of the plans the world executes are that planner's (the labels stay
    the oracle's)."""
    out = []
    budgets = mode_budgets()
    plans = (floor_plan,) if isinstance(floor_plan, str) else tuple(floor_plan)
    for k, plan in itertools.product(agents, plans):
        schema = ActionSchema.from_dict(action_schema(Warehouse(WorldConfig(num_agents=k, floor_plan=plan))))
        path = prompt_path(tokenizer, schema)
        decoder = path.use.constrained
        uses: dict[str, MemoryUse] = {}
        observe_every = rng.choice([4, 6, 8])
        policy = policy_for(schema) if policy_for is not None and on_policy > 0 else None
        for n, seed in enumerate(range(seed0, seed0 + episodes)):
            memory = None
            if memory_share > 0 and rng.random() < memory_share:
                config = rng.choices(MEMORY_CONFIGS, MEMORY_WEIGHTS)[0]
                if n % RUN_EPISODES == 0 or config.name not in uses:
                    uses[config.name] = memory_use(config)
                memory = uses[config.name]
            use_memory(path, memory)
            for point in decision_points(range(seed, seed + 1), k, observe_every=observe_every, detour=detour,
                                         memory=memory.system if memory else None, floor_plan=plan,
                                         policy=policy, on_policy=on_policy):
                budget = call_budget(point.mode, budgets, rng)
                ids, protect = call_prompt(path, point, budget)
                if len(ids) <= max_tokens:
                    prune = len(ids) > budget and pruned > 0 and rng.random() < pruned
                    out.append(PlanExample(ids, target_ids(point, decoder), budget if prune else None, protect,
                                           decoder.choice_mask(plan_steps(point))))
        if isinstance(policy, PlannerPolicy):
            print(f"K = {k} ({plan}): {policy.calls} planner calls on its own states, first step agrees with the oracle's "
                  f"{policy.first_step_agreement:.1%}, {policy.errors} planner errors", file=sys.stderr)
    return out


def add_data_arguments(ap: argparse.ArgumentParser, episodes: int, seed: int, max_tokens: int, epochs: int) -> None:
    """The model and oracle decision-point arguments of the warehouse training commands."""
    ap.add_argument("--model", default=SMOLLM2)
    ap.add_argument("--episodes", type=int, default=episodes, help="oracle episodes per K")
    ap.add_argument("--agents", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--floor-plan", nargs="+", default=["compact"], choices=list(FLOOR_PLANS),
                    help="the warehouse maps (episodes per K on each)")
    ap.add_argument("--seed", type=int, default=seed, help="first training seed (evaluation uses seeds < 1000)")
    ap.add_argument("--max-tokens", type=int, default=max_tokens, help="longer prompts are skipped")
    ap.add_argument("--epochs", type=int, default=epochs)
    ap.add_argument("--detour", type=float, default=0.0,
                    help="probability that the world executes a plausible wrong plan instead of the oracle's")
    ap.add_argument("--save-examples", type=Path, default=None,
                    help="write the examples to this file and train nothing (train-saved trains from it elsewhere)")


def main(argv=None) -> int:
    """Train and save the adapter."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_arguments(ap, episodes=30, seed=1000, max_tokens=1400, epochs=1)
    ap.add_argument("--examples", type=int, default=600, help="at most this many examples (sampled)")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--output", type=Path, default=default_adapter())
    ap.add_argument("--init", help="continue training this adapter (same rank; a path or package:// URI)")
    ap.add_argument("--pruned", type=float, default=0.0,
                    help="share of the examples longer than their B_t (the demo profile's for the point's mode, "
                         "as the adaptive budget lowers it) trained under E-RECAP pruning to it")
    ap.add_argument("--predictor", default=PREDICTOR, help="E-RECAP predictor bank of the pruning-aware examples")
    ap.add_argument("--memory", type=float, default=0.0,
                    help="share of the episodes rendered as a call with memory reads them (MEMORY_CONFIGS)")
    ap.add_argument("--haystack", type=int, default=0,
                    help="add this many examples of the warehouse haystack's training cases (haystack_training)")
    ap.add_argument("--on-policy", type=float, default=0.0,
                    help="share of the decision points where the world executes the planner's own plan (DAgger)")
    ap.add_argument("--policy-adapter", default=WAREHOUSE_ADAPTER, help="the on-policy planner's adapter ('' = none)")
    ap.add_argument("--policy-predictor", default=PREDICTOR,
                    help="the on-policy planner's E-RECAP predictor ('' = the unpruned context)")
    ap.add_argument("--policy-budget", type=int, default=512, help="the on-policy planner's B_t")
    ap.add_argument("--policy-dtype", default="bfloat16", choices=["float32", "bfloat16"],
                    help="the on-policy planner's weights (on the CPU)")
    add_training_arguments(ap)
    args = ap.parse_args(argv)
    options = training_options(ap, args)
    if args.policy_budget <= 0:
        ap.error(f"--policy-budget {args.policy_budget} must be positive")
    for name in ("pruned", "memory", "on_policy"):
        if not 0.0 <= getattr(args, name) <= 1.0:
            ap.error(f"--{name.replace('_', '-')} {getattr(args, name)} is outside [0, 1]")
    rng = random.Random(args.seed)
    model, tok = load_model(args.model, device="auto", dtype="float32")

    policy_for = (load_policy(args.policy_adapter, args.policy_predictor, args.policy_budget, args.policy_dtype,
                              args.model) if args.on_policy > 0 else None)
    examples = build_examples(tok, args.episodes, tuple(args.agents), args.seed, args.max_tokens, rng, args.detour,
                              args.memory, args.floor_plan, policy_for, args.on_policy, args.pruned)
    if len(examples) > args.examples:
        examples = rng.sample(examples, args.examples)
    pruning = training_pruning(model, args.predictor) if any(e.token_budget for e in examples) else None
    if args.haystack > 0:
        examples += haystack_examples(model, tok, args.haystack, args.max_tokens, rng)
        rng.shuffle(examples)
    print(f"{len(examples)} examples ({args.haystack} of the haystack), mean prompt "
          f"{sum(len(e.prompt_ids) for e in examples) / len(examples):.0f} tokens, "
          f"{sum(e.token_budget is not None for e in examples)} pruned to their B_t", file=sys.stderr)
    if args.save_examples:
        print(f"saved {save_examples(args.save_examples, examples)} examples to {args.save_examples}", file=sys.stderr)
        return 0
    init = Path(resolve_path(args.init)) if args.init else None
    fit_and_save(model, examples, args.output, args.rank, args.epochs, args.lr, init, pruning, options)
    return 0


if __name__ == "__main__":
    sys.exit(main())
