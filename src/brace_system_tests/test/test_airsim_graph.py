"""The AirSim stack as `ros2 launch brace_bringup airsim.launch.py` starts it: every process at once, in no order.

The bridge first, the simulator (brace-airsim-peer, its own process) last: the bridge must wait for the
simulator, its peers and the Replan server before its first episode, or the episodes end with no plans. A tiny
planner model (the drones' schema constrains its plans), K = 2, two short episodes; the recorder's bag must hold
every episode's plans.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess

import yaml
from graph_run import EPISODES, VARIANT, check_bag, run_all_at_once

from brace_bringup.run_config import RunConfig, intersection_of
from brace_common.testing import installed_executable
from erecap_planner.testing import saved_tiny_llama
from sim_bridges.airsim.intersection import settings

TIMEOUT_S = 300.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_every_process_at_once_flies_the_intersection(tmp_path):
    port = free_port()
    path = tmp_path / "tiny_airsim.yaml"
    path.write_text(yaml.safe_dump({"run": {
        "extends": "airsim_k8.yaml",
        "overrides": {
            "airsim_bridge": {"episodes": EPISODES, "num_agents": 2, "max_steps": 12, "step_period_s": 0.01,
                              "shutdown_when_done": True, "wait_timeout_s": 240.0, "port": port},
            "erecap_planner": {"model_path": saved_tiny_llama(tmp_path / "tiny_llama"), "pruning_layers": [1, 3],
                               "predictor_path": "", "adapter_path": ""}}}}))
    cfg = RunConfig.load(path)
    folder = tmp_path / "run" / VARIANT
    params = cfg.write_parameters(VARIANT, folder)
    settings_file = tmp_path / "settings.json"
    written = yaml.safe_load(params.read_text())
    settings_file.write_text(json.dumps(settings(intersection_of(written["/**/airsim_bridge"]["ros__parameters"]))))
    env = {**os.environ, "ROS_DOMAIN_ID": str(1 + (os.getpid() + 77) % 200)}
    with (tmp_path / "peer.log").open("w") as log:
        # The simulator comes up last, while the bridge already waits (started by run_all_at_once below, first).
        peer = subprocess.Popen(["bash", "-c", f"sleep 5; exec {installed_executable('sim_bridges', 'brace-airsim-peer')}"
                                 f" --settings {settings_file} --port {port}"], env=env, stdout=log,
                                stderr=subprocess.STDOUT)
        try:
            order = sorted(cfg.stack.nodes, key=lambda s: (s.name != "airsim_bridge", s.name == "erecap_planner"))
            codes, tails = run_all_at_once(order, params, env, tmp_path, "airsim_bridge", TIMEOUT_S)
        finally:
            peer.send_signal(signal.SIGTERM)
            peer.wait(timeout=30)
    assert all(code == 0 for code in codes.values()), {n: (c, tails[n]) for n, c in codes.items()}
    assert "AirSim at" in tails["airsim_bridge"], \
        "the bridge started before the simulator and did not wait"
    assert peer.returncode == 0, (tmp_path / "peer.log").read_text()
    check_bag(folder / "bag")
