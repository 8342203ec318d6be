"""Where does the planner go wrong in the closed loop? One episode, every call next to the oracle's plan.

ROS-free and in one process: the embedded warehouse, the trigger monitor core with
brace_bringup's `params/trigger_monitor.yaml` (periodic triggers staggered one agent per step, as
in the sim runs), and the planner call path as `config/erecap_planner_sim.yaml`
runs it (shipped adapter and warehouse predictor). Every trigger is served at
once and the world waits for the plan (No BRACE's lockstep, no gate), with the mode
and B_t the controller's budget policy gives the trigger (profile `embedded`) unless
--budget fixes B. Prints each
call with the plan, the oracle's plan from the true state and whether the first
steps agree, then the world events and the episode metrics; with --episodes N
a summary of success, deliveries, agreement, tokens before / after and call
latency P50 / P95 follows. Writes the calls to <out>/closed_loop_trace.csv (--out, default bench/out).

    python bench/closed_loop_trace.py --agents 4 --seed 1 --compressor erecap

Quick mode (`--quick`, what `make test` runs): one episode of K = 2 agents cut off after 4 steps, E-RECAP at the
policy's B_t; options given explicitly still win. Always exits 0 (it traces, it has no target).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from report import fill_defaults, load_planner_model, sim_planner_checkpoint, write_csv

from brace_audit.metrics import percentile
from brace_bringup.run_config import params_dir
from brace_common.action_schema import ActionSchema, Step
from brace_common.config import config_from_file, load_ros_parameters, resolve_path
from brace_common.world_feed import outcomes
from brace_controller.config import ControllerConfig, ControllerNodeConfig, MonitorConfig, MonitorNodeConfig
from brace_controller.policy import BudgetPolicy, select_mode
from brace_controller.triggers import AgentObservation, TriggerMonitor
from brace_training.plan_data import context_buffer
from erecap_planner.call_path import CallOptions, CallRequest, LocalModel, PlannerCallPath
from erecap_planner.precision import resolve
from erecap_planner.predictor import PredictorBank
from erecap_planner.pruning import PruneSchedule, table8_layers
from sim_bridges.warehouse.warehouse_config import SimConfig
from sim_bridges.warehouse.warehouse_feed import (
    action_schema,
    agent_reports,
    episode_entries,
    place_near,
    same_first_step,
    step_entries,
)
from sim_bridges.warehouse.warehouse_world import FLOOR_PLANS, Warehouse

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(__file__).parent / "out"
PREDICTOR = sim_planner_checkpoint("predictor_path")
ADAPTER = sim_planner_checkpoint("adapter_path")


def episode(path: PlannerCallPath, sim: SimConfig, monitor: TriggerMonitor, budget, index: int,
            verbose: bool) -> tuple[dict, list[dict]]:
    """Closed-loop episode `index` of the sim (seed sim.seed + index): its metrics and one row per call.

    `budget(trigger)` gives the call's (mode, B_t).
    """
    seed = sim.seed + index
    world = Warehouse(sim.world(index))
    monitor.reset(episode_start=True)
    entries = list(episode_entries(world, seed)) + step_entries(world, [], 0)
    say = print if verbose else (lambda *a, **k: None)
    for task in world.tasks:
        say(f"task: {task.obj} to {task.dock}, carrier {task.carrier}" + (f", giver {task.giver}" if task.giver else ""))
    rows = []
    while not world.finished:
        events = world.step()
        entries.extend(step_entries(world, events, sim.observe_every))
        for e in events:
            if e.kind != "observation" and "blocked on the way" not in e.text:
                say(f"  t={world.t} {e.agent}: {e.text}")
        triggers = [t for e in outcomes(events) for t in monitor.on_outcome(e.agent, e.success, e.text)]
        for r in agent_reports(world):
            monitor.on_state(r.agent_id, AgentObservation((r.x, r.y, 0.0), r.tracking_error, r.has_goal))
        triggers += monitor.on_step(world.t)
        first = {}  # an agent's first trigger of the step asks for its plan
        for t in triggers:
            if t.agent_id in world.agents:
                first.setdefault(t.agent_id, t)
        for agent, trigger in first.items():
            detail = trigger.detail
            mode, token_budget = budget(trigger)
            out = path.run(context_buffer(entries), CallRequest(agent, token_budget, 60_000, 120_000, mode=int(mode)))
            plan = [Step(s.action, s.parameters) for s in out.steps]
            oracle = world.oracle_plan(agent)
            agrees = same_first_step(plan, oracle, place_near(world, world.agents[agent].pos))
            say(f"CALL t={world.t} {agent} [{detail}] {'ok ' if agrees else 'BAD'} plan {[s.text() for s in plan]} "
                f"oracle {[s.text() for s in oracle]} ({out.tokens_before} -> {out.tokens_after} tokens, "
                f"{out.latency_ms:.0f} ms)", flush=True)
            rows.append({"seed": seed, "step": world.t, "agent": agent, "trigger": detail, "agrees": agrees,
                         "plan": " ".join(s.text() for s in plan), "oracle": " ".join(s.text() for s in oracle),
                         "tokens_before": out.tokens_before, "tokens_after": out.tokens_after,
                         "latency_ms": round(out.latency_ms, 1)})
            world.set_plan(agent, plan)
    return world.metrics(), rows


def sim_planner(model, tok, compressor: str, predictors, dtype: str, agents: int, seed: int, max_steps: int,
                budget: int = 0, first_cut: float | None = None, layout: str | None = None, reuse: bool = True,
                floor_plan: str | None = None):
    """(call path, sim config, trigger monitor, budget of a trigger) of the closed loop, as the sim runs configure
    the planner, the world and the controller's budget policy (profile 'embedded'; `budget` > 0 fixes B;
    `floor_plan`: the warehouse map, default the sim config's)."""
    world = {"floor_plan": floor_plan} if floor_plan else {}
    sim = config_from_file(SimConfig, params_dir() / "embedded_sim.yaml", "embedded_sim", num_agents=agents,
                           seed=seed, max_steps=max_steps, **world)
    first = Warehouse(sim.world(0))
    schema = ActionSchema.from_dict(action_schema(first))
    planner = {**load_ros_parameters(params_dir() / "erecap_planner.yaml", "erecap_planner"),
               **load_ros_parameters(params_dir() / "erecap_planner_sim.yaml", "erecap_planner")}
    cut = planner["first_cut"] if first_cut is None else first_cut
    layout = layout or planner["context_layout"]
    reuse = planner["prefix_reuse"] and reuse
    local = LocalModel(model, tok, PruneSchedule(tuple(table8_layers(model.config.num_hidden_layers)), 0.7,
                                                 first_cut=cut),
                       predictors, decode_weights=resolve("cpu", dtype).decode_weights, prefix_reuse=reuse)
    options = CallOptions(compressor=compressor, decoding="constrained", layout=layout,
                          plan_steps={m: n for m, n in enumerate(planner["plan_steps"]) if n})
    path = PlannerCallPath(local, options, schema)
    controller = config_from_file(ControllerConfig, params_dir() / "brace_controller.yaml", "brace_controller",
                                  ControllerNodeConfig, budget_profile="embedded")
    policy = BudgetPolicy(controller.load_profile(), controller)

    def budget_of(trigger):
        if compressor == "none":
            return select_mode(trigger, False, controller.reuse_severity), 100_000
        chosen = policy.budget(trigger, False, 0)
        return chosen.mode, budget or chosen.token_budget

    print(f"planner: {compressor}, first_cut {cut}, layout {layout}, prefix reuse {reuse}, "
          f"B {budget or 'per mode (profile embedded)'}", flush=True)
    monitor = TriggerMonitor(config_from_file(MonitorConfig, params_dir() / "trigger_monitor.yaml", "trigger_monitor",
                                              MonitorNodeConfig, agents=sorted(first.agents),
                                              periodic_stagger_steps=1))
    return path, sim, monitor, budget_of


