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
import threading
from pathlib import Path

import yaml
from graph_run import EPISODES, VARIANT, check_bag, run_all_at_once

from brace_bringup.run_config import RunConfig, intersection_of
from brace_common.domain_leases import fresh_domain
from brace_common.testing import installed_executable, worst_order
from erecap_planner.testing import saved_tiny_llama
from sim_bridges.airsim.intersection import settings

TIMEOUT_S = 300.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class StartWhenLogged:
    """Starts `cmd` from a thread as soon as `log` holds `text`."""

    def __init__(self, log: Path, text: str, cmd: list[str], env: dict, out) -> None:
        self.started: list[subprocess.Popen] = []
        self._over = threading.Event()
        self._thread = threading.Thread(target=self._start_when_logged, args=(log, text, cmd, env, out), daemon=True)
        self._thread.start()

    def _start_when_logged(self, log: Path, text: str, cmd: list[str], env: dict, out) -> None:
        while not self._over.is_set():
            if log.is_file() and text in log.read_text():
                self.started.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT))
                return
            self._over.wait(0.05)  # the next look at the log

    def stop(self) -> list[subprocess.Popen]:
        """Stop waiting; the process, when it was started."""
        self._over.set()
        self._thread.join()
        return self.started


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
    env = {**os.environ, "ROS_DOMAIN_ID": str(fresh_domain())}
    peer_cmd = [str(installed_executable("sim_bridges", "brace-airsim-peer")), "--settings", str(settings_file),
                "--port", str(port)]
    with (tmp_path / "peer.log").open("w") as log:
        # The simulator comes up last: once the bridge (started first by run_all_at_once) found none and waits.
        simulator = StartWhenLogged(tmp_path / "airsim_bridge.log", "AirSim at", peer_cmd, env, log)
        try:
            order = worst_order(cfg.stack.nodes, "airsim_bridge")
            codes, tails = run_all_at_once(order, params, env, tmp_path, "airsim_bridge", TIMEOUT_S)
        finally:
            peers = simulator.stop()
            for peer in peers:
                peer.send_signal(signal.SIGTERM)
                peer.wait(timeout=30)
    assert peers, f"the bridge never said it waits for the simulator: {tails['airsim_bridge']}"
    assert all(code == 0 for code in codes.values()), {n: (c, tails[n]) for n, c in codes.items()}
    (peer,) = peers
    assert peer.returncode == 0, (tmp_path / "peer.log").read_text()
    check_bag(folder / "bag")
