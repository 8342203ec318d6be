"""A small run of the sim stack for the graph tests: a tiny planner model, two agents, two short episodes."""

from __future__ import annotations

from pathlib import Path

import yaml

from brace_bringup.run_config import RunConfig
from brace_common.vocabulary import CallStatus
from brace_controller.audit import records_from_bag
from erecap_planner.testing import saved_tiny_llama

WORKSPACE = Path(__file__).resolve().parents[3]  # src/<pkg>/test/<file>
VARIANT = "brace_erecap"
EPISODES = 2


def tiny_run_config(folder: Path) -> Path:
    """A run configuration extending the demo's: the tiny model, K = 2, two episodes of 10 steps; its path."""
    model = saved_tiny_llama(folder / "tiny_llama")
    path = folder / "tiny_run.yaml"
    path.write_text(yaml.safe_dump({"run": {
        "extends": str(WORKSPACE / "config" / "runs" / "demo.yaml"),
        "overrides": {
            "embedded_sim": {"episodes": EPISODES, "agents": 2, "max_steps": 10, "step_period_s": 0.01,
                             "shutdown_when_done": True, "wait_timeout_s": 240.0},
            "erecap_planner": {"model_path": model, "pruning_layers": [1, 3], "predictor_path": "",
                               "adapter_path": ""}}}}))
    RunConfig.load(path)  # fails here, not in a process, when the configuration is wrong
    return path


def check_bag(bag: Path) -> None:
    """Every episode ended, received plans, and the bag holds them."""
    records, note = records_from_bag(bag)
    assert note == "", note
    assert [e.episode for e in records.episodes] == list(range(EPISODES)), records.episodes
    assert all(e.plans > 0 for e in records.episodes), records.episodes
    assert {episode for episode, _agent, _signature in records.plans} == set(range(EPISODES))
    assert all(c.status == CallStatus.OK for c in records.calls[:2]), "the first calls were served, not refused"
