"""What the launch files start: a run configuration's stack, every node with the run's one parameter file.

`ros2 launch launch/brace_sim.launch.py [run:=...] [variant:=...] [namespace:=...] [output:=...]`

The parameter file is the one brace-run writes for the same run and variant
(`RunConfig.write_parameters`), so the launch tool and brace-run start the
same system. Nothing is set inline here. Every node starts at once, in no
order: readiness is the graph's (the simulator waits for its peers, the
controller for a Replan server, the planner configures and activates itself).
"""

from __future__ import annotations

import time
from pathlib import Path

from brace_common.names import DEFAULT_NAMESPACE

from .run_config import RunConfig

ARGUMENTS = {
    "run": "run configuration (config/runs/*.yaml): the stack, its overrides and variants",
    "variant": "the variant of the run configuration to start",
    "namespace": "namespace of the stack's nodes and topics",
    "output": "run folder for the parameter file and the audit bag ('' = runs/launch_<time>)",
}


def declare_arguments(workspace: Path, run: str, variant: str) -> list:
    """DeclareLaunchArgument actions with the defaults of a launch file."""
    from launch.actions import DeclareLaunchArgument

    defaults = {"run": str(workspace / "config" / "runs" / run), "variant": variant,
                "namespace": DEFAULT_NAMESPACE.strip("/"), "output": ""}
    return [DeclareLaunchArgument(name, default_value=defaults[name], description=text)
            for name, text in ARGUMENTS.items()]


def stack_nodes(context, workspace: Path) -> list:
    """Node actions of the run's stack (an OpaqueFunction body: reads the launch arguments)."""
    from launch.substitutions import LaunchConfiguration
    from launch_ros.actions import Node

    def arg(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    cfg = RunConfig.load(Path(arg("run")))
    variant = arg("variant")
    folder = Path(arg("output")) if arg("output") else workspace / "runs" / f"launch_{time.strftime('%Y%m%d_%H%M%S')}"
    extra, server = {}, []
    if cfg.planner_server:  # the planner waits for its server: they start together too
        from launch.actions import ExecuteProcess

        served = cfg.server_spec()
        extra["erecap_planner"] = {"server_url": f"http://127.0.0.1:{served['port']}/v1"}
        flags = [f"--{key}={served[key]}" for key in ("engine", "model", "adapter", "dtype", "port")]
        server = [ExecuteProcess(cmd=["ros2", "run", "erecap_planner", "brace-planner-server", *flags],
                                 name="planner_server", output="screen")]
    params = cfg.write_parameters(variant, folder / variant, extra)
    return server + [Node(package=spec.package, executable=spec.executable, name=spec.name, namespace=arg("namespace"),
                          parameters=[str(params)], output="screen")
                     for spec in cfg.stack.nodes]
