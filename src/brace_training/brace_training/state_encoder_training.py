"""Training data and training of GiG's state encoder (brace_memory.state_encoder, GiG Sec. 3.1.3, App. A.4). ROS-free.

Trajectories of scene graphs from oracle warehouse episodes and TextWorld games (training seeds only), and Eq. 2's
triplet training on them; docs/training.md has the data and the loss.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from brace_common.scene_graph import SceneGraph, agent_view
from brace_memory.state_encoder import GraphBatch, StateEncoder, gig_loss, message_edges
from sim_bridges.warehouse.warehouse_world import Warehouse, WorldConfig
from sim_bridges.warehouse.warehouse_world import world_state as warehouse_state

WAREHOUSE = "warehouse"
TEXTWORLD = "textworld"
WAREHOUSE_HOPS, WAREHOUSE_CELL_M = 2, 1.0
TEXTWORLD_HOPS, TEXTWORLD_CELL_M = 0, 0.0
WAREHOUSE_TRAIN_SEED = 10_000
"""Warehouse training episodes run seeds WAREHOUSE_TRAIN_SEED on; the benchmark's held-out episodes 0 on."""
AGENT_COUNTS = (1, 2, 3, 4, 5, 6)
TASK_DOCKS = (0, 1)
TEXTWORLD_TRAIN_SEED = 100_000
"""The planner's TextWorld training games (brace_training.textworld_finetune_cli.TRAIN_SEEDS) are seeds 100,000 on."""
TEXTWORLD_HELD_OUT_SEEDS = (0, 1, 2, 200_000, 200_001, 200_002)
"""The memory benchmark's games (0 on) and the adapter check's (200,000 on): never trained on."""
TEXTWORLD_MAX_STEPS = 200
MIN_BATCH_PAIRS = 2
NEGATIVE_TRIES = 20


@dataclass(frozen=True)
class Trajectory:
    """One agent's distinct consecutive scene graphs in one run (an outer graph's states)."""

    world: str
    name: str
    agent_id: str
    graphs: tuple[SceneGraph, ...]


def distinct_states(graphs: Iterable[SceneGraph]) -> list[SceneGraph]:
    """The graphs without those equal (by key) to the one before."""
    out: list[SceneGraph] = []
    for g in graphs:
        if not out or out[-1].key() != g.key():
            out.append(g)
    return out


def warehouse_episode(seed: int, num_agents: int, task_docks: int = 0, max_steps: int = 60) -> list[Trajectory]:
    """One oracle-driven warehouse episode (replanning when a plan ends or a step fails): a trajectory per agent."""
    world = Warehouse(WorldConfig(num_agents=num_agents, seed=seed, task_docks=task_docks, max_steps=max_steps))
    seen: dict[str, list[SceneGraph]] = {name: [] for name in world.agents}

    def observe() -> None:
        state = warehouse_state(world, 0)
        for name, graphs in seen.items():
            graph = agent_view(state, name, WAREHOUSE_HOPS, WAREHOUSE_CELL_M)
            if not graphs or graphs[-1].key() != graph.key():
                graphs.append(graph)

    for name in world.agents:
        world.set_plan(name, world.oracle_plan(name))
    observe()
    while not world.finished:
        failed = {e.agent for e in world.step() if not e.success}
        for name, agent in world.agents.items():
            if agent.current is None or name in failed:
                world.set_plan(name, world.oracle_plan(name))
        observe()
    run = f"{WAREHOUSE} seed={seed} K={num_agents} task_docks={task_docks}"
    return [Trajectory(WAREHOUSE, f"{run} {name}", name, tuple(graphs)) for name, graphs in seen.items()]


def warehouse_trajectories(seeds: Iterable[int], agent_counts: Sequence[int] = AGENT_COUNTS,
                           task_docks: Sequence[int] = TASK_DOCKS) -> list[Trajectory]:
    """Every agent's trajectory of every (seed, K, task_docks) episode, with at least two states."""
    out = []
    for seed in seeds:
        for k in agent_counts:
            for docks in task_docks:
                out += [t for t in warehouse_episode(seed, k, docks) if len(t.graphs) >= 2]
    return out


