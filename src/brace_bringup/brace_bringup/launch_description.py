"""What the launch files start: a run configuration's stack, every node with the run's one parameter file.

`ros2 launch launch/brace_sim.launch.py [run:=...] [variant:=...] [namespace:=...] [output:=...]`

The parameter file is the one brace-run writes for the same run and variant
(`RunConfig.write_parameters`), so the launch tool and brace-run start the
same system. Nothing is set inline here. Every node starts at once, in no
order: readiness is the graph's (the simulator waits for its peers, the
controller for a Replan server, the planner configures and activates itself).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from brace_common.names import DEFAULT_NAMESPACE
from sim_bridges.airsim.intersection import settings

from .run_config import RunConfig, intersection_of

ARGUMENTS = {
    "run": "run configuration (config/runs/*.yaml): the stack, its overrides and variants",
    "variant": "the variant of the run configuration to start",
    "namespace": "namespace of the stack's nodes and topics",
    "output": "run folder for the parameter file and the audit bag ('' = runs/launch_<time>)",
}


def declare_arguments(workspace: Path, run: str, variant: str) -> list:
    """DeclareLaunchArgument actions with the defaults of a launch file."""
    # optional: the launch tool is not in the PyPI wheels; brace-run imports this module without it
    from launch.actions import DeclareLaunchArgument

    defaults = {"run": str(workspace / "config" / "runs" / run), "variant": variant,
                "namespace": DEFAULT_NAMESPACE.strip("/"), "output": ""}
    return [DeclareLaunchArgument(name, default_value=defaults[name], description=text)
            for name, text in ARGUMENTS.items()]


AIRSIM_ARGUMENTS = {
    "agents": "K: drones of the intersection ('' = the run configuration's)",
    "peer": "true: start brace-airsim-peer (the run's airsim_peer) beside the stack; false: a real AirSim at host:port",
    "host": "AirSim RPC host when peer is false",
    "port": "AirSim RPC port when peer is false",
}
"""The extra arguments of launch/airsim.launch.py (stack_nodes reads them where they are declared)."""


def declare_airsim_arguments() -> list:
    """DeclareLaunchArgument actions of the AirSim launch file's own arguments."""
    # optional: the launch tool is not in the PyPI wheels; brace-run imports this module without it
    from launch.actions import DeclareLaunchArgument

    defaults = {"agents": "", "peer": "true", "host": "127.0.0.1", "port": "41451"}
    return [DeclareLaunchArgument(name, default_value=defaults[name], description=text)
            for name, text in AIRSIM_ARGUMENTS.items()]


def stack_nodes(context, workspace: Path) -> list:
    """Node actions of the run's stack (an OpaqueFunction body: reads the launch arguments)."""
    # optional: the launch tool is not in the PyPI wheels; brace-run imports this module without it
    from launch.actions import ExecuteProcess
    from launch.substitutions import LaunchConfiguration
    from launch_ros.actions import Node

    def arg(name: str, default: str = "") -> str:
        if name not in context.launch_configurations and name not in ARGUMENTS:
            return default
        return LaunchConfiguration(name).perform(context)

    cfg = RunConfig.load(Path(arg("run")))
    variant = arg("variant")
    folder = Path(arg("output")) if arg("output") else workspace / "runs" / f"launch_{time.strftime('%Y%m%d_%H%M%S')}"
    extra, processes = {}, []
    if cfg.planner_server:  # the planner waits for its server: they start together too
        served = cfg.server_spec()
        extra["erecap_planner"] = {"server_url": f"http://127.0.0.1:{served['port']}/v1"}
        flags = [f"--{key}={served[key]}" for key in ("engine", "model", "adapter", "dtype", "port")]
        processes.append(ExecuteProcess(cmd=["ros2", "run", "erecap_planner", "brace-planner-server", *flags],
                                        name="planner_server", output="screen"))
    if "airsim_bridge" in cfg.stack.names:
        processes += _airsim(cfg, variant, folder / variant, extra, arg)
    params = cfg.write_parameters(variant, folder / variant, extra)
    return processes + [Node(package=spec.package, executable=spec.executable, name=spec.name,
                             namespace=arg("namespace"), parameters=[str(params)], output="screen")
                        for spec in cfg.stack.nodes]


def _airsim(cfg: RunConfig, variant: str, folder: Path, extra: dict, arg) -> list:
    """The AirSim bridge's K and simulator (the peer with the intersection's settings.json, or a real host)."""
    # optional: the launch tool is not in the PyPI wheels; brace-run imports this module without it
    from launch.actions import ExecuteProcess

    bridge = extra.setdefault("airsim_bridge", {})
    if arg("agents"):
        bridge["agents"] = int(arg("agents"))
    if arg("peer", "true").lower() != "true" or not cfg.airsim_peer:
        bridge.update(host=arg("host", "127.0.0.1"), port=int(arg("port", "41451")))
        return []  # a real AirSim (its settings.json names the scenario's vehicles)
    spec = cfg.peer_spec()
    scenario = intersection_of(cfg.parameters(variant, extra)["airsim_bridge"])
    folder.mkdir(parents=True, exist_ok=True)
    settings_file = folder / "settings.json"
    settings_file.write_text(json.dumps(settings(scenario, float(spec["clock_speed"])), indent=2))
    bridge.update(host="127.0.0.1", port=int(spec["port"]))
    return [ExecuteProcess(cmd=["ros2", "run", "sim_bridges", "brace-airsim-peer", "--settings", str(settings_file),
                                "--port", str(spec["port"])], name="airsim_peer", output="screen")]
