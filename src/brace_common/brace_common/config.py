"""Typed, validated configuration: one dataclass field = one ROS parameter.

`param()` attaches a parameter's description and allowed range to a dataclass
field; nodes declare their parameters from these fields (params.py), and a
config's `validate()` rejects bad values with a ConfigError that names the
parameter. The same dataclasses load from a ROS parameter YAML file
(`ros__parameters`), so benchmarks, tools and nodes share one configuration.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import field
from pathlib import Path
from typing import Any, Optional

import yaml

from . import names
from .http_deadline import check_base_url
from .validation import InvalidInput, check_agent_id

PACKAGE_URI = "package://"
"""Prefix of a path to a file a package installs: package://<pkg>/<relative>."""


class ConfigError(ValueError):
    """An invalid configuration value; `parameter` names the offending parameter."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(f"parameter '{parameter}': {message}")
        self.parameter = parameter


def param(default: Any, description: str, low: Optional[float] = None, high: Optional[float] = None) -> Any:
    """A dataclass field that is also a documented ROS parameter with an optional range."""
    metadata = {"description": description, "low": low, "high": high}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def autostart_param(default: bool = True) -> Any:
    """The `autostart` parameter of a lifecycle node (hardware nodes default to false: a lifecycle manager brings
    them up)."""
    return param(default, "configure and activate at start (no lifecycle manager needed)")


def diagnostics_period_param() -> Any:
    """The `diagnostics_period_s` parameter every node with /diagnostics declares."""
    return param(1.0, "period of /diagnostics (s)", 0.05, 3600.0)


def field_default(f: dataclasses.Field) -> Any:
    """The default value of a config field (lists through their factory)."""
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


def check_fields(cfg: Any) -> None:
    """Check every field against its declared range and finiteness; raise ConfigError."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f.name, f"{value} is not a finite number")
        low, high = f.metadata.get("low"), f.metadata.get("high")
        if low is not None and value < low:
            raise ConfigError(f.name, f"{value} is below the minimum {low}")
        if high is not None and value > high:
            raise ConfigError(f.name, f"{value} is above the maximum {high}")


@dataclasses.dataclass
class ReadinessConfig:
    """A world node's readiness: the peers its first episode waits for (WorldNode.wait_for_peers)."""

    wait_for_nodes: list[str] = param([], "nodes (names in this node's namespace) that must be in the graph before "
                                      "the first episode starts, e.g. [trigger_monitor, brace_controller]")
    replan_action: str = param("", "Replan action whose server must answer before the first episode starts "
                               f"(e.g. '{names.REPLAN}'); '' = do not wait for a planner")
    wait_timeout_s: float = param(120.0, "after this long without the peers above, diagnostics say ERROR (the node "
                                  "keeps waiting)", 0.1, 86400.0)
    wait_settle_s: float = param(1.0, "once every peer is up, wait this long more for their subscriptions to match "
                                 "(s)", 0.0, 60.0)

    def check_readiness(self) -> None:
        """ConfigError when a `wait_for_nodes` entry is not a node name without a namespace."""
        if any(not n.strip() or "/" in n for n in self.wait_for_nodes):
            raise ConfigError("wait_for_nodes", f"{self.wait_for_nodes}: each must be a node name without a namespace")


@dataclasses.dataclass
class SteppedWorldConfig(ReadinessConfig):
    """A stepped world node's pacing and run (WorldInputs): its readiness, how it steps beside the planner, and what
    it does after its last episode."""

    step_period_s: float = param(0.05, "wall time between steps when no call is in flight (s, steady clock)",
                                 0.001, 60.0)
    hold_while_planning: bool = param(True, "do not step while an admitted call has not returned (lockstep)")
    hold_timeout_s: float = param(60.0, "longest hold for one call before stepping anyway (s)", 0.1, 3600.0)
    variant: str = param("", "label of the run's variant, copied into the episode messages")
    shutdown_when_done: bool = param(False, "exit the node's process after the last episode")


def check_base_url_param(parameter: str, url: str) -> None:
    """ConfigError naming `parameter` when `url` is not an API's base URL (brace_common.http_deadline.check_base_url)."""
    try:
        check_base_url(url, parameter)
    except ValueError as exc:
        raise ConfigError(parameter, str(exc)) from None


def check_agent_ids(parameter: str, ids: list[str] | str) -> None:
    """ConfigError naming `parameter` unless every id in `ids` (one id or a list) is a valid agent id."""
    for value in [ids] if isinstance(ids, str) else ids:
        try:
            check_agent_id(parameter, value)
        except InvalidInput as exc:
            raise ConfigError(parameter, str(exc)) from None


def from_mapping(cls: type, values: dict[str, Any]) -> Any:
    """Build config dataclass `cls` from a parameter mapping, coercing ints to floats.

    Unknown keys raise ConfigError so a typo in a parameter file is not silently ignored.
    """
    known = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key not in known:
            raise ConfigError(key, f"unknown parameter for {cls.__name__}")
        default = field_default(known[key])
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if type(default) is not type(value):
            raise ConfigError(key, f"expected {type(default).__name__}, got {type(value).__name__} ({value!r})")
        kwargs[key] = value
    cfg = cls(**kwargs)
    cfg.validate()
    return cfg


def node_sections(node_name: str) -> tuple[str, ...]:
    """The keys of a ROS parameter file that apply to node `node_name` in any namespace, in file-precedence order."""
    return ("/**", f"/**/{node_name}", node_name, f"/{node_name}")


def load_ros_parameters(path: str | Path, node_name: str) -> dict[str, Any]:
    """The `ros__parameters` a ROS parameter file gives `node_name` (its own sections over the `/**` wildcard)."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    values: dict[str, Any] = {}
    found = False
    for key in node_sections(node_name):
        section = data.get(key)
        if isinstance(section, dict) and "ros__parameters" in section:
            values.update(section["ros__parameters"] or {})
            found = True
    if not found:
        raise ConfigError("ros__parameters", f"{path} has no section for node '{node_name}'")
    return values


def config_from_file(cls: type, path: str | Path, node_name: str, node_cls: Optional[type] = None,
                     **overrides: Any) -> Any:
    """Build config `cls` from a node's ROS parameter file, without `node_cls`'s (ROS-side) keys, with overrides."""
    values = load_ros_parameters(path, node_name)
    node_keys = {f.name for f in dataclasses.fields(node_cls)} if node_cls else set()
    return from_mapping(cls, {**{k: v for k, v in values.items() if k not in node_keys}, **overrides})


def package_file(package: str, relative: str, source_root: Path) -> Path:
    """A file a package installs under share/<package>/, else the same path in its source tree."""
    try:
        # optional: ament_index exists only in a sourced ROS install (plain YAML use works without it)
        from ament_index_python.packages import PackageNotFoundError, get_package_share_directory

        try:
            shared = Path(get_package_share_directory(package)) / relative
            if shared.is_file():
                return shared
        except PackageNotFoundError:
            pass
    except ImportError:
        pass
    return source_root / relative


def resolve_path(path: str) -> str:
    """A file path, or 'package://<pkg>/<relative>': the file installed under share/<pkg>/ (else in src/<pkg>/)."""
    if not path.startswith(PACKAGE_URI):
        return path
    pkg, _, relative = path[len(PACKAGE_URI):].partition("/")
    return str(package_file(pkg, relative, Path(__file__).resolve().parents[2] / pkg))
