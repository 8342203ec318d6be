"""What the launch files start must exist and be valid (the launch tool itself cannot be installed here).

Every node of every stack is an installed executable whose parameter files
exist and build a valid config; every run configuration loads and writes, for
each of its variants, a parameter file every node accepts; every installed
launch file names an installed run configuration and computes no path from
its own location; the Isaac launch's planner decodes against its bridge's
action schema. test_launch_stacks.py starts what each launch file starts.
"""

from __future__ import annotations

import ast
import importlib
import os
from pathlib import Path

import pytest
import yaml

from brace_bringup.graph import EXAMPLE_WORLD, STACKS, STAND_INS, VIEWER, Stack
from brace_bringup.param_docs import NODE_CONFIGS, render
from brace_bringup.run_config import RunConfig, params_dir, share
from brace_common.action_schema import ActionSchema
from brace_common.config import from_mapping, load_ros_parameters, resolve_path
from robot_bridge.pusht.pusht_world import INSTRUCTION_TEMPLATE, SKILLS_TEXT
from sim_bridges.isaac.isaac_bridge_node import load_schema
from sim_bridges.isaac.isaac_config import IsaacBridgeConfig

WORKSPACE = Path(__file__).resolve().parents[3]  # src/<pkg>/test/<file>: the source tree's docs/
LAUNCH_FILES = sorted((share() / "launch").glob("*.launch.py"))
RUN_CONFIGS = sorted((share() / "runs").glob("*.yaml"))
ROS_PARAMETERS = {"use_sim_time"}  # declared by rclpy itself, not by a config


def validate(node: str, values: dict) -> None:
    """Build the node's configs from `values` (ConfigError when one is invalid or unknown)."""
    values = {k: v for k, v in values.items() if k not in ROS_PARAMETERS}
    classes = NODE_CONFIGS[node]
    known = [set(cls.__dataclass_fields__) for cls in classes]
    assert set(values) <= set().union(*known), f"{node}: unknown parameters {set(values) - set().union(*known)}"
    for cls, keys in zip(classes, known, strict=True):
        from_mapping(cls, {k: v for k, v in values.items() if k in keys})


STAND_IN_STACK = Stack("stand_ins", (*(spec for _, spec in STAND_INS.values()), VIEWER, EXAMPLE_WORLD))
"""The nodes a variant may start in another's place, the viewer any run may start beside its stack, and the template
world (docs/integrate.md), checked as a stack's."""


