"""The graph tests' helpers: a small run of the sim stack (a tiny planner model, two agents, two short episodes),
its bag check, and starting a stack's executables all at once as `ros2 launch` does."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from brace_audit.audit import records_from_bag
from brace_common.names import DEFAULT_NAMESPACE
from brace_common.testing import installed_executable, stop_processes
from brace_common.vocabulary import CallStatus
from brace_system_tests.process_graph import EPISODES, tiny_run_config  # noqa: F401 - the tests import them here

VARIANT = "brace_erecap"


def check_bag(bag: Path) -> None:
    """Every episode ended, received plans, and the bag holds them."""
    records, note = records_from_bag(bag)
    assert note == "", note
    assert [e.episode for e in records.episodes] == list(range(EPISODES)), records.episodes
    assert all(e.plans > 0 for e in records.episodes), records.episodes
    assert {episode for episode, _agent, _signature in records.plans} == set(range(EPISODES))
    assert all(c.status == CallStatus.OK for c in records.calls[:2]), "the first calls were served, not refused"


STOP_TIMEOUT_S = 30.0


def run_all_at_once(specs: Sequence, params: Path, env: dict, logs: Path, until: str, timeout_s: float,
                    node_names: bool = False) -> tuple[dict[str, int], dict[str, str]]:
    """Start every node of `specs` as its own process, back to back in that order, with the run's parameter file in
    the stack's namespace (`__node:=` its name with `node_names`); wait for `until` to exit, SIGINT the rest (the
    recorder finishes its bag on SIGINT). Return each process's exit code and the tail of its log.
    """
    procs: dict[str, subprocess.Popen] = {}
    files = {}
    try:
        for spec in specs:
            files[spec.name] = (logs / f"{spec.name}.log").open("w")
            remaps = ["-r", f"__ns:={DEFAULT_NAMESPACE}"] + (["-r", f"__node:={spec.name}"] if node_names else [])
            procs[spec.name] = subprocess.Popen(
                [str(installed_executable(spec.package, spec.executable)), "--ros-args", "--params-file", str(params),
                 *remaps], env=env, stdout=files[spec.name], stderr=subprocess.STDOUT)
        procs[until].wait(timeout=timeout_s)
    finally:
        stop_processes(procs, STOP_TIMEOUT_S)
        for log in files.values():
            log.close()
    return ({name: proc.returncode for name, proc in procs.items()},
            {name: (logs / f"{name}.log").read_text()[-3000:] for name in procs})
