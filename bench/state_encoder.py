#!/usr/bin/env python3
"""GiG's state encoder on held-out trajectories: do consecutive states stay within tau and others beyond, and what
does an embedding cost? (GiG Sec. 4.2, Fig. 3; App. A.4.)

Each trained encoder (by default both feature sources: all-MiniLM-L6-v2 and SmolLM2's token embeddings, as
`python -m brace_training.state_encoder_cli` writes them) embeds held-out trajectories never trained on: warehouse
oracle episodes of seeds 0 on (K = 1-6, any dock or one dock; one trajectory per agent, hops 2) and the held-out
TextWorld games in --game-dir (the player's whole scene). Intra: distances of consecutive states of a trajectory
(also for those whose graphs differ: an unchanged graph embeds at distance 0). Inter: distances of sampled states of
different trajectories (also: the share of those pairs whose graphs are identical, which no encoder can part).

Cost: one call as a session graph makes it, the agent's scene-graph cut, its hash and the embedding of that one
graph, from a freshly loaded encoder (cold: its per-text cache fills as it goes, first sightings of a text are in
the figures), then the same calls again (warm); a whole TextWorld scene's key and embedding (warm); and the nearest
neighbour of a state in a bank of 1,000 trajectories of 20-40 held-out states (numpy, float32).

Targets: consecutive pairs within tau = 0.1 >= 95% (each feature source and world); P95 per embedding call <= 20 ms;
P95 nearest-neighbour search <= 5 ms. Writes <output>/state_encoder.csv (separation), state_encoder_timing.csv and
state_encoder.png (a heatmap of two trajectories' pairwise distances and the intra / inter densities); exits 1 when
a target is missed. Run inside the workspace: `source scripts/env.sh && python bench/state_encoder.py` (`--quick`:
2 warehouse seeds, 30 calls, a bank of 100 trajectories, and where no encoder is saved one trained here for 1 epoch).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from report import cpu_report, describe_cpu, fill_defaults, print_written, report_checks, save_plot, write_csv

TAU = 0.1
TARGET_WITHIN_TAU = 0.95
TARGET_EMBED_P95_MS = 20.0
TARGET_SEARCH_P95_MS = 5.0
BANK_TRAJECTORIES = 1000
QUICK_BANK_TRAJECTORIES = 100
BANK_STEPS = (20, 40)
WARMUP_CALLS = 3


def held_out(args: argparse.Namespace) -> dict:
    """Held-out trajectories per world, and the warehouse (world state, agent) pairs the timing calls cut from."""
    from brace_training.state_encoder_training import (
        TEXTWORLD_HELD_OUT_SEEDS,
        textworld_trajectories,
        warehouse_trajectories,
    )
    from sim_bridges.warehouse.warehouse_world import Warehouse, WorldConfig, world_state

    worlds = {"warehouse": warehouse_trajectories(range(args.seeds))}
    games, missing = textworld_trajectories(TEXTWORLD_HELD_OUT_SEEDS[:args.games], args.game_dir)
    if missing:
        print(f"TextWorld games not in {args.game_dir} (not made here): seeds {missing}")
    if len(games) >= 2:
        worlds["textworld"] = games
    calls, seed = [], 0
    while len(calls) < args.calls + WARMUP_CALLS:  # states as the world publishes them, every agent each step
        world = Warehouse(WorldConfig(num_agents=1 + seed % 6, seed=seed))
        for name in world.agents:
            world.set_plan(name, world.oracle_plan(name))
        while not world.finished and len(calls) < args.calls + WARMUP_CALLS:
            world.step()
            for name, agent in world.agents.items():
                if agent.current is None:
                    world.set_plan(name, world.oracle_plan(name))
            state = world_state(world, seed)
            calls += [(state, name) for name in world.agents]
        seed += 1
    return {"trajectories": worlds, "calls": calls[:args.calls + WARMUP_CALLS]}


def check_held_out(encoder, args: argparse.Namespace) -> None:
    """SystemExit when the encoder was trained on a seed this bench holds out."""
    from brace_training.state_encoder_training import TEXTWORLD_HELD_OUT_SEEDS

    facts = encoder.training
    low, high = facts.get("warehouse_seeds", [10**9, 10**9])
    if low < args.seeds:
        raise SystemExit(f"encoder trained on warehouse seeds {low}..{high}: overlaps held-out 0..{args.seeds - 1}")
    shared = set(facts.get("textworld_seeds", [])) & set(TEXTWORLD_HELD_OUT_SEEDS)
    if shared:
        raise SystemExit(f"encoder trained on held-out TextWorld games {sorted(shared)}")


def time_embedding(encoder, calls: list) -> np.ndarray:
    """ms per call: cut the agent's scene graph, hash it, embed it (warm-up calls dropped)."""
    from brace_common.scene_graph import agent_view

    out = []
    for state, agent in calls:
        started = time.perf_counter()
        graph = agent_view(state, agent, 2, 1.0)
        graph.key()
        encoder.embed([graph])
        out.append((time.perf_counter() - started) * 1000.0)
    return np.array(out[WARMUP_CALLS:])


