"""The fuzz harness's attack on how a run ends: the sim stack's nodes started as `ros2 launch` starts them (every
node its own process, at once), once as shipped and once with one node's parameter broken.

The run plan's rule (RunPlan.first_end, which the launch files render as OnProcessExit handlers) must end the first
run with the world's 0 once its episode is done and the second with the broken node's 2; the processes left are
then stopped as a Ctrl-C under `ros2 launch` stops them (SIGINT twice), and every one must exit 0 with nothing of
process_graph.NOISE in its output (no unretrieved exception, no log line after its context went down, no trace).
Before, the world's exit ended only the world and a node exiting 2 left the others up until someone pressed Ctrl-C.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from brace_bringup.run_config import RunConfig
from brace_bringup.run_plan import plan

from .fuzz_scenarios import ScenarioResult
from .process_graph import ctrl_c, noise, run_end, small_run, start_every_node

VARIANT = "brace_erecap"
BROKEN = {"brace_controller": {"cooldown_steps": -3}}
"""The second run's broken parameter (out of its range: the controller exits 2)."""


def launch_world_exit(folder: Path, domain: int, quick: bool = False) -> ScenarioResult:
    """Two small runs of the sim stack, every node its own process: as shipped, then with BROKEN."""
    result = ScenarioResult("a launch whose world exits, and one whose node cannot start (sim stack, every node its "
                            "own process)", "every node")
    rows = []
    for name, overrides, expected in (("world exits", None, (0, "embedded_sim")),
                                      ("bad parameter", BROKEN, (2, "brace_controller"))):
        run_folder = folder / name.replace(" ", "_")
        run_folder.mkdir(parents=True, exist_ok=True)
        run_plan = plan(RunConfig.load(small_run(run_folder, overrides)), VARIANT, run_folder / "run")
        started = time.monotonic()
        procs = start_every_node(run_plan, {**os.environ, "ROS_DOMAIN_ID": str(domain)}, run_folder)
        try:
            end = run_end(run_plan, procs)
            ended_s = time.monotonic() - started
        finally:
            stop_started = time.monotonic()
            codes = ctrl_c(procs)
            stopped_s = time.monotonic() - stop_started
        quiet = not noise(run_folder, procs)
        result.sent += 1
        others = {n: c for n, c in codes.items() if n != end.process}
        held = (end.code, end.process) == expected and all(c == 0 for c in others.values()) and quiet
        result.counted += held
        rows.append(f"{name}: ended {end.code} by {end.process} after {ended_s:.0f} s ({end.reason}), the other "
                    f"{len(others)} stopped in {stopped_s:.1f} s with {sorted(set(map(str, others.values())))}"
                    f"{'' if quiet else f', NOISE {noise(run_folder, procs)}'}")
    result.expected = result.sent
    result.ok = result.counted == result.expected
    result.outcome = "; ".join(rows)
    return result


ATTACKS = {"launch_world_exit": ("every node", launch_world_exit)}
"""This module's attack (fuzz_scenarios.run_scenarios runs it after its own)."""