def textworld_trajectory(game_file: Path, seed: int, max_steps: int = TEXTWORLD_MAX_STEPS) -> Trajectory:
    """The player's whole-scene trajectory through a game played by textworld's policy (the recipe read first)."""
    # textworld (and jericho): seconds to import, only when TextWorld games are collected
    from sim_bridges.textworld.textworld_game import PLAYER, TextWorldGame
    from sim_bridges.textworld.textworld_state import world_state

    game = TextWorldGame(game_file, max_steps=max_steps)
    try:
        graphs = [agent_view(world_state(game, 0), PLAYER, TEXTWORLD_HOPS, TEXTWORLD_CELL_M)]
        while not game.finished:
            plan = game.oracle_plan()
            if not plan:
                break
            game.set_plan(plan[:1])
            game.step()
            graphs.append(agent_view(world_state(game, 0), PLAYER, TEXTWORLD_HOPS, TEXTWORLD_CELL_M))
    finally:
        game.close()
    return Trajectory(TEXTWORLD, f"{TEXTWORLD} seed={seed}", PLAYER, tuple(distinct_states(graphs)))


def textworld_trajectories(seeds: Iterable[int], folder: Path) -> tuple[list[Trajectory], list[int]]:
    """Trajectories of the seeds' games (tw-cooking defaults) found in `folder`; the seeds whose game is not there."""
    from sim_bridges.textworld.textworld_games import GameSpec, cached  # textworld: only when games are collected

    out, missing = [], []
    for seed in seeds:
        path = cached(GameSpec(seed), Path(folder).expanduser())
        if path is None:
            missing.append(seed)
            continue
        trajectory = textworld_trajectory(path, seed)
        if len(trajectory.graphs) >= 2:
            out.append(trajectory)
    return out, missing


# ---------------------------------------------------------------------- training


@dataclass(frozen=True)
class TrainConfig:
    """Optimiser and loss settings (App. A.4: 200 epochs, lambda 0.5; margin alpha 1.0)."""

    epochs: int = 200
    batch_size: int = 128
    lr: float = 5e-3
    weight_decay: float = 5e-4
    alpha: float = 1.0
    lam: float = 0.5
    seed: int = 0

    def validate(self) -> None:
        """ValueError naming the first setting out of range."""
        for name in ("epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} {getattr(self, name)} must be >= 1")
        for name in ("lr", "alpha"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} {getattr(self, name)} must be > 0")
        for name in ("weight_decay", "lam"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} {getattr(self, name)} must be >= 0")


@dataclass
class TrainReport:
    """What a training run did: per-epoch mean losses, steps, data sizes, time."""

    epochs: int = 0
    steps: int = 0
    trajectories: int = 0
    states: int = 0
    pairs: int = 0
    seconds: float = 0.0
    loss: list[float] = field(default_factory=list)
    triplet: list[float] = field(default_factory=list)
    uniformity: list[float] = field(default_factory=list)


def signature(graph: SceneGraph) -> tuple:
    """What the encoder reads of a graph (node texts and edges): equal signatures embed equally."""
    return tuple(graph.node_texts()), tuple(graph.edge_index())