def run_episodes(path: PlannerCallPath, sim: SimConfig, monitor: TriggerMonitor, budget_of, episodes: int,
                 verbose: bool) -> tuple[list[dict], dict]:
    """Episodes 0 .. episodes - 1 of the closed loop: one row per call, and the summary over every episode."""
    rows, results = [], []
    for index in range(episodes):
        metrics, calls = episode(path, sim, monitor, budget_of, index, verbose)
        agreement = sum(r["agrees"] for r in calls) / max(len(calls), 1)
        print(f"episode seed {sim.seed + index}: {metrics} calls {len(calls)} oracle agreement {agreement:.0%}",
              flush=True)
        rows += calls
        results.append(metrics)
    latency = [r["latency_ms"] for r in rows] or [0.0]
    before, after = sum(r["tokens_before"] for r in rows), sum(r["tokens_after"] for r in rows)
    summary = {"episodes": len(results), "success": sum(m.success for m in results),
               "delivered": sum(m.delivered for m in results), "tasks": sum(m.tasks for m in results),
               "calls": len(rows), "oracle_agreement": sum(r["agrees"] for r in rows) / max(len(rows), 1),
               "tokens_before": before / max(len(rows), 1), "tokens_after": after / max(len(rows), 1),
               "token_reduction": 1 - after / before if before else 0.0,
               "latency_mean_ms": sum(latency) / len(latency),
               "latency_p50_ms": percentile(latency, 50), "latency_p95_ms": percentile(latency, 95)}
    return rows, summary


