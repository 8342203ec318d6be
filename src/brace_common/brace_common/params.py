"""Declare a config dataclass's fields as read-only ROS parameters and build the config.

Each field becomes a parameter of the same name with the field's description
and range in its descriptor; the values read back are validated once by the
config's `validate()`, so a bad value stops the node with a ConfigError that
names the parameter.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional, TypeVar

import yaml
from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.exceptions import InvalidParameterTypeException, InvalidParameterValueException
from rclpy.node import Node
from rclpy.parameter import Parameter

from .config import ConfigError, from_mapping, node_sections

T = TypeVar("T")

def _descriptor(f: dataclasses.Field, default: Any, ranges: bool = True) -> ParameterDescriptor:
    low, high = f.metadata.get("low"), f.metadata.get("high")
    text = f.metadata.get("description", "")
    if low is not None or high is not None:
        text += f" [range {low}..{high}]"
    descriptor = ParameterDescriptor(name=f.name, description=text, read_only=True)
    # Ranges are checked by validate() with clearer messages; the descriptor shows them to `ros2 param describe`.
    if not ranges:
        return descriptor
    if isinstance(default, float) and low is not None and high is not None:
        descriptor.floating_point_range = [FloatingPointRange(from_value=float(low), to_value=float(high), step=0.0)]
    elif isinstance(default, int) and not isinstance(default, bool) and low is not None and high is not None:
        descriptor.integer_range = [IntegerRange(from_value=int(low), to_value=int(high), step=0)]
    return descriptor


def _array_type(f: dataclasses.Field) -> Parameter.Type:
    annotation = str(f.type)
    if "int" in annotation:
        return Parameter.Type.INTEGER_ARRAY
    if "float" in annotation:
        return Parameter.Type.DOUBLE_ARRAY
    return Parameter.Type.STRING_ARRAY


def declare_parameters(node: Node, cls: type, enforce_ranges: bool = True) -> None:
    """Declare every field of `cls` on `node` (values are checked later by `read_config`).

    Lifecycle nodes pass `enforce_ranges=False` so an out-of-range value is
    reported by `read_config` at configure rather than rejected in the constructor.
    """
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        descriptor = _descriptor(f, default, enforce_ranges)
        try:
            if isinstance(default, list) and not default:
                node.declare_parameter(f.name, _array_type(f), descriptor)
            else:
                node.declare_parameter(f.name, default, descriptor)
        except (InvalidParameterValueException, InvalidParameterTypeException) as exc:
            raise ConfigError(f.name, str(exc)) from None


def _flatten(values: dict, prefix: str = "") -> dict[str, Any]:
    """Nested parameter mappings as dotted names."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _file_values(path: str, node_name: str, fqn: str) -> dict[str, Any]:
    """What a parameter file gives the node (its sections in precedence order); {} when it cannot be read."""
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}  # rcl reports an unreadable file itself
    values: dict[str, Any] = {}
    for key in (*node_sections(node_name), fqn, fqn.lstrip("/")):
        section = data.get(key) if isinstance(data, dict) else None
        if isinstance(section, dict) and isinstance(section.get("ros__parameters"), dict):
            values.update(_flatten(section["ros__parameters"]))
    return values


def emptied_lists(argv: Sequence[str], node_name: str, fqn: str) -> set[str]:
    """Parameters whose last setting in `argv`'s ROS arguments (files in order, then `-p`) is an empty list.

    rcl merges parameter files and `-p name:=value` last-wins, but an empty list has no type, so it drops it and
    an earlier file's list (or the default) stays in force; this replays the merge for empty lists.
    """
    last: dict[str, bool] = {}
    ros, args = False, iter(argv)
    for arg in args:
        if arg in ("--ros-args", "--"):
            ros = arg == "--ros-args"
        elif ros and arg == "--params-file":
            last.update({k: v == [] for k, v in _file_values(next(args, ""), node_name, fqn).items()})
        elif ros and arg in ("-p", "--param"):
            name, _, text = next(args, "").partition(":=")
            try:
                last[name] = yaml.safe_load(text) == []
            except yaml.YAMLError:
                continue
    return {name for name, empty in last.items() if empty}


def read_config(node: Node, cls: type[T], argv: Optional[Sequence[str]] = None) -> T:
    """Read the declared fields of `cls` back from `node` and validate them.

    `argv` (default: the process's command line) is replayed for list parameters a later file or `-p` emptied.
    """
    emptied = emptied_lists(sys.argv if argv is None else argv, node.get_name(), node.get_fully_qualified_name())
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        value = node.get_parameter_or(f.name, Parameter(f.name, value=default)).value
        given = getattr(node, "_parameter_overrides", {}).get(f.name)
        if isinstance(default, list) and (f.name in emptied or (given is not None and given.value is None)):
            value = []  # `name: []` reaches rclpy untyped and would leave an earlier value or the default in place
        if isinstance(default, list):
            value = [] if value is None else list(value)
        values[f.name] = value
    return from_mapping(cls, values)


def declare_config(node: Node, cls: type[T]) -> T:
    """Declare every field of `cls` on `node`, read the values, return the validated config."""
    declare_parameters(node, cls)
    return read_config(node, cls)


def reject_undeclared(node: Node) -> None:
    """ConfigError naming the first parameter given to `node` (file or command line) that it does not declare.

    rclpy ignores an override for a parameter nobody declares, so a misspelt name (`cooldown_stpes`) would start
    the node on its default. Call after every parameter is declared.
    """
    given = getattr(node, "_parameter_overrides", {})  # what --params-file / -p / parameter_overrides gave the node
    for name in sorted(given):
        if not node.has_parameter(name) and not name.startswith("qos_overrides."):
            raise ConfigError(name, f"unknown parameter for node '{node.get_name()}' (misspelt?)")
