"""Declare a config dataclass's fields as read-only ROS parameters and build the config.

Each field becomes a parameter of the same name with the field's description
and range in its descriptor; the values read back are validated once by the
config's `validate()`, so a bad value stops the node with a ConfigError that
names the parameter. The parameter files and `-p` of the command line are
replayed the way rcl merges them (`given_parameters`), so a value of another
type, which rcl would drop in favour of an earlier one, stops the node naming
the parameter and the file.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Optional, TypeVar

import yaml
from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.exceptions import InvalidParameterTypeException, InvalidParameterValueException
from rclpy.node import Node
from rclpy.parameter import Parameter

from .config import ConfigError, field_default, from_mapping
from .validation import shorten

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
    A value of another type is declared as the default and refused by `read_config`, naming its file.
    """
    overrides = getattr(node, "_parameter_overrides", {})
    for f in dataclasses.fields(cls):
        default = field_default(f)
        declared = declared_type(f)
        override = overrides.get(f.name)
        keep_default = override is not None and not _fits(override.type_, declared)  # rclpy would refuse it unnamed
        initial = declared if isinstance(default, list) and not default else default
        try:
            node.declare_parameter(f.name, initial, _descriptor(f, default, enforce_ranges), ignore_override=keep_default)
        except (InvalidParameterValueException, InvalidParameterTypeException) as exc:
            raise ConfigError(f.name, str(exc)) from None


def declared_type(f: dataclasses.Field) -> Parameter.Type:
    """The ROS parameter type a config field is declared with (an empty list default: its annotation's)."""
    default = field_default(f)
    if isinstance(default, list) and not default:
        return _array_type(f)
    return Parameter.Type.from_parameter_value(default)


RCL_TYPE_ORDER = (Parameter.Type.BOOL, Parameter.Type.INTEGER, Parameter.Type.DOUBLE, Parameter.Type.STRING,
                  Parameter.Type.BYTE_ARRAY, Parameter.Type.BOOL_ARRAY, Parameter.Type.INTEGER_ARRAY,
                  Parameter.Type.DOUBLE_ARRAY, Parameter.Type.STRING_ARRAY)
"""rcl keeps one value per type when a section sets a parameter twice; rclpy takes the first type here."""
_ARRAYS = {Parameter.Type.BOOL: Parameter.Type.BOOL_ARRAY, Parameter.Type.INTEGER: Parameter.Type.INTEGER_ARRAY,
           Parameter.Type.DOUBLE: Parameter.Type.DOUBLE_ARRAY, Parameter.Type.STRING: Parameter.Type.STRING_ARRAY}
_TYPE_WORDS = {Parameter.Type.NOT_SET: "an empty list", Parameter.Type.BOOL: "a bool",
               Parameter.Type.INTEGER: "an integer", Parameter.Type.DOUBLE: "a double",
               Parameter.Type.STRING: "a string", Parameter.Type.BYTE_ARRAY: "a byte array",
               Parameter.Type.BOOL_ARRAY: "a list of bools", Parameter.Type.INTEGER_ARRAY: "a list of integers",
               Parameter.Type.DOUBLE_ARRAY: "a list of doubles", Parameter.Type.STRING_ARRAY: "a list of strings"}
_RCL_TRUE = frozenset("Y y yes Yes YES true True TRUE on On ON".split())
_RCL_FALSE = frozenset("N n no No NO false False FALSE off Off OFF".split())
_RCL_INT = re.compile(r"[+-]?(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")
_RCL_FLOAT = re.compile(r"[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|inf(inity)?|nan)", re.IGNORECASE)
_RCL_HEX_FLOAT = re.compile(r"[+-]?0[xX]([0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)([pP][+-]?\d+)?")
_RCL_SPECIAL = {".nan": math.nan, ".NaN": math.nan, ".NAN": math.nan,
                **{f"{sign}.{inf}": -math.inf if sign == "-" else math.inf
                   for sign in ("", "+", "-") for inf in ("inf", "Inf", "INF")}}


def _strtod(text: str) -> Optional[float]:
    """C's strtod of the whole of `text`, None where it fails or overflows (errno ERANGE)."""
    if text in _RCL_SPECIAL:
        return _RCL_SPECIAL[text]
    if _RCL_FLOAT.fullmatch(text):
        value = float(text)
    elif _RCL_HEX_FLOAT.fullmatch(text):
        value = float.fromhex(text)
    else:
        return None
    if math.isinf(value) and "inf" not in text.lower():
        return None  # overflow
    if abs(value) < sys.float_info.min and re.search(r"[1-9]", re.split(r"[eEpP]", text)[0].lower().lstrip("0x")):
        return None  # underflow
    return value