def main() -> None:
    """Run the traced episodes."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, help="K (default 4)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--episodes", type=int, default=1, help="seeds seed, seed + 1, …")
    ap.add_argument("--max-steps", type=int, help="steps before an unfinished episode fails (default 60)")
    ap.add_argument("--floor-plan", choices=list(FLOOR_PLANS), help="the warehouse map (default: the sim config's)")
    ap.add_argument("--compressor", choices=["none", "erecap", "random", "recency", "summary"],
                    help="context compression (default none)")
    ap.add_argument("--budget", type=int, default=0,
                    help="B of every call; 0 = the mode and B_t the controller's policy gives the trigger (profile "
                         "'embedded', as the sim runs)")
    ap.add_argument("--first-cut", type=float, help="E-RECAP two-stage first cut (default: the sim config's)")
    ap.add_argument("--layout", choices=["focus", "stable_first"], help="context layout (default: the sim config's)")
    ap.add_argument("--no-reuse", action="store_true", help="no prefix reuse (default: the sim config's)")
    ap.add_argument("--adapter", default=ADAPTER)
    ap.add_argument("--predictor", default=PREDICTOR)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--quiet", action="store_true", help="only the episode lines and the summary")
    ap.add_argument("--out", type=Path, default=OUT, help="folder of the CSV")
    ap.add_argument("--quick", action="store_true", help="smoke run (see the module docstring)")
    args = ap.parse_args()
    fill_defaults(args, quick=dict(agents=2, max_steps=4, compressor="erecap"),
                  full=dict(agents=4, max_steps=60, compressor="none"))

    model, tok = load_planner_model(args.adapter, dtype=args.dtype)
    predictors = PredictorBank.load(resolve_path(args.predictor), model.config) if args.compressor == "erecap" else None
    path, sim, monitor, budget_of = sim_planner(model, tok, args.compressor, predictors, args.dtype, args.agents,
                                                args.seed, args.max_steps, args.budget, args.first_cut, args.layout,
                                                not args.no_reuse, args.floor_plan)
    rows, summary = run_episodes(path, sim, monitor, budget_of, args.episodes, not args.quiet)
    if summary["episodes"] > 1 and rows:
        print(f"{summary['episodes']} episodes: success {summary['success']}/{summary['episodes']}, delivered "
              f"{summary['delivered']}/{summary['tasks']}, calls {summary['calls']}, oracle agreement "
              f"{summary['oracle_agreement']:.0%}, tokens {summary['tokens_before']:.0f} -> "
              f"{summary['tokens_after']:.0f} (reduction {summary['token_reduction']:.1%}), latency P50 / P95 "
              f"{summary['latency_p50_ms']:.0f} / {summary['latency_p95_ms']:.0f} ms")
    print(f"wrote {write_csv(rows, args.out / 'closed_loop_trace.csv')}")


if __name__ == "__main__":
    main()
