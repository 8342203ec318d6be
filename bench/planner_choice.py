"""Which way of using the pretrained LM plans best on the embedded warehouse?

Uses the oracle-driven decision points of brace_training.plan_data (realistic states),
renders the planner context the embedded_sim would publish, and asks each
planner configuration for the requested agent's plan. Reports oracle agreement
(first step equals the oracle's first step), full-plan agreement and call
latency, side by side in one run. ROS-free (the same core as the nodes).
Writes <out>/planner_choice.csv (--out, default bench/out); always exits 0 (no target).

    python bench/planner_choice.py --episodes 3 --agents 4
    python bench/planner_choice.py --adapter ''    # the off-the-shelf model
    python bench/planner_choice.py --memory flat omniact   # the same points read with OmniAct's memory

Each call carries its point's mode and step, as the controller's would. With `--memory`, each configuration also
runs with a fresh memory of that kind (finetune_cli's MEMORY_CONFIGS) fed while its points are generated, so a
call reads what a run's memory would hold at that moment.

Quick mode (`--quick`, what `make test` runs): the first decision point of one episode, constrained decoding
unpruned and under E-RECAP; options given explicitly still win.
"""

from __future__ import annotations

import argparse
import itertools
import time
from dataclasses import replace
from pathlib import Path

import yaml
from report import fill_defaults, load_planner_model, sim_planner_checkpoint, write_csv

from brace_common.config import resolve_path
from brace_training.finetune_cli import MEMORY_CONFIGS, memory_use
from brace_training.plan_data import decision_points
from brace_training.planner_policy import PlannerPolicy
from brace_training.prompts import use_memory
from erecap_planner.call_path import CallOptions, LocalModel, PlannerCallPath
from erecap_planner.plan_parser import ActionSchema
from erecap_planner.predictor import PredictorBank
from erecap_planner.pruning import PruneSchedule, table8_layers
from sim_bridges.warehouse.warehouse_feed import action_schema
from sim_bridges.warehouse.warehouse_world import FLOOR_PLANS, Warehouse, WorldConfig

OUT = Path(__file__).parent / "out"
PREDICTOR = sim_planner_checkpoint("predictor_path")
ADAPTER = sim_planner_checkpoint("adapter_path")
CONFIGS = ["candidates/none", "constrained/none", "constrained/erecap", "constrained/random", "constrained/recency"]
FREE_CONFIGS = ["json/none", "json/erecap"]
"""Free JSON generation, validated afterwards (not in the default set: it shows whether a model writes plans at all)."""
QUICK_CONFIGS = ["constrained/none", "constrained/erecap"]
MEMORIES = ["flat", *(c.name for c in MEMORY_CONFIGS)]


def score_points(path: PlannerCallPath, points, budget: int) -> dict:
    """Ask `path` for the plan at every oracle decision point (B = `budget`) and return PlannerPolicy's scores."""
    policy = PlannerPolicy(path, budget)
    for point in points:
        policy(point)
    return policy.scores()


def main() -> None:
    """Compare decodings / compressors by oracle agreement."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, help="oracle episodes (seeds 0..N-1) of the decision points (default 2)")
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--floor-plan", default="compact", choices=list(FLOOR_PLANS), help="the warehouse map")
    ap.add_argument("--every", type=int, default=8)
    ap.add_argument("--observe-every", type=int, default=4)
    ap.add_argument("--limit", type=int, help="decision points per configuration (default 40)")
    ap.add_argument("--budget", type=int, default=384)
    ap.add_argument("--adapter", default=ADAPTER, help="LoRA adapter merged into the model ('' = off-the-shelf)")
    ap.add_argument("--predictor", default=PREDICTOR, help="E-RECAP predictor checkpoint of constrained/erecap ('' = untrained)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="model weights on the CPU")
    ap.add_argument("--configs", nargs="+", choices=CONFIGS + FREE_CONFIGS, help=f"default: {' '.join(CONFIGS)}")
    ap.add_argument("--model", default="", help="model_path (default: the sim planner's SmolLM2-135M-Instruct)")
    ap.add_argument("--first-cut", nargs="+", type=float, default=[0.0],
                    help="E-RECAP configs run with each: two-stage prefill keeping first_cut x B at the first pruning "
                         "layer (0 = Table 8 progressive)")
    ap.add_argument("--layout", nargs="+", default=["focus"], choices=["focus", "stable_first"],
                    help="run every config with each context layout")
    ap.add_argument("--decode-weights", nargs="+", default=["model"], choices=["model", "float16", "int8"],
                    help="run every config with each (decode-sized forwards read these weights)")
    ap.add_argument("--memory", nargs="+", default=["flat"], choices=MEMORIES,
                    help="run every config with each memory ('flat' = none)")
    ap.add_argument("--out", type=Path, default=OUT, help="folder of the CSV")
    ap.add_argument("--quick", action="store_true", help="smoke run (see the module docstring)")
    args = ap.parse_args()
    fill_defaults(args, quick=dict(episodes=1, limit=1, configs=QUICK_CONFIGS),
                  full=dict(episodes=2, limit=40, configs=CONFIGS))

    model, tok = load_planner_model(args.adapter, dtype=args.dtype, model_path=args.model)
    depth = model.config.num_hidden_layers
    layers = table8_layers(depth)
    schedule = PruneSchedule(tuple(layers), 0.7)
    trained = (PredictorBank.load(resolve_path(args.predictor), model.config) if args.predictor
               else PredictorBank.for_model(model.config, layers, seed=0))  # '' = untrained (another model's)
    world0 = Warehouse(WorldConfig(num_agents=args.agents, floor_plan=args.floor_plan))
    schema = ActionSchema.from_dict(action_schema(world0))
    configs = {}
    for weights, layout, name, memory in itertools.product(args.decode_weights, args.layout, args.configs,
                                                           args.memory):
        decoding, compressor = name.split("/")
        for cut in (args.first_cut if compressor == "erecap" else [0.0]):
            label = (name + (f"+cut{cut:g}" if cut else "") + ("" if weights == "model" else f"@{weights}")
                     + ("" if layout == "focus" else f"[{layout}]") + ("" if memory == "flat" else f"+{memory}"))
            local = LocalModel(model, tok, replace(schedule, first_cut=cut),
                               trained if compressor == "erecap" else None, decode_weights=weights)
            options = CallOptions(compressor=compressor, decoding=decoding, layout=layout)
            configs[label] = (memory, PlannerCallPath(local, options, schema))
    rows = []
    for name, (memory, path) in configs.items():
        use_memory(path, None if memory == "flat" else memory_use(next(c for c in MEMORY_CONFIGS if c.name == memory)))
        # generated lazily: the memory holds what a run's would when each point is consumed
        points = itertools.islice(decision_points(range(args.episodes), args.agents, args.every, args.observe_every,
                                                  memory=path.memory.system if path.memory else None,
                                                  floor_plan=args.floor_plan), args.limit)
        started = time.monotonic()
        scores = score_points(path, points, args.budget)
        if path.memory:
            path.memory.system.close()
        rows.append({"config": name, "adapter": bool(args.adapter), **scores,
                     "wall_s": round(time.monotonic() - started, 1)})
        print(rows[-1], flush=True)
    path = write_csv(rows, args.out / "planner_choice.csv")
    print(yaml.safe_dump(rows, sort_keys=False))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
