"""A run plan's nodes as `ros2 launch` starts them, for the graph tests and the fuzz harness: every node its own
process, all at once; the run's end by the plan's rule (RunPlan.first_end, which the launch files render as
OnProcessExit handlers); the rest stopped with SIGINT twice, as a Ctrl-C under `ros2 launch` reaches them (the
terminal's, and launch's own). Also the small runs they start: the sim stack with a tiny planner model.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

import yaml

from brace_bringup.run_config import RunConfig
from brace_bringup.run_plan import RunEnd, RunPlan, node_arguments
from brace_common.names import DEFAULT_NAMESPACE
from brace_common.testing import installed_executable, stop_processes, wait_for
from erecap_planner.testing import saved_tiny_llama

EPISODES = 2
"""Episodes of the tiny run."""
VARIANT = "brace_erecap"
"""The variant the graph tests and the world check run (BRACE + E-RECAP)."""
RUN_TIMEOUT_S = 300.0
"""How long a small run may take on a slow, busy machine before its end counts as missing."""
STOP_TIMEOUT_S = 30.0
"""How long a node may take to stop after SIGINT."""
NOISE = ("never retrieved", "Failed to publish log message", "was never awaited", "Traceback", "it/s]")
"""What a node's output must not hold: an rclpy task's unretrieved exception, a log line sent to /rosout after its
context went down, a never started coroutine, any trace (when it is stopped), a progress bar (loading a model, in a
log that is not a terminal)."""


def tiny_run_config(folder: Path) -> Path:
    """A run configuration extending the demo's: the tiny model, K = 2, two episodes of 10 steps; its path."""
    model = saved_tiny_llama(folder / "tiny_llama")
    path = folder / "tiny_run.yaml"
    path.write_text(yaml.safe_dump({"run": {
        "extends": "demo.yaml",  # the installed run configuration
        "overrides": {
            "embedded_sim": {"episodes": EPISODES, "num_agents": 2, "max_steps": 10, "step_period_s": 0.01,
                             "hold_while_planning": True,  # lockstep: every episode gets its plans on any CPU
                             "shutdown_when_done": True, "wait_timeout_s": 240.0},
            "erecap_planner": {"model_path": model, "pruning_layers": [1, 3], "predictor_path": "",
                               "adapter_path": ""}}}}))
    RunConfig.load(path)  # fails here, not in a process, when the configuration is wrong
    return path


def small_run(folder: Path, overrides: dict | None = None, own_process: list[str] | None = None) -> Path:
    """The tiny run configuration with one episode, and `overrides` (node -> parameters) and `own_process`."""
    path = folder / "small_run.yaml"
    run: dict = {"extends": str(tiny_run_config(folder)),
                 "overrides": {"embedded_sim": {"episodes": 1}, **(overrides or {})}}
    if own_process is not None:
        run["own_process"] = own_process
    path.write_text(yaml.safe_dump({"run": run}))
    return path


def node_command(spec, parameter_files: Sequence[Path], namespace: str = DEFAULT_NAMESPACE,
                 rename: bool = True) -> list[str]:
    """`spec`'s installed executable (spec has package, executable, name) with its ROS arguments as launch_ros's
    Node gives them (RunPlan's)."""
    return [str(installed_executable(spec.package, spec.executable)),
            *node_arguments(spec.name, namespace, parameter_files, rename)]


def start_every_node(run_plan: RunPlan, env: dict, logs: Path) -> dict[str, subprocess.Popen]:
    """Every node of the plan its own process, back to back, as launch_ros's Node starts it."""
    procs = {}
    for spec in run_plan.nodes:
        with (logs / f"{spec.name}.log").open("w") as log:
            procs[spec.name] = subprocess.Popen(node_command(spec, [run_plan.parameters], run_plan.namespace),
                                                env=env, stdout=log, stderr=subprocess.STDOUT)
    return procs


def run_all_at_once(specs: Sequence, params: Path, env: dict, logs: Path, until: str, timeout_s: float,
                    node_names: bool = False) -> tuple[dict[str, int], dict[str, str]]:
    """Start every node of `specs` (each with name, package, executable) as its own process, back to back in that
    order, with the parameter file `params` in the stack's namespace (`__node:=` its name with `node_names`); wait
    for `until` to exit, SIGINT the rest (the recorder finishes its bag on SIGINT). Each process's exit code and the
    tail of its log.
    """
    procs: dict[str, subprocess.Popen] = {}
    files = {}
    try:
        for spec in specs:
            files[spec.name] = (logs / f"{spec.name}.log").open("w")
            procs[spec.name] = subprocess.Popen(node_command(spec, [params], rename=node_names), env=env,
                                                stdout=files[spec.name], stderr=subprocess.STDOUT)
        procs[until].wait(timeout=timeout_s)
    finally:
        stop_processes(procs, STOP_TIMEOUT_S)
        for log in files.values():
            log.close()
    return ({name: proc.returncode for name, proc in procs.items()},
            {name: (logs / f"{name}.log").read_text()[-3000:] for name in procs})


def run_end(run_plan: RunPlan, procs: dict[str, subprocess.Popen]) -> RunEnd:
    """Wait for the first exit among `procs`: the run's end by the plan's rule."""
    ended: list[RunEnd] = []

    def over() -> bool:
        end = run_plan.first_end(procs)
        ended[:] = [end] if end is not None else []
        return end is not None

    wait_for(over, RUN_TIMEOUT_S, "a process of the run to exit")
    return ended[0]


def ctrl_c(procs: dict[str, subprocess.Popen]) -> dict[str, int]:
    """SIGINT twice to every running process, as Ctrl-C under `ros2 launch` (the process group's, then launch's);
    their exit codes."""
    running = [p for p in procs.values() if p.poll() is None]
    for sig in (signal.SIGINT, signal.SIGINT):
        for proc in running:
            if proc.poll() is None:
                proc.send_signal(sig)
    codes = {}
    for name, proc in procs.items():
        try:
            codes[name] = proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            codes[name] = f"killed: still running {STOP_TIMEOUT_S:.0f} s after SIGINT"
    return codes


def noise(logs: Path, procs) -> dict[str, list[str]]:
    """Per process, what of NOISE its output holds."""
    found = {name: [n for n in NOISE if n in (logs / f"{name}.log").read_text()] for name in procs}
    return {name: words for name, words in found.items() if words}
