"""A run plan: what one variant of a run configuration starts, as data: its processes and the one parameter file.

Every orchestration step is written here once; two renderers read the plan.
The launch files (brace_bringup.launch_description) start each process and
each node as its own process; brace-run (brace_bringup.runner) starts the
processes as children and composes the nodes in one process. A run's
processes are a local planner server (`planner_server` in the run
configuration: the planner's `server_url` points at it) and the
protocol-level AirSim (`airsim_peer`: brace-airsim-peer with the settings.json
of the variant's intersection; the bridge's `host` / `port` point at it).
Every process starts at once with the nodes: the planner waits for its
server, the AirSim bridge for its simulator. A run ends when one of its
processes exits (`RunPlan.end_on_exit`): the world when its episodes are done,
any other process only on a fault.
"""

from __future__ import annotations

import copy
import json
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ament_index_python.packages import get_package_prefix

from brace_common.names import DEFAULT_NAMESPACE
from sim_bridges.airsim.intersection import settings

from .graph import VIEWER, NodeSpec, Stack
from .run_config import RunConfig, intersection_of

PLANNER_SERVER = "planner_server"
AIRSIM_PEER = "airsim_peer"
SAFETY_PACKAGE = "brace_safety"
"""The collision monitors' package: its nodes in a stack are what launch argument collision_monitor turns off."""
AIRSIM_MONITOR = "airsim_monitor"
"""The AirSim stack's collision monitor: the bridge's RPC calls pass its proxy (a port of its own)."""


@dataclass(frozen=True)
class Process:
    """A program a run starts beside its nodes: an installed executable with its arguments and environment."""

    name: str
    package: str
    executable: str
    arguments: tuple[str, ...] = ()
    environment: tuple[tuple[str, str], ...] = ()  # set on top of the caller's environment

    def command(self) -> list[str]:
        """The command line (the executable `ros2 run <package> <executable>` starts)."""
        return [str(Path(get_package_prefix(self.package)) / "lib" / self.package / self.executable), *self.arguments]


CONFIG_ERROR = 2
"""The exit code of a node whose configuration is invalid (brace_common.spin)."""


def exit_status(returncode: int) -> int:
    """A process's return code as a shell's exit status: killed by signal N (a negative code) is 128 + N."""
    return returncode if returncode >= 0 else 128 - returncode


@dataclass(frozen=True)
class RunEnd:
    """How a run ends: its exit code and why (the first exit of one of its processes)."""

    code: int
    reason: str
    process: str


class RunEnded(RuntimeError):
    """A run that ended on a process's failure (its `end`; the message adds what the caller knows, a log's tail)."""

    def __init__(self, end: RunEnd, detail: str = "") -> None:
        super().__init__(f"{end.reason}: the run ends" + (f"\n{detail}" if detail else ""))
        self.end = end


@dataclass(frozen=True)
class RunPlan:
    """One variant of a run: the stack's nodes, the processes beside them and the parameter file every node reads."""

    stack: Stack
    variant: str
    folder: Path               # the variant's run folder (parameter file, bag, settings.json)
    parameters: Path           # the one parameter file
    processes: tuple[Process, ...] = ()
    namespace: str = DEFAULT_NAMESPACE  # of every node and topic of the stack
    own_process: tuple[str, ...] = ()   # nodes brace-run starts as their own processes (launch starts every node so)

    @property
    def nodes(self) -> tuple[NodeSpec, ...]:
        """The stack's nodes, in launch order."""
        return self.stack.nodes

    @property
    def composed(self) -> tuple[NodeSpec, ...]:
        """The nodes brace-run composes in its own process (all but `own_process`)."""
        return tuple(spec for spec in self.stack.nodes if spec.name not in self.own_process)

    def end_on_exit(self, name: str, returncode: int) -> RunEnd:
        """The end of the run when its process (or node) `name` exits with `returncode`.

        Every process of a run is needed by the others, so the first exit ends it: the world's with the world's
        code (0: its episodes are done), another process's with its own code (2: its configuration is invalid) or,
        when it exited 0 while the run needed it, with 1. The exits that follow, of the processes the end stops, do
        not change it.
        """
        code = exit_status(returncode)
        if name == self.stack.world and code == 0:
            return RunEnd(0, f"{name} finished its episodes", name)
        if code == 0:
            return RunEnd(1, f"{name} exited (0) while the run needed it", name)
        why = ": invalid configuration (its log names the parameter)" if code == CONFIG_ERROR else ""
        return RunEnd(code, f"{name} exited with {code}{why}", name)

    def first_end(self, running: Mapping[str, subprocess.Popen]) -> Optional[RunEnd]:
        """The end of the run if one of the `running` processes (name -> process) has exited, else None."""
        for name, process in running.items():
            if process.poll() is not None:
                return self.end_on_exit(name, process.returncode)
        return None

    def node_processes(self) -> tuple[Process, ...]:
        """The `own_process` nodes as processes: each its installed executable under its name, in the namespace,
        with the one parameter file (as launch_ros's Node starts it)."""
        return tuple(Process(spec.name, spec.package, spec.executable,
                             node_arguments(spec.name, self.namespace, [self.parameters]))
                     for spec in self.stack.nodes if spec.name in self.own_process)


