"""Run configurations (share/brace_bringup/runs/*.yaml): a stack, overrides for every variant, the variants' overlays.

    run:
      stack: sim                      # brace_bringup.graph.STACKS: nodes and their parameter files (params/)
      extends: demo.yaml              # optional: another run config (beside this one, else an installed one)
      overrides: {node: {param: value}}          # every variant
      variants: {name: {node: {param: value}}}   # each variant's overlay
      planner_server: {engine: transformers, model: ..., adapter: ..., dtype: float32, port: 8001, parallel: 1,
                       weights: f16}
      airsim_peer: {port: 41451, clock_speed: 1.0}   # optional, stacks with an airsim_bridge
      own_process: [erecap_planner]   # optional: nodes brace-run starts as their own processes (as launch does)

A variant (or the overrides) that gives parameters to a stand-in (graph.STAND_INS: hostile_planner) runs it in
the place of the node it replaces (erecap_planner), whose name it also takes in every `wait_for_nodes`.

A run configuration is named by a path or by the name of one installed
with brace_bringup (`demo` or `demo.yaml`: share/brace_bringup/runs/); the
parameter files a stack names are brace_bringup's (share/brace_bringup/params/).
With `planner_server` the run also starts a local planner server, with
`airsim_peer` brace-airsim-peer: brace_bringup.run_plan turns a (run config,
variant) into those processes and one parameter file (`write_parameters`),
which the launch files and brace-run both render, so `ros2 launch` and
`brace-run` run the same system. brace-run composes the stack's nodes in one
process, except those `own_process` names: a node whose compute must not
share one interpreter lock with the others (the planner's forward passes wait
for it between operators while the twin's firmware and renderer hold it).
The parameter file holds the stack's files
in order, then the overrides, the variant's overlay and the caller's extras,
then what follows from them (the recorder writes into the run folder;
use_sim_time as the stack says). K lives only in the world's parameters: the
trigger monitor learns the agents from the world's AgentState messages, and
the planner (action_schema_file '') takes the agents' action schema from the
world's WorldInfo, published latched at each episode start.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from ament_index_python.packages import get_package_share_directory

from brace_common.config import from_mapping, load_ros_parameters
from sim_bridges.airsim.intersection import IntersectionConfig

from .graph import AUDIT_RECORDER, STACKS, STAND_INS, VIEWER, Stack, with_stand_ins, with_viewer


def share() -> Path:
    """brace_bringup's installed share folder: launch/, params/, runs/, rviz/ (links into src/ with --symlink-install)."""
    return Path(get_package_share_directory("brace_bringup"))


def params_dir() -> Path:
    """The folder of the stacks' parameter files (graph.NodeSpec.parameter_files are relative to it)."""
    return share() / "params"


def installed_runs() -> list[str]:
    """The names of the run configurations installed with brace_bringup."""
    return sorted(p.stem for p in (share() / "runs").glob("*.yaml"))


def run_file(run: str | Path) -> Path:
    """A run configuration's file: `run` when it is a file, else the installed one of that name ('demo' or
    'demo.yaml'); FileNotFoundError naming the installed ones."""
    path = Path(run)
    if path.is_file():
        return path
    if path.name == str(run):  # a bare name, not a path
        installed = share() / "runs" / (path.name if path.suffix == ".yaml" else f"{path.name}.yaml")
        if installed.is_file():
            return installed
    raise FileNotFoundError(f"no run configuration '{run}': neither a file nor one of brace_bringup's "
                            f"({', '.join(installed_runs())})")

AIRSIM_PEER_KEYS = {"port": 41451, "clock_speed": 1.0}
"""Keys of a run's `airsim_peer` (brace-airsim-peer started beside the stack) and their defaults (brace-run picks a
free port instead of `port`)."""

PLANNER_SERVER_KEYS = {"engine": "transformers", "model": "smollm2-135m-instruct", "adapter": "", "dtype": "float32",
                       "port": 8001, "threads": 0, "parallel": 1, "weights": "f16"}
"""Keys of a run's `planner_server` and their defaults (brace-run picks a free port instead of `port`)."""