def time_textworld(encoder, trajectories: list, calls: int) -> np.ndarray:
    """ms per embedding of one whole TextWorld scene graph (the cut is timed with the warehouse)."""
    graphs = [g for t in trajectories for g in t.graphs]
    out = []
    for i in range(min(calls, len(graphs))):
        started = time.perf_counter()
        graphs[i].key()
        encoder.embed([graphs[i]])
        out.append((time.perf_counter() - started) * 1000.0)
    return np.array(out[WARMUP_CALLS:])


def time_search(states: np.ndarray, queries: int, seed: int,
                trajectories: int = BANK_TRAJECTORIES) -> tuple[np.ndarray, int]:
    """ms per search (Eq. 6) of the planner's experience bank (brace_memory.experience.ExperienceBank) holding
    `trajectories` trajectories of held-out states, for a state whose key it does not hold; bank size."""
    from brace_common.session_graph import Visit
    from brace_memory.experience import ExperienceBank, Trajectory
    from brace_memory.record_index import RecordIndex
    from brace_memory.store import MemoryStore

    rng = np.random.default_rng(seed)
    lengths = rng.integers(BANK_STEPS[0], BANK_STEPS[1] + 1, trajectories)
    bank = ExperienceBank(RecordIndex(MemoryStore(None, max_records=trajectories)), TAU)
    for j, n in enumerate(lengths):
        zs = states[rng.integers(0, len(states), int(n))]
        path = [Visit(f"t{j}s{i}", step=i, last_step=i, action=f"move_to({{\"step\": {i}}})") for i in range(n)]
        bank.add(Trajectory(f"agent_{j % 8}", f"bench/{j}", "deliver", path, zs=zs.tolist()))
    out = []
    for q in states[rng.integers(0, len(states), queries + WARMUP_CALLS)]:
        query = q.tolist()
        started = time.perf_counter()
        bank.search("unknown", query)
        out.append((time.perf_counter() - started) * 1000.0)
    return np.array(out[WARMUP_CALLS:]), int(lengths.sum())


def quick_encoder(folder: Path) -> Path:
    """A small encoder trained here for the quick run when none is saved (MiniLM features, 1 epoch, two
    warehouse training seeds): the bench measures it like a trained one."""
    from brace_training import state_encoder_cli

    state_encoder_cli.main(["--features", "minilm", "--epochs", "1", "--warehouse-seeds", "2",
                            "--textworld-games", "0", "--check-seeds", "0", "--output", str(folder)])
    return folder


def pick_pair(trajectories: list) -> tuple:
    """Two trajectories of different seeds for the heatmap (the longest of the first run, then of another seed)."""
    def seed(t) -> str:
        return t.name.split()[1]   # "seed=N"

    first = max((t for t in trajectories if seed(t) == seed(trajectories[0])), key=lambda t: len(t.graphs))
    others = [t for t in trajectories if seed(t) != seed(first) and len(t.graphs) >= 4]
    return first, (others[0] if others else next(t for t in trajectories if t is not first))