class TripletData:
    """Trajectories compiled once: node feature rows of the distinct texts, each state's rows and message edges,
    its trajectory and signature, and the distinct consecutive transitions (anchor, positive)."""

    def __init__(self, encoder: StateEncoder, trajectories: Sequence[Trajectory]):
        if len(trajectories) < 2:
            raise ValueError(f"training needs at least two trajectories (got {len(trajectories)})")
        texts: dict[str, int] = {}
        signatures: dict[tuple, int] = {}
        self.rows: list[torch.Tensor] = []
        self.edges: list[torch.Tensor] = []
        self.trajectory: list[int] = []
        self.signature: list[int] = []
        self.world: list[str] = []
        self.pairs: list[tuple[int, int]] = []
        seen_pairs: set[tuple[int, int]] = set()
        for i, traj in enumerate(trajectories):
            for t, graph in enumerate(traj.graphs):
                state = len(self.rows)
                self.rows.append(torch.tensor([texts.setdefault(x, len(texts)) for x in graph.node_texts()]))
                self.edges.append(message_edges(len(graph.nodes), graph.edge_index()))
                self.trajectory.append(i)
                self.world.append(traj.world)
                self.signature.append(signatures.setdefault(signature(graph), len(signatures)))
                if t > 0 and (self.signature[state - 1], self.signature[state]) not in seen_pairs:
                    seen_pairs.add((self.signature[state - 1], self.signature[state]))
                    self.pairs.append((state - 1, state))
        self.features = encoder.features.rows(list(texts))
        self.num_trajectories = len(trajectories)

    def batch(self, states: Sequence[int]) -> GraphBatch:
        """The states as one disjoint graph."""
        counts = [len(self.rows[s]) for s in states]
        offsets = np.cumsum([0, *counts[:-1]])
        x = self.features[torch.cat([self.rows[s] for s in states])]
        edges = torch.cat([self.edges[s] + int(off) for s, off in zip(states, offsets, strict=True)], dim=1)
        batch = torch.repeat_interleave(torch.arange(len(states)), torch.tensor(counts))
        return GraphBatch(x, edges, batch, len(states))

    def negative(self, anchor: int, positive: int, pool: Sequence[int], rng: random.Random) -> int:
        """A state of `pool` from another trajectory than the anchor's, whose graph differs from both."""
        others = [s for s in pool if self.trajectory[s] != self.trajectory[anchor]]
        if not others:
            raise ValueError(f"no other trajectory in the {self.world[anchor]} states to draw a negative from")
        pick = others[0]
        for _ in range(NEGATIVE_TRIES):
            pick = rng.choice(others)
            if self.signature[pick] not in (self.signature[anchor], self.signature[positive]):
                break
        return pick

    def epoch(self, batch_size: int, rng: random.Random) -> list[tuple[list[int], list[int], list[int]]]:
        """One pass over the transitions: batches (anchors, positives, negatives) of one world each, shuffled."""
        by_world: dict[str, list[tuple[int, int]]] = {}
        for a, p in self.pairs:
            by_world.setdefault(self.world[a], []).append((a, p))
        states_of: dict[int, list[int]] = {}
        for s, traj in enumerate(self.trajectory):
            states_of.setdefault(traj, []).append(s)
        world_states = {w: [s for s in range(len(self.rows)) if self.world[s] == w] for w in by_world}
        out = []
        for world, pairs in by_world.items():
            rng.shuffle(pairs)
            chunks = [pairs[i:i + batch_size] for i in range(0, len(pairs), batch_size)]
            if len(chunks) > 1 and len(chunks[-1]) < MIN_BATCH_PAIRS:
                chunks[-2] += chunks.pop()
            for chunk in chunks:
                trajectories = {self.trajectory[a] for a, _ in chunk}
                pool = ([s for t in sorted(trajectories) for s in states_of[t]] if len(trajectories) > 1
                        else world_states[world])
                anchors, positives = [a for a, _ in chunk], [p for _, p in chunk]
                negatives = [self.negative(a, p, pool, rng) for a, p in chunk]
                out.append((anchors, positives, negatives))
        rng.shuffle(out)
        return out


