"""Declare a config dataclass's fields as read-only ROS parameters and build the config.

Each field becomes a parameter of the same name with the field's description
and range in its descriptor; the values read back are validated once by the
config's `validate()`, so a bad value stops the node with a ConfigError that
names the parameter.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.exceptions import InvalidParameterTypeException, InvalidParameterValueException
from rclpy.node import Node
from rclpy.parameter import Parameter

from .config import ConfigError, from_mapping

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


def read_config(node: Node, cls: type[T]) -> T:
    """Read the declared fields of `cls` back from `node` and validate them."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        value = node.get_parameter_or(f.name, Parameter(f.name, value=default)).value
        given = getattr(node, "_parameter_overrides", {}).get(f.name)
        if isinstance(default, list) and given is not None and given.value is None:
            value = []  # `name: []` in a parameter file reaches rclpy untyped and would leave the default in place
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
