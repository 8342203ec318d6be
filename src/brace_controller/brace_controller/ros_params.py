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

def _descriptor(f: dataclasses.Field, default: Any) -> ParameterDescriptor:
    low, high = f.metadata.get("low"), f.metadata.get("high")
    text = f.metadata.get("description", "")
    if low is not None or high is not None:
        text += f" [range {low}..{high}]"
    descriptor = ParameterDescriptor(name=f.name, description=text, read_only=True)
    # Ranges are checked by validate() with clearer messages; the descriptor shows them to `ros2 param describe`.
    if isinstance(default, float) and low is not None and high is not None:
        descriptor.floating_point_range = [FloatingPointRange(from_value=float(low), to_value=float(high), step=0.0)]
    elif isinstance(default, int) and not isinstance(default, bool) and low is not None and high is not None:
        descriptor.integer_range = [IntegerRange(from_value=int(low), to_value=int(high), step=0)]
    return descriptor


def declare_config(node: Node, cls: type[T]) -> T:
    """Declare every field of `cls` on `node`, read the values, return the validated config."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        descriptor = _descriptor(f, default)
        try:
            if isinstance(default, list) and not default:
                node.declare_parameter(f.name, Parameter.Type.STRING_ARRAY, descriptor)
                value = node.get_parameter_or(f.name, Parameter(f.name, value=[])).value or []
            else:
                value = node.declare_parameter(f.name, default, descriptor).value
            if isinstance(default, list):
                value = list(value)
        except (InvalidParameterValueException, InvalidParameterTypeException) as exc:
            raise ConfigError(f.name, str(exc)) from None
        values[f.name] = value
    return from_mapping(cls, values)
