"""The overlay-parameter attack: a node started with its shipped parameter files and one more that breaks it.

`ros2 launch` users stack parameter files (a site file after the package's) and add `-p` on the command line; the
value in force is the merge. For every node of the sim and twin stacks this starts the node's executable with its
stack's files plus an overlay file that sets one parameter to a value the node must refuse (out of its declared
range, a path-like agent id, an id ending in a newline, a value of another type than the one its files give: a
quoted number, a quoted list, `abc` for a double, an integer beyond int64, which rcl's merge would drop in favour of
the files' value; a lifecycle node also gets `autostart: true`, so it configures at once) and checks that the process
stops with exit code 2 naming that parameter. `bench/fuzz_graph.py` runs every case; `test_fuzz_graph.py` a few."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from brace_bringup.graph import PIPER_TWIN, SIM, NodeSpec
from brace_bringup.param_docs import NODE_CONFIGS
from brace_bringup.run_config import params_dir
from brace_common.config import field_default, load_ros_parameters
from brace_common.testing import kill_with_stacks

from .process_graph import node_command

AGENT_ID_CASES: dict[str, tuple[str, Any]] = {
    "trigger_monitor": ("agents", ["agent 0", "agent_1"]),
    "piper_arm": ("agent_id", "arm_0/../x"),
    "openvla_executor": ("agent_id", "../arm_0"),
    "twin_world": ("agent_id", "arm.0"),
}
"""Per node, an agent-list or agent-id value it must refuse (agent ids are ROS name tokens)."""
NEWLINE_ID_CASES: dict[str, tuple[str, Any]] = {
    "trigger_monitor": ("agents", ["arm_0\n"]),
    "piper_arm": ("agent_id", "arm_0\n"),
    "openvla_executor": ("agent_id", "arm_0\n"),
    "twin_world": ("agent_id", "arm_0\n"),
}
"""Per node, an id that ends in a newline (ids are matched whole)."""
TYPE_CASES: dict[str, tuple[tuple[str, Any], ...]] = {
    "piper_arm": (("max_joint_step_rad", "0.05"), ("workspace_max_m", "[0.3, 0.3, 0.3]")),  # tighter, but unreadable
    "trigger_monitor": (("loop_cell_m", "abc"), ("periodic_interval_steps", "2^70")),
}
"""Per node, values of another type than the parameter's, beyond the generated ones (`type_changes`)."""
BEYOND_INT64 = 2**70
"""An integer rcl cannot hold: it reads it as a double."""
START_LIMIT_S = 60.0
"""How long a node may take to refuse its parameters (model loading never comes first)."""
CRASH_RETRIES = 1
"""Starts again of a case whose process named the parameter, then died by a signal while it exited (a rare crash in
the process's teardown, after the refusal: it is counted in the outcome, and a crash every time still fails the
case)."""
HANG_RETRIES = 1
"""Starts again of a case whose process was still running at START_LIMIT_S without a word. Once in ~2,000 tests on
a busy 2-core machine a node never got as far as reading its parameters in 60 s (no log line: its DDS participant
or its imports; the stacks it writes on SIGABRT say which). It is counted in the outcome with those stacks; a node
that never refuses still fails the case."""
OUTPUT_TAIL = 2000
"""Characters of a process's output an outcome keeps (where it crashed: Python's fault handler is on)."""


@dataclass(frozen=True)
class OverlayCase:
    """One node started with its files and an overlay setting `parameter` to `value`."""

    node: NodeSpec
    parameter: str
    value: Any

    @property
    def label(self) -> str:
        """'node: parameter=value'."""
        return f"{self.node.name}: {self.parameter}={self.value!r}"


@dataclass
class OverlayOutcome:
    """What the process did: its exit code (None: still running at START_LIMIT_S) and whether it named the
    parameter."""

    case: OverlayCase
    returncode: int | None
    named: bool
    crashes: list[int] = dataclasses.field(default_factory=list)
    """Exit codes (-signal) of earlier starts that named the parameter and then died by a signal."""
    hangs: list[str] = dataclasses.field(default_factory=list)
    """The output (their stacks) of earlier starts still running at START_LIMIT_S."""
    output: str = ""
    """The end of the last start's output."""

    @property
    def refused(self) -> bool:
        """Stopped with exit code 2 naming the parameter."""
        return self.returncode == 2 and self.named

    @property
    def note(self) -> str:
        """'refused', 'still running' or 'NOT refused', and the crashes at exit and hangs at start before it."""
        outcome = "refused" if self.refused else ("still running" if self.returncode is None else "NOT refused")
        before = [f"crashed at exit {self.crashes}"] if self.crashes else []
        before += [f"hung at start {len(self.hangs)}x"] if self.hangs else []
        return outcome + (f" ({', '.join(before)} before)" if before else "")


def out_of_range(f: dataclasses.Field) -> Any:
    """A value past a numeric field's declared range (None for a field without one)."""
    default, low, high = field_default(f), f.metadata.get("low"), f.metadata.get("high")
    if isinstance(default, bool) or not isinstance(default, (int, float)):
        return None
    if high is not None:
        return int(high) + 1 if isinstance(default, int) else float(high) * 2.0 + 1.0
    if low is not None:
        return int(low) - 1 if isinstance(default, int) else float(low) - 1.0
    return None


