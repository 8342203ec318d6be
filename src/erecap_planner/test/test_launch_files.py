"""Launch files (launch/ cannot be installed here): everything they name must exist.

Each Node(...) in a workspace launch file names a package, an executable and
parameter files; the executable must be installed by colcon, the parameter
file must exist and hold a ros__parameters section for that node, and those
parameters must build a valid config.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from brace_controller.audit_recorder_node import RecorderConfig
from brace_controller.config import (
    ControllerConfig,
    ControllerNodeConfig,
    MonitorConfig,
    MonitorNodeConfig,
    from_mapping,
    load_ros_parameters,
)
from erecap_planner.config import PlannerConfig
from sim_bridges.config import SimConfig

WORKSPACE = Path(__file__).resolve().parents[3]  # src/<pkg>/test/<file>
LAUNCH_FILES = sorted((WORKSPACE / "launch").glob("*.launch.py"))
CONFIGS = {"brace_controller": (ControllerConfig, ControllerNodeConfig),
           "trigger_monitor": (MonitorConfig, MonitorNodeConfig),
           "erecap_planner": (PlannerConfig, None),
           "embedded_sim": (SimConfig, None),
           "audit_recorder": (RecorderConfig, None)}


def launched_nodes(path: Path) -> list[dict[str, str]]:
    """package / executable / name / default params file of each Node(...) call in a launch file."""
    tree = ast.parse(path.read_text())
    defaults = {}
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "DeclareLaunchArgument":
            name = call.args[0].value
            for kw in call.keywords:
                if kw.arg == "default_value":
                    # str(CONFIG / "file.yaml"): take the file name, resolved against config/
                    for node in ast.walk(kw.value):
                        if isinstance(node, ast.Constant) and str(node.value).endswith(".yaml"):
                            defaults[name] = WORKSPACE / "config" / node.value
    nodes = []
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "Node":
            kw = {k.arg: k.value for k in call.keywords}
            params = [defaults[a.args[0].value] for a in getattr(kw.get("parameters"), "elts", [])
                      if isinstance(a, ast.Call) and getattr(a.func, "id", "") == "LaunchConfiguration"]
            nodes.append({"package": kw["package"].value, "executable": kw["executable"].value,
                          "name": kw["name"].value, "params": params})
    return nodes


def test_there_are_launch_files():
    assert LAUNCH_FILES


@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
def test_launch_file_targets_exist(path):
    prefixes = [Path(p) for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    for node in launched_nodes(path):
        executables = [p / "lib" / node["package"] / node["executable"] for p in prefixes]
        assert any(e.is_file() and os.access(e, os.X_OK) for e in executables), f"{node} not installed"
        assert node["params"], f"{node['name']} has no parameter file"
        for params_file in node["params"]:
            assert params_file.is_file(), params_file
            values = load_ros_parameters(params_file, node["name"])
            core_cls, node_cls = CONFIGS[node["name"]]
            node_keys = set(node_cls.__dataclass_fields__) if node_cls else set()
            from_mapping(core_cls, {k: v for k, v in values.items() if k not in node_keys}).validate()
            if node_cls:
                from_mapping(node_cls, {k: v for k, v in values.items() if k in node_keys}).validate()