def node_arguments(name: str, namespace: str, parameter_files: Sequence[Path], rename: bool = True) -> tuple[str, ...]:
    """A node's ROS arguments as launch_ros's Node passes them: in `namespace`, renamed `name` with `rename`, its
    parameter files in order (a later file's value wins)."""
    remaps = ("-r", f"__ns:={namespace}") + (("-r", f"__node:={name}") if rename else ())
    return ("--ros-args", *remaps, *(arg for path in parameter_files for arg in ("--params-file", str(path))))


def plan(cfg: RunConfig, variant: str, folder: Path, extra: dict[str, dict] | None = None,
         ports: Mapping[str, int] | None = None, airsim_peer: bool = True, namespace: str = DEFAULT_NAMESPACE) -> RunPlan:
    """The plan of `variant` with its files written into `folder`: `extra` overrides node parameters last;
    `ports` (process name -> port) replace the run configuration's ports (brace-run picks free ones); without
    `airsim_peer` the bridge flies a real AirSim at its own host and port."""
    extra = copy.deepcopy(extra or {})
    ports = ports or {}
    processes = []
    if cfg.planner_server:
        served = cfg.server_spec()
        port = int(ports.get(PLANNER_SERVER, served["port"]))
        extra.setdefault("erecap_planner", {})["server_url"] = f"http://127.0.0.1:{port}/v1"
        flags = [f"--{key}={served[key]}" for key in ("engine", "model", "adapter", "dtype", "threads", "parallel",
                                                       "weights")]
        processes.append(Process(PLANNER_SERVER, "erecap_planner", "brace-planner-server", (*flags, f"--port={port}")))
    if cfg.airsim_peer and airsim_peer:
        peer = cfg.peer_spec()
        port = int(ports.get(AIRSIM_PEER, peer["port"]))
        scenario = intersection_of(cfg.parameters(variant, extra)["airsim_bridge"])
        folder.mkdir(parents=True, exist_ok=True)
        settings_file = folder / "settings.json"
        settings_file.write_text(json.dumps(settings(scenario, float(peer["clock_speed"])), indent=2))
        extra.setdefault("airsim_bridge", {}).update(host="127.0.0.1", port=port)
        processes.append(Process(AIRSIM_PEER, "sim_bridges", "brace-airsim-peer",
                                 ("--settings", str(settings_file), "--port", str(port))))
    if AIRSIM_MONITOR in cfg.stack.names and "airsim_bridge" in cfg.stack.names:
        route_through_monitor(cfg, variant, extra, ports)
    # the viewer is a process of its own, as launch starts it: composed, its mapping shared the interpreter lock
    # and the executor's threads with the planner (call P95 +0.4-0.5 s beside the demo, docs/results/viewer.md)
    own = (*cfg.own_process, *((VIEWER.name,) if cfg.viewer else ()))
    return RunPlan(cfg.stack_of(variant), variant, folder, cfg.write_parameters(variant, folder, extra),
                   tuple(processes), namespace, own)