def rcl_scalar(text: str, quoted: bool = False) -> tuple[Parameter.Type, Any]:
    """The type and value rcl's YAML parser gives a scalar (rcl_yaml_param_parser's get_value).

    Quoted: a string. Plain: a bool (yes / no / on / off / true / false ...), else an int64 (strtol, base 0:
    0x10 and 010 too), else a double (strtod: beyond int64 an integer becomes a double), else a string.
    """
    if quoted:
        return Parameter.Type.STRING, text
    if text in _RCL_TRUE or text in _RCL_FALSE:
        return Parameter.Type.BOOL, text in _RCL_TRUE
    if _RCL_INT.fullmatch(text):
        digits = text.lstrip("+-")
        value = int(text, 16 if digits[:2] in ("0x", "0X") else 8 if digits.startswith("0") else 10)
        if -2**63 <= value < 2**63:
            return Parameter.Type.INTEGER, value
    double = _strtod(text)
    if double is not None:
        return Parameter.Type.DOUBLE, double
    return Parameter.Type.STRING, text


@dataclasses.dataclass(frozen=True)
class Given:
    """One value a parameter file or `-p` sets, typed as rcl reads it; `source` says where (a file, `-p ...`)."""

    type: Parameter.Type  # NOT_SET: an empty list
    value: Any
    text: str
    source: str
    section: str = "/**"

    @property
    def shown(self) -> str:
        """The value as written (a string quoted), shortened."""
        return shorten(f"'{self.text}'" if self.type == Parameter.Type.STRING else self.text, 60)


@dataclasses.dataclass(frozen=True)
class Setting:
    """One parameter as the files and `-p` leave it for a node.

    `last` was set last, in argument order; `effective` is what rclpy gets (None: only empty lists): rcl keeps one
    value per type in a section and rclpy takes the first in RCL_TYPE_ORDER, so an earlier value of another type
    can hide `last`, and it applies sections in the order they first appeared, so an earlier file's section can.
    """

    last: Given
    effective: Optional[Given]


def _rcl_value(node: yaml.Node, source: str) -> Optional[Given]:
    """What rcl makes of a parameter's YAML node; None where rcl refuses it (it then fails to start itself)."""
    if isinstance(node, yaml.ScalarNode):
        if node.style not in ("'", '"') and not node.value:
            return None
        kind, value = rcl_scalar(node.value, node.style in ("'", '"'))
        return Given(kind, value, node.value, source)
    if not isinstance(node, yaml.SequenceNode):
        return None
    items = [_rcl_value(item, source) for item in node.value]
    if not items:
        return Given(Parameter.Type.NOT_SET, [], "[]", source)
    kinds = {item.type if item is not None else None for item in items}
    if len(kinds) != 1 or next(iter(kinds)) not in _ARRAYS:
        return None  # rcl: "Sequence should be of same type"
    text = f"[{', '.join(repr(i.value) if isinstance(i.value, str) else i.text for i in items)}]"
    return Given(_ARRAYS[items[0].type], [i.value for i in items], text, source)


def _sections(root: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, yaml.MappingNode]]:
    """(node key as rcl joins nested namespaces, its `ros__parameters` mapping) of a parameter file, in file order."""
    if not isinstance(root, yaml.MappingNode):
        return
    for key, value in root.value:
        if not isinstance(key, yaml.ScalarNode):
            continue
        if key.value == "ros__parameters":
            if path and isinstance(value, yaml.MappingNode):
                yield "/".join(path), value
        else:
            yield from _sections(value, (*path, key.value))


def _parameters(mapping: yaml.MappingNode, prefix: str = "") -> Iterator[tuple[str, yaml.Node]]:
    """(dotted name, value node) of a `ros__parameters` mapping."""
    for key, value in mapping.value:
        name = f"{prefix}{key.value}" if isinstance(key, yaml.ScalarNode) else None
        if name is None:
            continue
        if isinstance(value, yaml.MappingNode):
            yield from _parameters(value, f"{name}.")
        else:
            yield name, value


def _replay(argv: Sequence[str]) -> Iterator[tuple[str, str, Given]]:
    """(section, parameter, value) of every setting in `argv`'s ROS arguments, in the order rcl parses them."""
    ros, args = False, iter(argv)
    for arg in args:
        if arg in ("--ros-args", "--"):
            ros = arg == "--ros-args"
        elif ros and arg == "--params-file":
            path = next(args, "")
            try:
                root = yaml.compose(Path(path).read_text(), Loader=yaml.SafeLoader)
            except (OSError, ValueError, yaml.YAMLError):
                continue  # rcl reports an unreadable file itself
            for section, mapping in _sections(root):
                for name, node in _parameters(mapping):
                    given = _rcl_value(node, f"file '{path}'")
                    if given is not None:
                        yield section, name, dataclasses.replace(given, section=section)
        elif ros and arg in ("-p", "--param"):
            rule = next(args, "")
            target, _, text = rule.partition(":=")
            section, _, name = target.rpartition(":")
            try:
                given = _rcl_value(yaml.compose(text, Loader=yaml.SafeLoader), f"-p {shorten(rule, 80)}")
            except yaml.YAMLError:
                continue
            if given is not None:
                yield section or "/**", name, dataclasses.replace(given, section=section or "/**")