def type_changes(spec: NodeSpec) -> list[tuple[str, Any]]:
    """(parameter, value of another type) for `spec`: a quoted number for a double, a quoted list, `abc` for a
    double, an integer beyond int64 for an integer; parameters the node's files set first (rcl keeps their value)."""
    files: dict[str, Any] = {}
    for name in spec.parameter_files:
        files.update(load_ros_parameters(params_dir() / name, spec.name))
    fields = sorted((f for cls in NODE_CONFIGS[spec.name] for f in dataclasses.fields(cls)),
                    key=lambda f: f.name not in files)
    value = {f.name: files.get(f.name, field_default(f)) for f in fields}
    doubles = [f.name for f in fields if type(field_default(f)) is float]
    lists = [f.name for f in fields if isinstance(field_default(f), list) and value[f.name]]
    ints = [f.name for f in fields if type(field_default(f)) is int]
    changes = [(doubles[0], str(value[doubles[0]]))] if doubles else []
    changes += [(lists[0], str(value[lists[0]]))] if lists else []
    changes += [(doubles[1], "abc")] if len(doubles) > 1 else []
    changes += [(ints[0], BEYOND_INT64)] if ints else []
    return changes


def overlay_cases(nodes: Iterable[NodeSpec], per_node: int = 2, types_per_node: int = 4) -> list[OverlayCase]:
    """Per node: its agent and newline-id cases and its TYPE_CASES (if any), up to `per_node` out-of-range numeric
    parameters and up to `types_per_node` generated type changes."""
    cases, seen = [], set()
    for spec in nodes:
        if spec.name in seen or spec.name not in NODE_CONFIGS:
            continue
        seen.add(spec.name)
        for table in (AGENT_ID_CASES, NEWLINE_ID_CASES):
            if spec.name in table:
                cases.append(OverlayCase(spec, *table[spec.name]))
        numeric = [(f.name, out_of_range(f)) for cls in NODE_CONFIGS[spec.name] for f in dataclasses.fields(cls)]
        cases += [OverlayCase(spec, name, value) for name, value in numeric if value is not None][:per_node]
        named = TYPE_CASES.get(spec.name, ())
        cases += [OverlayCase(spec, name, value) for name, value in named]
        generated = [c for c in type_changes(spec) if c[0] not in {name for name, _ in named}]
        cases += [OverlayCase(spec, name, value) for name, value in generated[:types_per_node]]
    return cases


def default_cases(per_node: int = 2) -> list[OverlayCase]:
    """The cases for every node of the sim and twin stacks (with `per_node` 1, one generated type change a node)."""
    return overlay_cases((*SIM.nodes, *PIPER_TWIN.nodes), per_node, types_per_node=1 if per_node <= 1 else 4)


def _start(index: int, case: OverlayCase, folder: Path, env: dict[str, str]) -> OverlayOutcome:
    crashes, hangs = [], []
    while True:
        outcome = _start_once(index, case, folder, env)
        crashed = outcome.returncode is not None and outcome.returncode < 0 and outcome.named
        hung = outcome.returncode is None and len(hangs) < HANG_RETRIES
        if crashed and len(crashes) < CRASH_RETRIES:
            crashes.append(outcome.returncode)
        elif hung:
            hangs.append(outcome.output)
        else:
            outcome.crashes, outcome.hangs = crashes, hangs
            return outcome


def _start_once(index: int, case: OverlayCase, folder: Path, env: dict[str, str]) -> OverlayOutcome:
    overlay = folder / f"overlay_{index:03d}_{case.node.name}_{case.parameter}.yaml"  # two cases may share a parameter
    values = {case.parameter: case.value, **({"autostart": True} if case.node.lifecycle else {})}  # configure now
    overlay.write_text(yaml.safe_dump({f"/**/{case.node.name}": {"ros__parameters": values}}))
    command = node_command(case.node, [*(params_dir() / name for name in case.node.parameter_files), overlay])
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = proc.communicate(timeout=START_LIMIT_S)
    except subprocess.TimeoutExpired:   # SIGABRT: it may hang before spin_node registers the stacks signal
        output = kill_with_stacks(proc, signal.SIGABRT)
        return OverlayOutcome(case, None, False, output=output[-OUTPUT_TAIL:])
    return OverlayOutcome(case, proc.returncode, f"'{case.parameter}'" in output, output=output[-OUTPUT_TAIL:])


def run_overlays(cases: list[OverlayCase], folder: Path, domain: int,
                 parallel: int = 4) -> list[OverlayOutcome]:
    """Start every case's node (`parallel` at a time) on DDS domain `domain`; their outcomes in case order."""
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "ROS_DOMAIN_ID": str(domain), "PYTHONFAULTHANDLER": "1"}
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        return list(pool.map(lambda i: _start(i, cases[i], folder, env), range(len(cases))))
