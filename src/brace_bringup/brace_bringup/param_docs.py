"""docs/parameters.md, generated from the config dataclasses every node declares its parameters from.

    python -m brace_bringup.param_docs > docs/parameters.md

A test checks the file equals what this prints, so the parameter reference
cannot drift from the code: each row is a dataclass field (= a ROS parameter
of the same name) with its type, default, range and description, and the
value the stack's parameter files in config/ give it where they differ.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import yaml

from brace_audit.audit_recorder_node import RecorderConfig
from brace_audit.viewer_node import ViewerConfig
from brace_common.config import field_default, load_ros_parameters
from brace_controller.config import ControllerConfig, ControllerNodeConfig, MonitorConfig, MonitorNodeConfig
from brace_example_world.corridor_config import CorridorConfig
from brace_safety.airsim_monitor_node import AirSimMonitorNodeConfig
from brace_safety.cmd_vel_monitor_node import CmdVelMonitorConfig
from brace_safety.ee_monitor_node import EeMonitorConfig
from brace_safety.hostile_planner_node import HostilePlannerConfig
from erecap_planner.config import PlannerConfig
from robot_bridge.openvla.executor_config import ExecutorConfig
from robot_bridge.orbbec.camera_config import CameraConfig
from robot_bridge.pickfruit.operator_task_node import OperatorTaskConfig
from robot_bridge.pickfruit.twin_world_node import TwinWorldConfig
from robot_bridge.piper.piper_arm_config import PiperArmConfig
from robot_bridge.verifier.verifier_config import VerifierConfig
from sim_bridges.isaac.isaac_config import IsaacBridgeConfig
from sim_bridges.textworld.textworld_config import TextWorldConfig
from sim_bridges.warehouse.warehouse_config import AirSimBridgeConfig, SimConfig

from .graph import AIRSIM, EXAMPLE_WORLD, HOSTILE_PLANNER, ISAAC, PIPER_REAL, PIPER_TWIN, SIM, TEXTWORLD, VIEWER
from .run_config import params_dir

NODE_CONFIGS: dict[str, tuple[type, ...]] = {
    "embedded_sim": (SimConfig,),
    "trigger_monitor": (MonitorConfig, MonitorNodeConfig),
    "brace_controller": (ControllerConfig, ControllerNodeConfig),
    "erecap_planner": (PlannerConfig,),
    "audit_recorder": (RecorderConfig,),
    "brace_viewer": (ViewerConfig,),
    "twin_world": (TwinWorldConfig,),
    "piper_arm": (PiperArmConfig,),
    "front_camera": (CameraConfig,),
    "wrist_camera": (CameraConfig,),
    "openvla_executor": (ExecutorConfig,),
    "visual_verifier": (VerifierConfig,),
    "operator_task": (OperatorTaskConfig,),
    "isaac_bridge": (IsaacBridgeConfig,),
    "cmd_vel_monitor": (CmdVelMonitorConfig,),
    "airsim_monitor": (AirSimMonitorNodeConfig,),
    "airsim_bridge": (AirSimBridgeConfig,),
    "textworld_world": (TextWorldConfig,),
    "hostile_planner": (HostilePlannerConfig,),
    "ee_monitor": (EeMonitorConfig,),
    "corridor_world": (CorridorConfig,),
}
"""Each node's parameters: the config dataclasses it declares them from (core first, then the node's own)."""

HEADER = """# Parameters

Generated from the config dataclasses by `python -m brace_bringup.param_docs > docs/parameters.md` (a test checks
this file is current). Every parameter is declared read-only with this description and range (`ros2 param
describe`); an invalid value stops the node at start, or fails the planner's configure transition, with a message
naming the parameter. Every node also takes ROS's `use_sim_time` (stamps then follow /clock; latencies, deadlines
and pacing timers stay on the steady clock). "params/" is the value the node's parameter files (brace_bringup's
params/, listed under its name; the control nodes: the sim stack's) give where it differs from the default; the
robot stacks add params/robot/*.yaml and run configurations (brace_bringup's runs/) override further.
"""


def _show(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    text = text.removesuffix("...").strip()
    return f"`{text}`" if text not in ("''", '""') else "`''`"


def _range(f: dataclasses.Field) -> str:
    low, high = f.metadata.get("low"), f.metadata.get("high")
    if low is None and high is None:
        return ""
    return f"{low if low is not None else ''}..{high if high is not None else ''}"


def _type(f: dataclasses.Field) -> str:
    return str(f.type).replace("typing.", "")


def render() -> str:
    """The whole of docs/parameters.md."""
    lines = [HEADER]
    specs = {}
    for stack in (SIM, PIPER_TWIN, PIPER_REAL, AIRSIM, ISAAC, TEXTWORLD):  # every node once; control nodes: the sim's
        for spec in stack.nodes:
            specs.setdefault(spec.name, spec)
    specs[HOSTILE_PLANNER.name] = HOSTILE_PLANNER   # a stand-in a variant starts (graph.STAND_INS)
    specs[VIEWER.name] = VIEWER                     # beside any stack when asked (graph.with_viewer)
    specs[EXAMPLE_WORLD.name] = EXAMPLE_WORLD       # the template world (docs/integrate.md)
    for spec in specs.values():
        files = {}
        for name in spec.parameter_files:
            files.update(load_ros_parameters(params_dir() / name, spec.name))
        lines += [f"## `{spec.name}` ({spec.package}, `{spec.executable}`{', lifecycle' if spec.lifecycle else ''})", "",
                  f"Files: {', '.join(f'`params/{n}`' for n in spec.parameter_files)}.", "",
                  "| parameter | type | default | params/ | range | description |",
                  "|---|---|---|---|---|---|"]
        for cls in NODE_CONFIGS[spec.name]:
            for f in dataclasses.fields(cls):
                default = field_default(f)
                configured = _show(files[f.name]) if f.name in files and files[f.name] != default else ""
                description = f.metadata.get("description", "").replace("|", "\\|")
                lines.append(f"| `{f.name}` | {_type(f)} | {_show(default)} | {configured} | {_range(f)} | "
                             f"{description} |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    """Print docs/parameters.md (from the code and brace_bringup's installed parameter files)."""
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
