"""GiG's experience bank from oracle runs of training seeds (GiG Sec. 4.1: successful trajectories, collected before
the evaluation): the store file a planner's `memory_store_path` (memory module `experience`) reads.

TextWorld: the policy plays each training game (seeds from TRAIN_SEEDS) to its win; the warehouse: every agent
follows the oracle on training seeds (no slips, no drift) until the episode succeeds. Each won game or successful
episode keeps every agent's session graph, with embeddings when --encoder names GiG's encoder. Held-out seeds (the
benchmarks') are never played here.

    python -m brace_training.experience_cli --out ~/.cache/brace_ros/experience/textworld.sqlite --world textworld
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

from brace_common.session_graph import Embedder
from brace_memory.store import MemoryStore
from brace_memory.system import MemorySystem, MemorySystemConfig

from .textworld_data import TEXTWORLD_CELL_M, TEXTWORLD_HOPS

TRAIN_SEEDS = 100_000
"""The first training seed of either world (the benchmarks hold out the seeds below)."""
WAREHOUSE_HOPS, WAREHOUSE_CELL_M = 2, 1.0
"""A warehouse agent's state: what its relations reach within 2 edges, its cell (the planner's defaults)."""


def textworld_bank(system: MemorySystem, seeds: range, game_dir: Path, max_steps: int = 200) -> int:
    """Play each seed's game with the policy; experiences kept."""
    # textworld (and jericho): seconds to import, only for --world textworld
    from sim_bridges.textworld.textworld_game import TextWorldGame
    from sim_bridges.textworld.textworld_games import GameSpec, generate_game

    from .textworld_play import TextWorldSession  # it imports textworld too

    kept = 0
    for seed in seeds:
        game = TextWorldGame(generate_game(GameSpec(seed), game_dir), max_steps)
        try:
            session = TextWorldSession(game, 0, seed, system)
            while not game.finished and game.oracle_commands():
                session.play(game.oracle_commands()[0])
            kept += session.end()
        finally:
            game.close()
    return kept


def warehouse_bank(system: MemorySystem, seeds: range, num_agents: int, task_docks: int, max_steps: int = 120) -> int:
    """Run each seed's episode with every agent on the oracle; experiences kept."""
    from sim_bridges.warehouse.warehouse_world import Warehouse, WorldConfig, world_state  # only for --world warehouse

    kept = 0
    for seed in seeds:
        w = Warehouse(WorldConfig(num_agents=num_agents, seed=seed, task_docks=task_docks, grasp_failure=0.0,
                                  drift=0.0, max_steps=max_steps))
        system.start_episode()
        system.on_world_state(world_state(w, seed))
        for _ in range(max_steps):
            for agent in w.agents:
                task = w.task_of(agent)
                if w.agents[agent].current is None and task is not None:
                    w.set_plan(agent, w.oracle_plan(agent))
            w.step()
            system.on_world_state(world_state(w, seed))
            if all(t.done for t in w.tasks):
                break
        kept += system.end_episode(f"warehouse/{seed}", all(t.done for t in w.tasks), w.t)
    return kept


def load_embedder(path: Optional[str]) -> Optional[Embedder]:
    """GiG's encoder at `path` as an Embedder (None: keys only)."""
    if not path:
        return None
    from brace_memory.state_encoder import StateEncoder  # torch and a text encoder: only with --encoder

    return StateEncoder.load(Path(path).expanduser()).embed


def main(argv: Optional[list[str]] = None) -> int:
    """Build the bank; print how many experiences it holds."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", choices=("textworld", "warehouse"), required=True)
    ap.add_argument("--out", type=Path, required=True, help="the store file (created; an existing one grows)")
    ap.add_argument("--seeds", type=int, default=50, help=f"training seeds from {TRAIN_SEEDS} (GiG: 50)")
    ap.add_argument("--encoder", default="", help="GiG's encoder directory (state_encoder_cli); empty = keys only")
    ap.add_argument("--game-dir", type=Path, default=Path("~/.cache/brace/textworld").expanduser())
    ap.add_argument("--num-agents", type=int, default=2, help="warehouse: K")
    ap.add_argument("--task-docks", type=int, default=0, help="warehouse: tasks deliver to the first n docks (0: any)")
    args = ap.parse_args(argv)
    args.out.expanduser().parent.mkdir(parents=True, exist_ok=True)
    seeds = range(TRAIN_SEEDS, TRAIN_SEEDS + args.seeds)
    textworld = args.world == "textworld"
    settings = MemorySystemConfig(("experience",), scene_hops=TEXTWORLD_HOPS if textworld else WAREHOUSE_HOPS,
                                  scene_cell_m=TEXTWORLD_CELL_M if textworld else WAREHOUSE_CELL_M)
    system = MemorySystem(settings, MemoryStore(args.out.expanduser()), embed=load_embedder(args.encoder))
    try:
        if textworld:
            kept = textworld_bank(system, seeds, args.game_dir)
        else:
            kept = warehouse_bank(system, seeds, args.num_agents, args.task_docks)
        print(f"{args.out}: {kept} experiences kept from {len(seeds)} {args.world} training seeds "
              f"({len(system.bank)} in the bank)")
    finally:
        system.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
