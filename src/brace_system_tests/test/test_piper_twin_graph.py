"""The PushT real-robot graph on the CAN twin: every node its own process, all at once, in no order.

The processes of the piper_twin stack start back to back with runs/piper_twin_pusht_launch.yaml's parameter file
(the twin and the arm node on python-can's udp_multicast bus), twin_world first and the planner last. The graph
orders itself: the arm node retries its CAN connection until the twin answers, the executor waits for state and
images, the twin world waits for every peer and the Replan server before its episode. The episode must run (plans
reach the executor, it moves the twin through the arm node) and the recorder's bag must hold the calls. PickFruit's
graph (runs/piper_twin_launch.yaml) is started the same way by brace_bringup's test_launch_stacks.py.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import yaml
from graph_run import run_all_at_once

from brace_audit.audit import records_from_bag
from brace_bringup.run_config import RunConfig
from brace_common.domain_leases import fresh_domain
from brace_common.testing import worst_order
from erecap_planner.testing import saved_tiny_llama

VARIANT = "brace_erecap"
WORLD_TIMEOUT_S = 300.0


def free_port(kind: int) -> int:
    """A free TCP (SOCK_STREAM) or UDP (SOCK_DGRAM) port on this host."""
    with socket.socket(socket.AF_INET, kind) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def twin_run_config(folder: Path, group: str, act_port: int, run: str = "piper_twin_launch.yaml") -> RunConfig:
    """`run` (a twin launch run) with a tiny planner, one short episode, and this test's CAN group and /act port."""
    model = saved_tiny_llama(folder / "tiny")
    path = folder / "twin_run.yaml"
    path.write_text(yaml.safe_dump({"run": {
        "extends": run,
        "overrides": {
            "twin_world": {"episodes": 1, "max_episode_s": 15.0, "can_port": group, "act_port": act_port,
                           "shutdown_when_done": True, "wait_timeout_s": 240.0},
            "piper_arm": {"can_port": group},
            "openvla_executor": {"server_url": f"http://127.0.0.1:{act_port}/act"},
            "erecap_planner": {"model_path": str(model), "adapter_path": "", "predictor_path": "",
                               "pruning_layers": [1, 3]}}}}))
    return RunConfig.load(path)


def test_every_process_of_the_pusht_twin_graph_at_once(tmp_path):
    run = "piper_twin_pusht_launch.yaml"
    group = f"ff01::74:{(os.getpid() + 7 + len(run)) % 0xFFFF:x}"    # interface-local multicast: never leaves the host
    cfg = twin_run_config(tmp_path, group, free_port(socket.SOCK_STREAM), run)
    folder = tmp_path / "run" / VARIANT
    params = cfg.write_parameters(VARIANT, folder)
    env = {**os.environ, "ROS_DOMAIN_ID": str(fresh_domain()),
           "CAN_CONFIG": json.dumps({"port": free_port(socket.SOCK_DGRAM)})}  # udp_multicast: one port per bus
    order = worst_order(cfg.stack.nodes, "twin_world")
    codes, tails = run_all_at_once(order, params, env, tmp_path, "twin_world", WORLD_TIMEOUT_S, node_names=True)
    assert all(code == 0 for code in codes.values()), {n: (c, tails[n]) for n, c in codes.items()}
    assert "waiting for" in tails["twin_world"], "the twin world started its episode before its peers were up"
    assert "episode 0:" in tails["twin_world"]
    assert "plan '" in tails["openvla_executor"], "no plan reached the executor"
    records, note = records_from_bag(folder / "bag")
    assert note == "", note
    assert len(records.episodes) == 1 and records.calls, (records.episodes, records.calls)
    assert records.plans, "the bag holds no plan"
