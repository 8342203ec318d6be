"""Does a world meet the contract? Your world node beside the control stack (brace_control.launch.py's nodes with a
tiny planner model), every node its own process, your world started first, as `ros2 launch` may start them.

What docs/integrate.md promises a world built on the world-node base: the control stack plans for it from its
world_info (K and the action schema) alone, its plans arrive and are executed, every episode ends and the bag holds
them. `check_world` asserts each of these with a message naming the one that failed; the example world's test
(test_example_world_graph.py) is the model for yours.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from brace_audit.audit import records_from_bag
from brace_audit.audit_report import RunRecords
from brace_bringup.run_config import RunConfig
from brace_common.config import load_ros_parameters
from brace_common.domain_leases import fresh_domain
from brace_common.vocabulary import CallStatus
from brace_system_tests.process_graph import VARIANT, run_all_at_once
from erecap_planner.testing import saved_tiny_llama


@dataclass(frozen=True)
class WorldUnderTest:
    """A world node to check: where its executable is, its parameter file, and what its plans may hold."""

    package: str
    executable: str
    name: str                      # the node's name: its section in `params_file`
    params_file: Path              # the world's own parameter file, as given beside brace_control.launch.py
    agents: frozenset[str]         # every agent that must receive plans
    actions: frozenset[str]        # the action schema's action names
    overrides: dict = field(default_factory=dict)  # parameters that keep its episodes short


def check_world(world: WorldUnderTest, folder: Path, episodes: int = 2, timeout_s: float = 300.0) -> RunRecords:
    """Run `world` for `episodes` beside the control stack under `folder`; the bag's records once every promise of
    the contract held (AssertionError naming the first that did not)."""
    run = folder / "world_check_run.yaml"
    run.write_text(yaml.safe_dump({"run": {"extends": "control.yaml", "overrides": {
        "erecap_planner": {"model_path": saved_tiny_llama(folder / "tiny_llama"), "pruning_layers": [1, 3],
                           "predictor_path": "", "adapter_path": "",
                           "action_schema_file": ""}}}}))  # the world's schema, from its world_info
    cfg = RunConfig.load(run)
    out = folder / "run" / VARIANT
    own = {**load_ros_parameters(world.params_file, world.name), **world.overrides,
           "episodes": episodes, "shutdown_when_done": True, "wait_timeout_s": 240.0}
    params = cfg.write_parameters(VARIANT, out)
    # The world is not one of the control stack's nodes: its section joins the run's one parameter file, as a
    # bridge's own file is given beside brace_control.launch.py's.
    sections = yaml.safe_load(params.read_text())
    params.write_text(yaml.safe_dump({**sections, f"/**/{world.name}": {"ros__parameters": own}}))
    env = {**os.environ, "ROS_DOMAIN_ID": str(fresh_domain())}
    codes, tails = run_all_at_once([world, *cfg.stack.nodes], params, env, folder, world.name, timeout_s)
    assert codes[world.name] == 0, f"the world did not end its episodes and exit 0 ({codes[world.name]}): " \
                                   f"{tails[world.name]}"
    assert all(code == 0 for code in codes.values()), {n: (c, tails[n]) for n, c in codes.items() if c != 0}
    assert "waiting for" in (folder / f"{world.name}.log").read_text(), \
        "the world started before its peers and did not wait for them (WorldInputs' readiness)"

    records, note = records_from_bag(out / "bag")
    check_records(world, records, note, episodes)
    return records


def check_records(world: WorldUnderTest, records: RunRecords, note: str, episodes: int) -> None:
    """The contract's promises about the bag of `world`'s run (`note`: what records_from_bag said of the bag)."""
    assert note == "", f"the bag is damaged: {note}"
    assert [e.episode for e in records.episodes] == list(range(episodes)), \
        f"not every episode ended with EVENT_END: {records.episodes}"
    assert all(e.plans > 0 for e in records.episodes), f"an episode received no plan: {records.episodes}"
    planned = {agent for _episode, agent, _signature in records.plans}
    assert planned == set(world.agents), f"plans went to {sorted(planned)}, not to every agent {sorted(world.agents)}"
    assert any(c.status == CallStatus.OK for c in records.calls), \
        f"no planner call was served: {[c.status for c in records.calls]}"
    foreign = [s for _e, _a, s in records.plans if any(action not in world.actions for action, _p in s)]
    assert not foreign, f"plans outside the world's action schema {sorted(world.actions)}: {foreign[:3]}"