@pytest.mark.parametrize("stack", [*STACKS.values(), STAND_IN_STACK], ids=lambda s: s.name)
def test_stack_nodes_are_installed_and_their_files_are_valid(stack):
    prefixes = [Path(p) for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    for spec in stack.nodes:
        executables = [p / "lib" / spec.package / spec.executable for p in prefixes]
        assert any(e.is_file() and os.access(e, os.X_OK) for e in executables), f"{spec} not installed"
        values: dict = {}
        for name in spec.parameter_files:
            values.update(load_ros_parameters(params_dir() / name, spec.name))
        validate(spec.name, values)


@pytest.mark.parametrize("stack", [*STACKS.values(), STAND_IN_STACK], ids=lambda s: s.name)
def test_every_node_class_brace_run_composes_exists_in_the_nodes_package(stack):
    for spec in stack.nodes:
        module, _, cls = spec.node_class.partition(":")
        assert module.split(".")[0] == spec.package, spec  # the class of the executable launch starts
        assert isinstance(getattr(importlib.import_module(module), cls), type), spec


@pytest.mark.parametrize("path", RUN_CONFIGS, ids=lambda p: p.name)
def test_every_variant_writes_a_parameter_file_every_node_accepts(path, tmp_path):
    cfg = RunConfig.load(path)
    for variant in cfg.variants:
        written = yaml.safe_load(cfg.write_parameters(variant, tmp_path / variant).read_text())
        assert set(written) == {f"/**/{name}" for name in cfg.stack_of(variant).names}
        for key, section in written.items():
            assert section["ros__parameters"]["use_sim_time"] is cfg.stack.use_sim_time
            validate(key.removeprefix("/**/"), section["ros__parameters"])
    cfg.viewer = True                   # brace-run --view, viewer:=true: the viewer beside the stack
    variant = next(iter(cfg.variants))
    written = yaml.safe_load(cfg.write_parameters(variant, tmp_path / "viewer").read_text())
    assert set(written) == {f"/**/{name}" for name in (*cfg.stack_of(variant).names,)} and "/**/brace_viewer" in written
    validate("brace_viewer", written["/**/brace_viewer"]["ros__parameters"])


@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
def test_launch_files_start_a_run_configuration(path):
    calls = [c for c in ast.walk(ast.parse(path.read_text()))
             if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "stack_launch_description"]
    assert len(calls) == 1, "a launch file starts one run configuration's stack"
    run, variant = (a.value for a in calls[0].args[:2])
    cfg = RunConfig.load(run)  # an installed one, by name
    assert variant in cfg.variants
    assert "parameters=" not in path.read_text(), "no parameter is set inline in a launch file"
    assert "__file__" not in path.read_text(), "a launch file finds its files through the package's share"
    assert {p.name for p in LAUNCH_FILES} == {f"{name}.launch.py" for name in (
        "brace_sim", "brace_control", "piper_twin", "piper_real", "airsim", "isaac", "textworld")}


def test_the_parameter_reference_is_generated_from_the_code():
    assert (WORKSPACE / "docs" / "parameters.md").read_text() == render(), \
        "docs/parameters.md is stale: python -m brace_bringup.param_docs > docs/parameters.md"


def test_the_isaac_launch_plans_for_the_bridges_robots_with_its_schema_on_isaacs_clock(tmp_path):
    """isaac.launch.py's parameters: the monitor's agents are the bridge's, the planner decodes JSON
    plans against the bridge's action schema (which both sides load), every node follows /clock."""
    cfg = RunConfig.load("isaac")
    assert cfg.stack.use_sim_time and cfg.stack.world == "isaac_bridge"
    for variant in cfg.variants:
        written = yaml.safe_load(cfg.write_parameters(variant, tmp_path / variant).read_text())
        bridge, monitor = (written[f"/**/{name}"]["ros__parameters"] for name in ("isaac_bridge", "trigger_monitor"))
        assert monitor["agents"] == bridge["agents"] and bridge["variant"] == variant
        if "/**/hostile_planner" in written:   # the stand-in takes the schema from the bridge's world_info
            assert "/**/erecap_planner" not in written
            continue
        planner = written["/**/erecap_planner"]["ros__parameters"]
        assert planner["action_schema_file"] == bridge["action_schema_file"] and planner["decoding"] == "json"
        assert all(section["ros__parameters"]["use_sim_time"] is True for section in written.values())
        config = from_mapping(IsaacBridgeConfig, {k: v for k, v in bridge.items() if k not in ROS_PARAMETERS})
        schema = load_schema(config)
        planner_schema = ActionSchema.from_dict(yaml.safe_load(Path(resolve_path(planner["action_schema_file"]))
                                                               .read_text()))
        assert set(planner_schema.actions) == set(schema.actions)


@pytest.mark.parametrize("name", ["piper_twin_pusht.yaml", "piper_real_pusht.yaml"])
def test_pusht_runs_name_the_part_a_push_presses_on(name):
    run = yaml.safe_load((share() / "runs" / name).read_text())["run"]["overrides"]
    assert INSTRUCTION_TEMPLATE in run["openvla_executor"]["instruction_templates"]
    assert run.get("operator_task", {}).get("constraints", [SKILLS_TEXT]) == [SKILLS_TEXT]


@pytest.mark.parametrize("path", sorted((share() / "params" / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_the_example_parameter_files_are_valid(path):
    """docs/integrate.md's files for bringing your own model: each section is one its node accepts."""
    sections = yaml.safe_load(path.read_text())
    assert sections, f"{path.name} is empty"
    for key, section in sections.items():
        validate(key.removeprefix("/**/"), section["ros__parameters"])