def intersection_of(bridge: dict[str, Any]):
    """The intersection scenario an airsim_bridge parameter set describes (its scenario fields only)."""

    known = {f.name for f in dataclasses.fields(IntersectionConfig)}
    return from_mapping(IntersectionConfig, {k: v for k, v in bridge.items() if k in known})


def own_process_of(path: Path, value: Any) -> tuple[str, ...]:
    """A run's `own_process` list as node names; ValueError unless a list of strings."""
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{path}: own_process must be a list of node names, not {value!r}")
    return tuple(dict.fromkeys(value))


def _merge(into: dict[str, dict], layer: dict[str, dict] | None) -> None:
    for node, values in (layer or {}).items():
        into.setdefault(node, {}).update(copy.deepcopy(values or {}))


@dataclass
class RunConfig:
    """A run: its stack, overrides for all variants, and the variants' overlays."""

    stack: Stack
    overrides: dict[str, dict] = field(default_factory=dict)
    variants: dict[str, dict[str, dict]] = field(default_factory=dict)
    params_dir: Path = Path(".")  # where the stack's parameter files are (brace_bringup's share/params)
    planner_server: dict[str, Any] = field(default_factory=dict)
    airsim_peer: dict[str, Any] = field(default_factory=dict)
    own_process: tuple[str, ...] = ()    # nodes brace-run starts as their own processes
    viewer: bool = False                 # the live viewer runs beside the stack (brace-run --view, viewer:=true)

    @classmethod
    def load(cls, run: str | Path) -> RunConfig:
        """Read and check a run config (a path or an installed one's name, see `run_file`); ValueError naming what is
        wrong, FileNotFoundError when there is none."""
        path = run_file(run)
        raw = (yaml.safe_load(path.read_text()) or {}).get("run")
        if not isinstance(raw, dict):
            raise ValueError(f"{path}: no 'run' mapping")
        unknown_keys = set(raw) - {"stack", "extends", "overrides", "variants", "planner_server", "airsim_peer",
                                   "own_process"}
        if unknown_keys:
            raise ValueError(f"{path}: unknown keys {sorted(unknown_keys)} (stack, extends, overrides, variants, "
                             "planner_server, airsim_peer, own_process)")
        if raw.get("extends"):
            beside = path.parent / raw["extends"]
            base = cls.load(beside if beside.is_file() else raw["extends"])
        else:
            base = cls(STACKS["sim"], params_dir=params_dir())
        stack_name = raw.get("stack", base.stack.name)
        if stack_name not in STACKS:
            raise ValueError(f"{path}: unknown stack '{stack_name}' (known: {', '.join(STACKS)})")
        cfg = cls(STACKS[stack_name], copy.deepcopy(base.overrides), copy.deepcopy(base.variants), base.params_dir,
                  {**base.planner_server, **(raw.get("planner_server") or {})},
                  {**base.airsim_peer, **(raw.get("airsim_peer") or {})},
                  own_process_of(path, raw["own_process"]) if "own_process" in raw else base.own_process)
        bad = set(cfg.planner_server) - set(PLANNER_SERVER_KEYS)
        if bad:
            raise ValueError(f"{path}: planner_server has unknown keys {sorted(bad)} ({', '.join(PLANNER_SERVER_KEYS)})")
        bad = set(cfg.airsim_peer) - set(AIRSIM_PEER_KEYS)
        if bad:
            raise ValueError(f"{path}: airsim_peer has unknown keys {sorted(bad)} ({', '.join(AIRSIM_PEER_KEYS)})")
        if cfg.airsim_peer and "airsim_bridge" not in cfg.stack.names:
            raise ValueError(f"{path}: airsim_peer needs a stack with an airsim_bridge ('{cfg.stack.name}' has none)")
        _merge(cfg.overrides, raw.get("overrides"))
        cfg.variants.update(raw.get("variants") or {})
        names = set(cfg.node_names)
        for label, layer in [("overrides", cfg.overrides), *((f"variant {v}", n) for v, n in cfg.variants.items())]:
            bad = set(layer or {}) - names
            if bad:
                raise ValueError(f"{path}: {label} names nodes {sorted(bad)} that stack '{cfg.stack.name}' does not run")
        for spec in {s for v in cfg.variants for s in cfg.stack_of(v).nodes}:
            for f in spec.parameter_files:
                if not (cfg.params_dir / f).is_file():
                    raise ValueError(f"{path}: parameter file {f} does not exist in {cfg.params_dir}")
        if not cfg.variants:
            raise ValueError(f"{path}: no variants")
        bad = set(cfg.own_process) - set(cfg.stack.names)
        if bad:
            raise ValueError(f"{path}: own_process names nodes {sorted(bad)} that stack '{cfg.stack.name}' does not run")
        kept = {cfg.stack.world, AUDIT_RECORDER.name} & set(cfg.own_process)
        if kept:
            raise ValueError(f"{path}: own_process cannot hold {sorted(kept)}: brace-run reads the world's progress and "
                             "closes the recorder's bag in its own process")
        return cfg

    @property
    def node_names(self) -> tuple[str, ...]:
        """The nodes a layer may give parameters to: the stack's, the stand-ins for those it runs, and the viewer
        (its parameters apply when it runs beside the stack)."""
        return (*self.stack.names, *(n for n, (replaced, _) in STAND_INS.items() if replaced in self.stack.names),
                *((VIEWER.name,) if VIEWER.name not in self.stack.names else ()))

    def stack_of(self, variant: str) -> Stack:
        """The stack `variant` runs: the run's, with the stand-ins its layers give parameters to (and the viewer when
        asked)."""
        stack = with_stand_ins(self.stack, {*self.overrides, *(self.variants.get(variant) or {})})
        return with_viewer(stack) if self.viewer else stack

    def server_spec(self) -> dict[str, Any]:
        """The run's planner server with every key (defaults filled in); {} when the run names none."""
        return {**PLANNER_SERVER_KEYS, **self.planner_server} if self.planner_server else {}

    def peer_spec(self) -> dict[str, Any]:
        """The run's AirSim peer with every key (defaults filled in); {} when the run names none."""
        return {**AIRSIM_PEER_KEYS, **self.airsim_peer} if self.airsim_peer else {}

    def parameters(self, variant: str, extra: dict[str, dict] | None = None) -> dict[str, dict[str, Any]]:
        """node -> parameters: the stack's files in order, then the run's overrides, the variant, `extra`."""
        if variant not in self.variants:
            raise KeyError(f"unknown variant '{variant}' (known: {', '.join(self.variants)})")
        stack = self.stack_of(variant)
        merged: dict[str, dict] = {}
        for spec in stack.nodes:
            merged[spec.name] = {}
            for f in spec.parameter_files:
                merged[spec.name].update(load_ros_parameters(self.params_dir / f, spec.name))
        for layer in (self.overrides, self.variants.get(variant) or {}, extra or {}):
            _merge(merged, {node: values for node, values in (layer or {}).items() if node in stack.names})
        renamed = {STAND_INS[spec.name][0]: spec.name for spec in stack.nodes if spec.name in STAND_INS}
        for values in merged.values():
            if renamed and isinstance(values.get("wait_for_nodes"), list):
                values["wait_for_nodes"] = [renamed.get(n, n) for n in values["wait_for_nodes"]]
        return merged

    def write_parameters(self, variant: str, folder: Path, extra: dict[str, dict] | None = None) -> Path:
        """Write `folder`/params.yaml for `variant` (what every node of the run reads); return its path."""

        folder.mkdir(parents=True, exist_ok=True)
        params = self.parameters(variant, extra)
        for values in params.values():
            values.setdefault("use_sim_time", self.stack.use_sim_time)
        if "audit_recorder" in params:
            params["audit_recorder"].setdefault("output_dir", str(folder / "bag"))
            if not params["audit_recorder"]["output_dir"]:
                params["audit_recorder"]["output_dir"] = str(folder / "bag")
        if self.stack.world:
            params[self.stack.world]["variant"] = variant
        path = folder / "params.yaml"
        path.write_text(yaml.safe_dump({f"/**/{node}": {"ros__parameters": values} for node, values in params.items()},
                                       sort_keys=False))
        return path