def section_applies(section: str, fqn: str) -> bool:
    """Whether parameter-file section `section` applies to the node named `fqn` ('*' one token, '**' any)."""
    pattern = "".join("(/[^/]+)*" if token == "**" else "/[^/]+" if token == "*" else "/" + re.escape(token)
                      for token in section.strip("/").split("/"))
    return re.fullmatch(pattern, fqn) is not None


def given_parameters(argv: Sequence[str], fqn: str) -> dict[str, Setting]:
    """What the parameter files and `-p` of `argv`'s ROS arguments give the node `fqn`, replaying rcl's merge.

    rcl merges each section (`/**`, `/**/name`, ...) on its own, one value per type, in argument order; rclpy then
    applies the sections that match the node in the order they first appeared, a later one replacing a parameter.
    """
    sections: dict[str, dict[str, list[Given]]] = {}
    last: dict[str, Given] = {}
    for section, name, given in _replay(argv):
        sections.setdefault(section, {}).setdefault(name, []).append(given)
        if section_applies(section, fqn):
            last[name] = given
    effective: dict[str, Optional[Given]] = {}
    for section, parameters in sections.items():
        if section_applies(section, fqn):
            for name, values in parameters.items():
                typed = {v.type: v for v in values if v.type != Parameter.Type.NOT_SET}  # the last of each type
                effective[name] = next((typed[t] for t in RCL_TYPE_ORDER if t in typed), None)
    return {name: Setting(given, effective[name]) for name, given in last.items()}


def _fits(kind: Parameter.Type, declared: Parameter.Type) -> bool:
    """A value of type `kind` can set a parameter declared `declared` (an empty list sets any list)."""
    return kind == declared or (kind == Parameter.Type.NOT_SET and declared in _ARRAYS.values())


def check_given(name: str, declared: Parameter.Type, setting: Optional[Setting],
                override: Optional[Parameter] = None) -> None:
    """ConfigError naming parameter `name` and where its value came from when the files, `-p` or rclpy's override
    give it a value of another type than `declared` (rcl would drop it silently or rclpy refuse it unnamed)."""
    expected = _TYPE_WORDS[declared]
    if setting is not None:
        for given in (setting.last, setting.effective):
            if given is None or _fits(given.type, declared):
                continue
            why = ""
            if given.type == Parameter.Type.DOUBLE and declared == Parameter.Type.INTEGER \
                    and _RCL_INT.fullmatch(given.text):
                why = " (beyond a 64-bit integer: rcl reads it as a double)"
            elif (given.type, declared) == (Parameter.Type.INTEGER, Parameter.Type.DOUBLE):
                why = f" (write {float(given.value)!r})"
            elif (given.type, declared) == (Parameter.Type.INTEGER_ARRAY, Parameter.Type.DOUBLE_ARRAY):
                why = f" (write {[float(v) for v in given.value]})"
            kept = setting.effective
            if given is setting.last and kept is not None and kept is not given and _fits(kept.type, declared):
                why += f"; rcl would drop it and keep {kept.shown} from {kept.source}"
            raise ConfigError(name, f"{given.source} sets {given.shown} ({_TYPE_WORDS[given.type]}) where {expected} "
                                    f"is declared{why}")
        last, kept = setting.last, setting.effective
        if kept is not None and last.type != Parameter.Type.NOT_SET and repr(kept.value) != repr(last.value):
            raise ConfigError(name, f"{last.source} sets {last.shown} but rcl keeps {kept.shown} from {kept.source}: "
                                    f"its section '{kept.section}' applies after '{last.section}', which appeared "
                                    "first (set the parameter in one section)")
    if override is not None and not _fits(override.type_, declared):
        raise ConfigError(name, f"is given {shorten(repr(override.value), 60)} "
                                f"({_TYPE_WORDS.get(override.type_, override.type_.name)}) where {expected} is declared")


def read_config(node: Node, cls: type[T], argv: Optional[Sequence[str]] = None) -> T:
    """Read the declared fields of `cls` back from `node` and validate them.

    `argv` (default: the process's command line) is replayed (`given_parameters`): a value of another type than a
    field's is refused naming its file or `-p`, and a list a later file or `-p` emptied is empty.
    """
    settings = given_parameters(sys.argv if argv is None else argv, node.get_fully_qualified_name())
    overrides = getattr(node, "_parameter_overrides", {})  # what rclpy got from the files, `-p`, the constructor
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        default = field_default(f)
        setting, override = settings.get(f.name), overrides.get(f.name)
        check_given(f.name, declared_type(f), setting, override)
        value = node.get_parameter_or(f.name, Parameter(f.name, value=default)).value
        if isinstance(default, list):
            # `name: []` reaches rclpy untyped and would leave an earlier value or the default in place
            emptied = (setting is not None and setting.last.type == Parameter.Type.NOT_SET) or \
                (override is not None and override.value is None)
            value = [] if emptied or value is None else list(value)
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
