"""The example world (brace_example_world's corridor) through the control stack, as `ros2 launch` would start a
bridge beside brace_control.launch.py: every process at once, the world first, the planner last.

What docs/integrate.md promises a new world: with the base's hooks filled in, the control stack plans for it
from its world_info (K and the schema) alone, its plans arrive and are executed, and the bag holds its episodes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import yaml
from graph_run import run_all_at_once

from brace_audit.audit import records_from_bag
from brace_bringup.run_config import RunConfig, params_dir
from brace_common import names
from brace_common.config import load_ros_parameters
from brace_common.domain_leases import fresh_domain
from brace_common.vocabulary import CallStatus
from erecap_planner.testing import saved_tiny_llama

EPISODES = 2
TIMEOUT_S = 300.0


@dataclass(frozen=True)
class World:
    """The corridor world as a NodeSpec-like entry for run_all_at_once."""

    name: str = "corridor_world"
    package: str = "brace_example_world"
    executable: str = "corridor_world"


def test_the_control_stack_plans_for_the_example_world_from_its_world_info_alone(tmp_path):
    run = tmp_path / "corridor_run.yaml"
    run.write_text(yaml.safe_dump({"run": {"extends": "control.yaml", "overrides": {
        "erecap_planner": {"model_path": saved_tiny_llama(tmp_path / "tiny_llama"), "pruning_layers": [1, 3],
                           "predictor_path": "", "adapter_path": "",
                           "action_schema_file": ""}}}}))  # the world's, from world_info
    cfg = RunConfig.load(run)
    folder = tmp_path / "run" / "brace_erecap"
    # the template's own file (what a bridge beside brace_control.launch.py is given), shorter episodes
    world = {**load_ros_parameters(params_dir() / "corridor_world.yaml", "corridor_world"),
             "num_cells": 6, "episodes": EPISODES, "max_steps": 8, "step_period_s": 0.01, "wait_timeout_s": 240.0}
    assert world["replan_action"] == names.REPLAN and world["shutdown_when_done"]
    params = cfg.write_parameters("brace_erecap", folder)
    # The world is not one of the control stack's nodes: its section joins the run's one parameter file, as a
    # bridge's own file would be given beside brace_control.launch.py's.
    sections = yaml.safe_load(params.read_text())
    params.write_text(yaml.safe_dump({**sections, "/**/corridor_world": {"ros__parameters": world}}))
    env = {**os.environ, "ROS_DOMAIN_ID": str(fresh_domain())}
    order = [World(), *cfg.stack.nodes]  # the world first, the planner among the last
    codes, tails = run_all_at_once(order, params, env, tmp_path, "corridor_world", TIMEOUT_S)
    assert all(code == 0 for code in codes.values()), {n: (c, tails[n]) for n, c in codes.items()}
    assert "waiting for" in tails["corridor_world"], "the world started before its peers and did not wait"

    records, note = records_from_bag(folder / "bag")
    assert note == "", note
    assert records.world == "corridor" and [e.episode for e in records.episodes] == list(range(EPISODES))
    assert all(e.plans > 0 for e in records.episodes), records.episodes
    assert {agent for _episode, agent, _signature in records.plans} == {"agent_0", "agent_1"}
    served = [c for c in records.calls if c.status == CallStatus.OK]
    assert served, [c.status for c in records.calls]
    for _episode, _agent, signature in records.plans:  # every plan is the corridor's: move_to a cell, or wait
        assert all(action in ("move_to", "wait") for action, _parameters in signature), signature
