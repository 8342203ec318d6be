"""The sim stack as `ros2 launch` starts it: every executable its own process, all at once, in no order.

The processes start back to back with the run's one parameter file in the
stack's namespace, the simulator first and the planner (seconds of imports
and model loading) last. Readiness is the graph's: the simulator must not
step before its peers are up, or the episodes end with no plans. The bag the
recorder process writes must hold every episode's plans.
"""

from __future__ import annotations

import os
import signal
import subprocess

from graph_run import VARIANT, check_bag, tiny_run_config

from brace_bringup.run_config import RunConfig
from brace_common.names import DEFAULT_NAMESPACE
from brace_common.testing import installed_executable

SIM_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 30.0


def test_every_process_at_once_closes_the_loop(tmp_path):
    cfg = RunConfig.load(tiny_run_config(tmp_path))
    folder = tmp_path / "run" / VARIANT
    params = cfg.write_parameters(VARIANT, folder)
    env = {**os.environ, "ROS_DOMAIN_ID": str(1 + (os.getpid() % 200))}
    # The worst order: the simulator first, the planner last, nobody waiting for anybody.
    order = sorted(cfg.stack.nodes, key=lambda s: (s.name != "embedded_sim", s.name == "erecap_planner"))
    procs: dict[str, subprocess.Popen] = {}
    logs = {}
    try:
        for spec in order:
            logs[spec.name] = (tmp_path / f"{spec.name}.log").open("w")
            procs[spec.name] = subprocess.Popen(
                [str(installed_executable(spec.package, spec.executable)), "--ros-args", "--params-file", str(params),
                 "-r", f"__ns:={DEFAULT_NAMESPACE}"],
                env=env, stdout=logs[spec.name], stderr=subprocess.STDOUT)
        assert procs["embedded_sim"].wait(timeout=SIM_TIMEOUT_S) == 0
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # the recorder finishes its bag on SIGINT
        for proc in procs.values():
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in logs.values():
            log.close()
    tails = {name: (tmp_path / f"{name}.log").read_text()[-2000:] for name in procs}
    assert all(proc.returncode == 0 for proc in procs.values()), {n: (p.returncode, tails[n]) for n, p in procs.items()}
    assert "waiting for" in tails["embedded_sim"], "the simulator started before its peers and did not wait"
    check_bag(folder / "bag")
