"""The example world (brace_example_world's corridor) through the control stack, as `ros2 launch` would start a
bridge beside brace_control.launch.py: every process at once, the world first, the planner last.

The model for your world's test (docs/integrate.md): name your package, executable, parameter file, agents and
actions in a WorldUnderTest; `check_world` asserts what the contract promises; then check what is yours.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from brace_bringup.run_config import params_dir
from brace_system_tests.world_contract import WorldUnderTest, check_records, check_world

CORRIDOR = WorldUnderTest(
    package="brace_example_world", executable="corridor_world", name="corridor_world",
    params_file=params_dir() / "corridor_world.yaml",
    agents=frozenset({"agent_0", "agent_1"}), actions=frozenset({"move_to", "wait"}),
    overrides={"num_cells": 6, "max_steps": 8, "step_period_s": 0.01})


def test_the_control_stack_plans_for_the_example_world_from_its_world_info_alone(tmp_path):
    records = check_world(CORRIDOR, tmp_path, episodes=2)
    assert records.world == "corridor"
    # the check fails where the contract is broken: an agent that never got a plan, a plan outside the schema
    with pytest.raises(AssertionError, match="not to every agent"):
        check_records(replace(CORRIDOR, agents=CORRIDOR.agents | {"agent_9"}), records, "", 2)
    with pytest.raises(AssertionError, match="outside the world's action schema"):
        check_records(replace(CORRIDOR, actions=frozenset()), records, "", 2)
    with pytest.raises(AssertionError, match="not every episode ended"):
        check_records(CORRIDOR, records, "", 3)