def train(encoder: StateEncoder, trajectories: Sequence[Trajectory], config: TrainConfig = TrainConfig(),
          log: Optional[Callable[[str], None]] = None) -> TrainReport:
    """Train `encoder` (in place) on the trajectories with Eq. 2; the per-epoch losses. Seeded by config.seed."""
    config.validate()
    started = time.perf_counter()
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    data = TripletData(encoder, trajectories)
    if not data.pairs:
        raise ValueError("the trajectories hold no consecutive states to train on")
    net = encoder.net
    optimiser = torch.optim.Adam(net.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    report = TrainReport(trajectories=len(trajectories), states=len(data.rows), pairs=len(data.pairs))
    for epoch in range(config.epochs):
        net.train()
        sums, batches = np.zeros(3), 0
        for anchors, positives, negatives in data.epoch(config.batch_size, rng):
            z = net(data.batch(anchors + positives + negatives))
            za, zp, zn = z.split(len(anchors))
            loss = gig_loss(za, zp, zn, config.alpha, config.lam)
            optimiser.zero_grad()
            loss.total.backward()
            optimiser.step()
            sums += [loss.total.item(), loss.triplet.item(), loss.uniformity.item()]
            batches += 1
        report.steps += batches
        report.epochs = epoch + 1
        for name, value in zip(("loss", "triplet", "uniformity"), sums / max(batches, 1), strict=True):
            getattr(report, name).append(float(value))
        if log is not None and (epoch == 0 or (epoch + 1) % 10 == 0 or epoch + 1 == config.epochs):
            log(f"epoch {epoch + 1}/{config.epochs}: loss {report.loss[-1]:.4f} (triplet {report.triplet[-1]:.4f}, "
                f"uniformity {report.uniformity[-1]:.4f}), {time.perf_counter() - started:.0f} s")
    net.eval()
    report.seconds = time.perf_counter() - started
    return report


# ---------------------------------------------------------------------- separation (GiG Sec. 4.2)


@dataclass(frozen=True)
class Separation:
    """Distances within trajectories (consecutive states) and across them, against the retrieval threshold tau."""

    intra: np.ndarray            # consecutive states of a trajectory
    intra_changed: np.ndarray    # those whose graphs differ (what the encoder must still place within tau)
    inter: np.ndarray            # states of different trajectories (sampled pairs)
    inter_identical: float       # share of those inter pairs whose graphs are identical (nothing can part them)
    tau: float

    def summary(self) -> dict:
        """Counts, medians and shares within / beyond tau."""
        def share(values: np.ndarray, beyond: bool) -> float:
            if not len(values):
                return math.nan
            return float(np.mean(values > self.tau) if beyond else np.mean(values <= self.tau))

        def median(values: np.ndarray) -> float:
            return float(np.median(values)) if len(values) else math.nan

        return {"intra_pairs": len(self.intra), "intra_changed_pairs": len(self.intra_changed),
                "inter_pairs": len(self.inter), "intra_median": median(self.intra),
                "intra_changed_median": median(self.intra_changed), "inter_median": median(self.inter),
                "intra_within_tau": share(self.intra, False), "intra_changed_within_tau": share(self.intra_changed, False),
                "inter_beyond_tau": share(self.inter, True), "inter_identical": self.inter_identical}


def separation(trajectories: Sequence[Trajectory], embeddings: Sequence[np.ndarray], tau: float = 0.1,
               inter_pairs: int = 200_000, seed: int = 0) -> Separation:
    """Intra (consecutive) and inter (sampled, different trajectories) distances of embedded trajectories."""
    if len(trajectories) != len(embeddings):
        raise ValueError("one embedding matrix per trajectory")
    intra, changed = [], []
    for traj, z in zip(trajectories, embeddings, strict=True):
        d = np.linalg.norm(np.diff(z, axis=0), axis=1)
        intra.append(d)
        sigs = [signature(g) for g in traj.graphs]
        changed.append(d[[sigs[i] != sigs[i + 1] for i in range(len(sigs) - 1)]])
    owner = np.concatenate([np.full(len(z), i) for i, z in enumerate(embeddings)])
    flat = np.concatenate(embeddings)
    states = [g for t in trajectories for g in t.graphs]
    rng = np.random.default_rng(seed)
    i, j = rng.integers(0, len(flat), inter_pairs), rng.integers(0, len(flat), inter_pairs)
    keep = owner[i] != owner[j]
    i, j = i[keep], j[keep]
    inter = np.linalg.norm(flat[i] - flat[j], axis=1)
    sig_id: dict[tuple, int] = {}
    ids = np.array([sig_id.setdefault(signature(g), len(sig_id)) for g in states])
    identical = float(np.mean(ids[i] == ids[j])) if len(i) else math.nan
    return Separation(np.concatenate(intra), np.concatenate(changed), inter, identical, tau)


def embed_trajectories(encoder: StateEncoder, trajectories: Sequence[Trajectory]) -> list[np.ndarray]:
    """Each trajectory's states embedded (one encoder call per trajectory), as float32 matrices."""
    return [np.asarray(encoder.embed(list(t.graphs)), dtype=np.float32) for t in trajectories]