def main(argv: list[str] | None = None) -> int:
    """Embed the held-out trajectories with each encoder, time calls and search, print, write CSV / PNG."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    parser.add_argument("--encoders", type=Path, nargs="*", default=None,
                        help="encoder folders (default: the CLI's default folder of each feature source)")
    parser.add_argument("--seeds", type=int, default=None, help="held-out warehouse seeds (0 on)")
    parser.add_argument("--games", type=int, default=None, help="held-out TextWorld games (at most 6)")
    parser.add_argument("--game-dir", type=Path, default=Path("~/.cache/brace/textworld").expanduser())
    parser.add_argument("--calls", type=int, default=None, help="timed embedding calls and searches")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args(argv)
    fill_defaults(args, {"seeds": 2, "games": 2, "calls": 30}, {"seeds": 20, "games": 6, "calls": 1000})
    # heavy: torch and the text encoders load after the arguments are read
    import torch

    from brace_memory.state_encoder import CONFIG_FILE, FEATURE_SOURCES, StateEncoder, default_encoder_dir
    from brace_training.state_encoder_training import embed_trajectories, separation

    if args.threads:
        torch.set_num_threads(args.threads)
    folders = args.encoders or [default_encoder_dir(source) for source in FEATURE_SOURCES]
    if args.quick and not any((f / CONFIG_FILE).is_file() for f in folders):
        folders = [quick_encoder(Path(args.out) / "quick-encoder")]
    data = held_out(args)
    cpu = cpu_report()
    machine = {"cpu": cpu["cpu"], "flags": cpu["flags"], "torch_capability": cpu["torch_capability"],
               "threads": cpu["threads"], "dtype": "float32"}
    rows, timing, figures = [], [], []
    for folder in folders:
        try:
            loaded = time.perf_counter()
            encoder = StateEncoder.load(folder)
            load_s = time.perf_counter() - loaded
        except FileNotFoundError as exc:
            print(f"MISS {exc}")
            rows.append({"features": folder.name, "world": "-", "trained": False})
            continue
        check_held_out(encoder, args)
        source = encoder.config.feature_source
        for cache in ("cold", "warm"):  # cold: from the fresh load (texts seen for the first time embed then)
            embed_ms = time_embedding(encoder, data["calls"])
            timing.append({"features": source, "what": f"warehouse call (cut + key + embed), {cache} text cache",
                           "calls": len(embed_ms), "p50_ms": float(np.percentile(embed_ms, 50)),
                           "p95_ms": float(np.percentile(embed_ms, 95)), "max_ms": float(embed_ms.max()),
                           "load_s": round(load_s, 1), **machine})
        for world, trajectories in data["trajectories"].items():
            z = embed_trajectories(encoder, trajectories)
            s = separation(trajectories, z, TAU)
            rows.append({"features": source, "world": world, "trained": True, "trajectories": len(trajectories),
                         "states": int(sum(len(t) for t in z)), **s.summary(), "epochs": encoder.training.get("epochs"),
                         "train_seconds": encoder.training.get("train_seconds"), **machine})
            a, b = pick_pair(trajectories)
            pair = np.concatenate(embed_trajectories(encoder, [a, b]))
            figures.append((f"{source}, {world}", pair, len(a.graphs), s))
            if world == "textworld":
                tw_ms = time_textworld(encoder, trajectories, len(data["calls"]))
                timing.append({"features": source, "what": "textworld scene (key + embed), warm", "calls": len(tw_ms),
                               "p50_ms": float(np.percentile(tw_ms, 50)), "p95_ms": float(np.percentile(tw_ms, 95)),
                               "max_ms": float(tw_ms.max()), "load_s": round(load_s, 1), **machine})
            if world == "warehouse":
                search_ms, bank = time_search(np.concatenate(z), args.calls, 0,
                                              QUICK_BANK_TRAJECTORIES if args.quick else BANK_TRAJECTORIES)
                timing.append({"features": source, "what": f"nearest neighbour, bank {bank} states",
                               "calls": len(search_ms), "p50_ms": float(np.percentile(search_ms, 50)),
                               "p95_ms": float(np.percentile(search_ms, 95)), "max_ms": float(search_ms.max()),
                               "load_s": "", **machine})

    print(f"GiG state encoder on held-out trajectories, tau = {TAU}; {describe_cpu(cpu)}; dtype float32")
    print("| features | world | trajectories | states | consecutive pairs | within tau | changed pairs | changed within "
          "tau | inter beyond tau | inter identical | median intra | median changed | median inter | epochs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if not r["trained"]:
            print(f"| {r['features']} | not trained | | | | | | | | | | | | |")
            continue
        print(f"| {r['features']} | {r['world']} | {r['trajectories']} | {r['states']} | {r['intra_pairs']} | "
              f"{100 * r['intra_within_tau']:.1f}% | {r['intra_changed_pairs']} | "
              f"{100 * r['intra_changed_within_tau']:.1f}% | {100 * r['inter_beyond_tau']:.1f}% | "
              f"{100 * r['inter_identical']:.1f}% | {r['intra_median']:.3f} | {r['intra_changed_median']:.3f} | "
              f"{r['inter_median']:.3f} | {r['epochs']} |")
    print("\n| features | timed | calls | P50 ms | P95 ms | max ms |")
    print("|---|---|---|---|---|---|")
    for t in timing:
        print(f"| {t['features']} | {t['what']} | {t['calls']} | {t['p50_ms']:.3f} | {t['p95_ms']:.3f} | "
              f"{t['max_ms']:.3f} |")

    out = Path(args.out)
    csv_path = write_csv(rows, out / "state_encoder.csv")
    timing_path = write_csv(timing, out / "state_encoder_timing.csv") if timing else None

    def draw(plt):
        fig, axes = plt.subplots(len(figures), 2, figsize=(10, 3.6 * len(figures)), squeeze=False)
        for (title, pair, split, s), (left, right) in zip(figures, axes, strict=True):
            d = np.linalg.norm(pair[:, None, :] - pair[None, :, :], axis=-1)
            im = left.imshow(d, cmap="viridis")
            left.axhline(split - 0.5, color="white", lw=0.8)
            left.axvline(split - 0.5, color="white", lw=0.8)
            left.set_title(f"{title}: Seq1 (0-{split - 1}), Seq2 ({split}-{len(pair) - 1})", fontsize=9)
            left.set_xlabel("step")
            left.set_ylabel("step")
            fig.colorbar(im, ax=left, fraction=0.046)
            top = max(float(np.percentile(s.inter, 99.5)), float(s.intra.max(initial=0.0)), 2 * TAU)
            bins = np.linspace(0.0, top, 60)
            right.hist(s.intra, bins=bins, density=True, histtype="step", label="intra (consecutive)")
            right.hist(s.inter, bins=bins, density=True, histtype="step", linestyle="--", color="red", label="inter")
            right.axvline(TAU, color="black", lw=0.8, linestyle=":", label=f"tau = {TAU}")
            right.set_xlabel("Euclidean distance")
            right.set_ylabel("density")
            right.set_yscale("log")
            right.legend(fontsize=8)
        fig.tight_layout()
        return fig

    png = save_plot(out / "state_encoder.png", draw) if figures else None
    print_written(csv_path, timing_path, png)
    checks = []
    for r in rows:
        if not r["trained"]:
            checks.append((f"encoder {r['features']} trained", False, "missing: run python -m "
                           "brace_training.state_encoder_cli --features <source>"))
            continue
        checks.append((f"{r['features']} {r['world']}: consecutive pairs within tau >= {100 * TARGET_WITHIN_TAU:.0f}%",
                       r["intra_within_tau"] >= TARGET_WITHIN_TAU, f"{100 * r['intra_within_tau']:.1f}%"))
    for t in timing:
        target = TARGET_SEARCH_P95_MS if t["what"].startswith("nearest") else TARGET_EMBED_P95_MS
        checks.append((f"{t['features']} {t['what']} P95 <= {target:.0f} ms", t["p95_ms"] <= target,
                       f"{t['p95_ms']:.2f} ms"))
    return report_checks(checks)


if __name__ == "__main__":
    sys.exit(main())