def route_through_monitor(cfg: RunConfig, variant: str, extra: dict[str, dict], ports: Mapping[str, int]) -> None:
    """The AirSim bridge talks to the collision monitor's proxy, the proxy to the simulator the bridge was given
    (the peer's port, or a real AirSim's host and port)."""
    params = cfg.parameters(variant, extra)
    bridge, monitor = params["airsim_bridge"], params[AIRSIM_MONITOR]
    port = int(ports.get(AIRSIM_MONITOR, monitor["port"]))
    extra.setdefault(AIRSIM_MONITOR, {}).update(airsim_host=bridge["host"], airsim_port=int(bridge["port"]), port=port)
    extra.setdefault("airsim_bridge", {}).update(host=monitor["host"], port=port)


def absolute_namespace(namespace: str) -> str:
    """A namespace as given on a command line ('robot_1', '/robot_1/') as the nodes take it ('/robot_1')."""
    return "/" + namespace.strip("/")


LAUNCH_ARGUMENTS = {
    "run": ("demo.yaml", "run configuration: a file, or the name of one installed with brace_bringup (runs/*.yaml)"),
    "variant": ("brace_erecap", "the variant of the run configuration to start"),
    "namespace": (DEFAULT_NAMESPACE.strip("/"), "namespace of the stack's nodes and topics"),
    "output": ("", "run folder for the parameter file and the audit bag ('' = ./runs/launch_<time>)"),
    "collision_monitor": ("true", "true: the collision monitor acts on commanded motion (isaac, airsim, the piper stacks); "
                                  "false: it passes every command unchanged, to compare"),
    "viewer": ("false", "true: brace_viewer beside the stack, Rerun's web viewer on 127.0.0.1:9090 (its log prints "
                        "the URL; docs/viewer.md)"),
}
"""The arguments of every launch file: name -> (default, description)."""

AIRSIM_LAUNCH_ARGUMENTS = {
    "num_agents": ("", "K: drones of the intersection ('' = the run configuration's)"),
    "peer": ("true", "true: start brace-airsim-peer (the run's airsim_peer) beside the stack; false: a real AirSim "
                     "at host:port"),
    "host": ("127.0.0.1", "AirSim RPC host when peer is false"),
    "port": ("41451", "AirSim RPC port when peer is false"),
}
"""The AirSim launch file's own arguments: name -> (default, description)."""


def plan_for_launch(arguments: Mapping[str, str]) -> RunPlan:
    """The plan a launch file starts for its arguments (strings, as the launch tool gives them; LAUNCH_ARGUMENTS,
    and AIRSIM_LAUNCH_ARGUMENTS where a launch file declares them)."""
    cfg = RunConfig.load(arguments["run"])
    cfg.viewer = arguments.get("viewer", "false").lower() == "true"
    variant = arguments["variant"]
    output = Path(arguments["output"]) if arguments.get("output") else \
        Path.cwd() / "runs" / f"launch_{time.strftime('%Y%m%d_%H%M%S')}"
    extra: dict[str, dict] = {}
    if arguments.get("collision_monitor", "true").lower() == "false":
        for spec in cfg.stack.nodes:
            if spec.package == SAFETY_PACKAGE:
                extra[spec.name] = {"enable": False}
    peer = True
    if "airsim_bridge" in cfg.stack.names:
        bridge = extra.setdefault("airsim_bridge", {})
        if arguments.get("num_agents"):
            bridge["num_agents"] = int(arguments["num_agents"])
        peer = bool(cfg.airsim_peer) and arguments.get("peer", "true").lower() == "true"
        if not peer:  # a real AirSim (its settings.json names the scenario's vehicles)
            bridge.update(host=arguments.get("host", "127.0.0.1"), port=int(arguments.get("port", "41451")))
    return plan(cfg, variant, output / variant, extra, airsim_peer=peer,
                namespace=absolute_namespace(arguments.get("namespace", "")))
