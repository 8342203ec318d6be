"""The action schema and the plan step: what an agent may call, shared by the planner and every world. ROS-free.

A schema (YAML or a dict) lists the actions (skills) an agent may call and each action's `parameters`:

    max_steps: 4            # longest plan the planner writes
    min_steps: 1            # constrained decoding writes at least this many steps
    entities:               # ids of the world's things, by entity kind
      place: [shelf_1, dock_1]
    kinds:                  # optional: the actions an agent of each kind may call (absent: every action)
      mobile: [move_to, wait]
    actions:
      move_to:
        target: {type: string, entity: place}      # one of the ids of entities.place
      wait:
        seconds: {type: number, required: false, min: 0.0, max: 60.0}

A parameter has a JSON `type` (string | number | integer | boolean, default string), `required` (default true),
allowed values as `choices` (or `enum`) or as `entity` (a kind of `entities`; while that kind lists no ids, any
id-like string of at most MAX_ID_CHARS), and for numbers a range `min` / `max` (or `low` / `high`), inclusive
unless `exclusive_min` / `exclusive_max`. Numbers must be finite and become floats. `not_self: true` refuses the
id of the agent the plan is for (`yield_to` names another drone): checks given that agent refuse it (`names_self`),
and the JSON Schema of that agent's plan leaves it out.

A world extends a base schema without copying it: `base.extend({...})` deep-merges only what differs (its
entities, a range, an action's choices; `None` removes a key), e.g. the planner's schema of a world narrows the
world's intake schema to enumerated values for constrained decoding.

Every problem is a `PlanError` (an `InvalidInput`) whose `reason` is one of `Fault` (the counter key), with the
step's `index` and the parameter `key` it concerns. A caller that has always counted a fault under another key
renames it with `PlanError.renamed`.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Optional

import yaml

from .validation import MAX_ID_CHARS, MAX_TEXT_CHARS, InvalidInput, check_id, parse_json_object, shorten

TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "number": (int, float), "integer": (int,),
                                      "boolean": (bool,)}
"""The JSON types a parameter may have, and the Python types that carry them."""
MAX_SCHEMA_STEPS = 64
"""The longest plan a schema may allow (`max_steps`): what a Plan message carries at most."""
MAX_SCHEMA_ACTIONS = 256
"""Actions in one schema."""
MAX_ACTION_PARAMETERS = 32
"""Parameters of one action."""
MAX_CHOICES = 4096
"""Enumerated values of one parameter (or ids of one entity kind)."""
MAX_SCHEMA_JSON_CHARS = 262_144
"""A schema as JSON (WorldInfo.action_schema_json); the largest a shipped world publishes is a few KB."""
MAX_SCHEMA_JSON_DEPTH = 8
"""Nesting of a schema as JSON: schema, actions, action, parameter, choices are five levels."""


class Fault(str, Enum):
    """Why a plan or a step is refused (the counter key of a rejection)."""

    NOT_A_STEP = "bad_step"                    # a step that is not an object
    UNKNOWN_SKILL = "unknown_skill"            # an action the schema does not offer
    SKILL_NOT_FOR_KIND = "skill_not_for_kind"  # an action the agent's kind may not call
    BAD_PARAMETERS = "bad_parameters"          # parameters that are not an object
    UNKNOWN_PARAMETER = "unknown_parameter"
    MISSING_PARAMETER = "missing_parameter"
    BAD_PARAMETER_TYPE = "bad_parameter_type"
    BAD_PARAMETER_VALUE = "bad_parameter_value"   # a number that is not finite, an id that is too long
    OUT_OF_RANGE = "parameter_out_of_range"
    UNKNOWN_CHOICE = "unknown_choice"          # a value outside choices / the entity's ids
    NAMES_SELF = "names_self"                  # a not_self parameter naming the agent the plan is for
    EMPTY_PLAN = "empty_plan"
    LONG_PLAN = "long_plan"

    def __str__(self) -> str:
        return self.value


PLANNER_REASONS: Mapping[str, str] = {Fault.UNKNOWN_SKILL: "unknown_action", Fault.UNKNOWN_CHOICE: "hallucinated_value",
                                      Fault.LONG_PLAN: "too_long"}
"""The planner's keys for the schema's faults it has always counted under its own names: its counters and the
reason at the head of a call record's error (what the controller's quality floor reads)."""


class PlanError(InvalidInput):
    """A plan or step that the schema refuses; `reason` is the counter key, `index` / `key` say where."""

    def __init__(self, reason: str, detail: str = "", index: Optional[int] = None, key: Optional[str] = None):
        self.detail = detail
        self.index = index
        self.key = key
        super().__init__(str(reason), f"{reason}: {detail}" if detail else str(reason))
        self.reason = reason

    def renamed(self, names: Mapping[str, str]) -> PlanError:
        """This error with its reason renamed by `names` (a caller's own counter keys); itself when not listed."""
        if str(self.reason) not in names:
            return self
        return PlanError(names[str(self.reason)], self.detail, self.index, self.key)


@dataclass(frozen=True)
class Step:
    """One skill call of a plan: an action and its `parameters` (numbers as floats once validated)."""

    action: str
    parameters: dict[str, Any] = field(default_factory=dict)

    def parameters_json(self) -> str:
        """Parameters as canonical JSON (keys sorted)."""
        return json.dumps(self.parameters, sort_keys=True)

    def text(self) -> str:
        """`move_to(x=1.0, y=2.0)`: the call with parameter names, as logs and context entries write it."""
        return f"{self.action}({', '.join(f'{k}={v}' for k, v in self.parameters.items())})"

    def values_text(self) -> str:
        """`move_to(shelf_1)`: the call with values only (the embedded worlds' context entries)."""
        return f"{self.action}({', '.join(f'{v}' for v in self.parameters.values())})"

    def call(self) -> str:
        """The call as canonical text: two steps are the same call when these are equal."""
        return self.action + self.parameters_json()


@dataclass(frozen=True)
class Subtask:
    """One entry of a ReCAP subtask list S: a primitive skill call the executor runs, or a composite subtask (one of
    a schema's `subtasks`) that a child frame decomposes (brace_memory.recap)."""

    step: Step
    composite: bool = False

    def text(self) -> str:
        """`take(red potato)`; a composite in brackets, `[prepare(red potato)]`."""
        return f"[{self.step.values_text()}]" if self.composite else self.step.values_text()

    def to_json(self) -> dict[str, Any]:
        """The subtask as the store keeps it."""
        return {"action": self.step.action, "parameters": self.step.parameters, "composite": self.composite}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Subtask:
        """A subtask the store kept (ValueError when it is not one)."""
        if not isinstance(raw, dict) or not isinstance(raw.get("action"), str) \
                or not isinstance(raw.get("parameters"), dict):
            raise ValueError(f"not a stored subtask: {str(raw)[:80]}")
        return cls(Step(raw["action"], dict(raw["parameters"])), bool(raw.get("composite", False)))


OBJECT_PARAMETERS = ("object", "item", "obj", "box", "target_object")
"""Parameter names that name the object a step acts on (reflective memory's keys, the verifier's step checks)."""
LOCATION_PARAMETERS = ("target", "location", "place", "to", "dock", "shelf")
"""Parameter names that name where a step takes its object."""


def named_parameter(parameters: Mapping[str, Any], names: Sequence[str]) -> str:
    """The value of the first of `names` that `parameters` holds, as text ('' when it holds none)."""
    return next((str(parameters[name]) for name in names if name in parameters), "")


@dataclass(frozen=True)
class ParameterSpec:
    """One parameter of an action: JSON type, required, allowed values, range of a number."""

    type: str = "string"
    required: bool = True
    choices: Optional[tuple] = None      # explicit values, or the ids of `entity` when it lists any
    entity: Optional[str] = None         # the entity kind whose ids are the values
    min: Optional[float] = None
    max: Optional[float] = None
    exclusive_min: bool = False
    exclusive_max: bool = False
    not_self: bool = False               # the value may not be the id of the agent the plan is for

    def allows(self, value: Any, agent: Optional[str]) -> bool:
        """False when this parameter may not name `agent` and `value` does (None: the agent is not known)."""
        return not (self.not_self and agent is not None and value == agent)

    def json_schema(self, agent: Optional[str] = None) -> dict:
        """This parameter as JSON Schema (for a plan of `agent`, when given)."""
        out: dict[str, Any] = {"type": self.type}
        if self.choices is not None:
            out["enum"] = [c for c in self.choices if self.allows(c, agent)]
        if self.min is not None:
            out["exclusiveMinimum" if self.exclusive_min else "minimum"] = self.min
        if self.max is not None:
            out["exclusiveMaximum" if self.exclusive_max else "maximum"] = self.max
        return out


@dataclass(frozen=True)
class ActionSpec:
    """An action an agent may call, with its parameters in the schema's order."""

    name: str
    parameters: dict[str, ParameterSpec] = field(default_factory=dict)

    def signature(self) -> str:
        """`name(p1, p2)` as shown to the planner."""
        return f"{self.name}({', '.join(self.parameters)})"


def spec_dict(spec: ActionSpec, resolve_entities: bool = True) -> dict:
    """An action's (or subtask's) parameters in their dict form (entity parameters as `choices` when resolved)."""
    params = {}
    for pname, p in spec.parameters.items():
        raw: dict[str, Any] = {"type": p.type}
        if p.entity is not None and not resolve_entities:
            raw["entity"] = p.entity
        elif p.choices is not None:
            raw["choices"] = list(p.choices)
        if not p.required:
            raw["required"] = False
        for key, value in (("min", p.min), ("max", p.max)):
            if value is not None:
                raw[key] = value
        for key, value in (("exclusive_min", p.exclusive_min), ("exclusive_max", p.exclusive_max),
                           ("not_self", p.not_self)):
            if value:
                raw[key] = True
        params[pname] = raw
    return params


def merged(base: Mapping, override: Mapping) -> dict:
    """`base` with `override` deep-merged into it: mappings merge, other values replace, None removes the key."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _mapping(where: str, value: Any) -> Mapping:
    """`value` as a mapping (None: empty); ValueError when it is something else."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} is a mapping, not {type(value).__name__}")
    return value


def _list(where: str, value: Any, limit: int = MAX_CHOICES) -> tuple:
    """`value` as a tuple (None: empty) of at most `limit` items; ValueError when it is not a list."""
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValueError(f"{where} must be a list")
    if len(value) > limit:
        raise ValueError(f"{where} has {len(value)} items (at most {limit})")
    return tuple(value)


def _name(where: str, value: Any) -> str:
    """An action, parameter or entity-kind name: an id (validation.check_id); ValueError otherwise."""
    if not isinstance(value, str):
        raise ValueError(f"{where}: name {shorten(repr(value))} is not a string")
    try:
        return check_id("name", value)
    except InvalidInput as exc:
        raise ValueError(f"{where}: {exc}") from None


def _choice(where: str, kind: str, value: Any) -> Any:
    """One enumerated value: of the parameter's JSON type, finite, a string no longer than a text."""
    if isinstance(value, bool) and kind != "boolean" or not isinstance(value, TYPES[kind]):
        raise ValueError(f"{where}: choice {shorten(repr(value))} is not a {kind}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where}: choice {value} is not finite")
    if isinstance(value, str) and not 0 < len(value) <= MAX_TEXT_CHARS:
        raise ValueError(f"{where}: a choice has {len(value)} characters (1 to {MAX_TEXT_CHARS})")
    return value


def _number(where: str, raw: Mapping, *names: str) -> Optional[float]:
    for name in names:
        if raw.get(name) is not None:
            value = raw[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{where}: {name} {value!r} is not a finite number")
            return float(value)
    return None


def _specs(section: str, raw: Any, entities: Mapping[str, tuple]) -> dict[str, ActionSpec]:
    """The actions (or composite subtasks) of `section`, each with its parameters; ValueError naming what is wrong."""
    raw = _mapping(section, raw)
    if len(raw) > MAX_SCHEMA_ACTIONS:
        raise ValueError(f"{section} has {len(raw)} entries (at most {MAX_SCHEMA_ACTIONS})")
    out = {}
    for name, params in raw.items():
        where = f"{section}.{_name(section, name)}"
        params = _mapping(f"{where}: parameters", params)
        if len(params) > MAX_ACTION_PARAMETERS:
            raise ValueError(f"{where} has {len(params)} parameters (at most {MAX_ACTION_PARAMETERS})")
        out[name] = ActionSpec(name, {_name(where, p): _parameter(f"{where}.{p}", spec, entities)
                                      for p, spec in params.items()})
    return out


def _parameter(where: str, raw: Any, entities: Mapping[str, tuple]) -> ParameterSpec:
    if raw is not None and not isinstance(raw, Mapping):
        raise ValueError(f"{where}: a parameter is a mapping (type, required, choices, entity, min, max)")
    raw = raw or {}
    unknown = set(raw) - {"type", "required", "choices", "enum", "entity", "min", "max", "low", "high",
                          "exclusive_min", "exclusive_max", "not_self"}
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {sorted(map(str, unknown))}")
    kind = raw.get("type", "string")
    if not isinstance(kind, str) or kind not in TYPES:
        raise ValueError(f"{where}: type {shorten(repr(kind))} is not one of {', '.join(TYPES)}")
    values = raw.get("choices", raw.get("enum"))
    if values is not None:
        values = tuple(_choice(where, kind, v) for v in _list(f"{where}: choices", values))
    entity = raw.get("entity")
    for flag in ("required", "exclusive_min", "exclusive_max"):
        if not isinstance(raw.get(flag, False), bool):
            raise ValueError(f"{where}: {flag} is true or false")
    if entity is not None:
        if values is not None:
            raise ValueError(f"{where}: give choices or entity, not both")
        if not isinstance(entity, str) or entity not in entities:
            raise ValueError(f"{where}: entity {shorten(repr(entity))} is not a kind of the schema's entities "
                             f"({', '.join(entities) or 'none'})")
        values = tuple(_choice(where, kind, v) for v in entities[entity]) or None
    low, high = _number(where, raw, "min", "low"), _number(where, raw, "max", "high")
    if (low is not None or high is not None) and kind not in ("number", "integer"):
        raise ValueError(f"{where}: a range needs type number or integer, not {kind}")
    if low is not None and high is not None and low > high:
        raise ValueError(f"{where}: min {low} > max {high}")
    not_self = raw.get("not_self", False)
    if not isinstance(not_self, bool) or not_self and kind != "string":
        raise ValueError(f"{where}: not_self is true or false, and only for a string (an agent's id)")
    return ParameterSpec(kind, bool(raw.get("required", True)), tuple(values) if values is not None else None,
                         entity, low, high, bool(raw.get("exclusive_min", False)), bool(raw.get("exclusive_max", False)),
                         not_self)


@dataclass(frozen=True)
class ActionSchema:
    """The actions an agent may call: load, extend, validate steps and plans, emit JSON Schema."""

    actions: dict[str, ActionSpec]
    max_steps: int = 16
    min_steps: int = 1
    entities: dict[str, tuple] = field(default_factory=dict)
    kinds: dict[str, tuple[str, ...]] = field(default_factory=dict)
    source: dict = field(default_factory=dict, repr=False, compare=False)   # what it was built from
    subtasks: dict[str, ActionSpec] = field(default_factory=dict)   # composite subtasks (ReCAP), by name

    # ------------------------------------------------------------------ building

    @classmethod
    def from_dict(cls, raw: Any) -> ActionSchema:
        """A schema from its dict form (see the module docstring); ValueError naming what is wrong."""
        if not isinstance(raw, Mapping):
            raise ValueError("an action schema is a mapping with 'actions'")
        unknown = set(raw) - {"max_steps", "min_steps", "entities", "kinds", "actions", "subtasks"}
        if unknown:
            raise ValueError(f"unknown key(s) {sorted(map(str, unknown))} (max_steps, min_steps, entities, kinds, "
                             "actions, subtasks)")
        entities: dict[str, tuple] = {}
        for kind, ids in _mapping("entities", raw.get("entities")).items():
            where = f"entities.{_name('entities', kind)}"
            entities[kind] = _list(where, ids)
            if not all(isinstance(i, str) and 0 < len(i) <= MAX_TEXT_CHARS for i in entities[kind]):
                raise ValueError(f"{where} must be a list of ids (non-empty strings)")
        actions = _specs("actions", raw.get("actions"), entities)
        if not actions:
            raise ValueError("an action schema needs an 'actions' mapping with at least one action")
        subtasks = _specs("subtasks", raw.get("subtasks"), entities)
        clash = sorted(set(subtasks) & set(actions))
        if clash:
            raise ValueError(f"subtasks.{clash[0]} is also an action (a subtask is composite, an action primitive)")
        kinds: dict[str, tuple[str, ...]] = {}
        for kind, allowed in _mapping("kinds", raw.get("kinds")).items():
            where = f"kinds.{_name('kinds', kind)}"
            allowed = _list(where, allowed, MAX_SCHEMA_ACTIONS)
            missing = [shorten(repr(a)) for a in allowed if not isinstance(a, str) or a not in actions]
            if missing:
                raise ValueError(f"{where}: {missing} are not actions of the schema")
            kinds[kind] = allowed
        max_steps, min_steps = raw.get("max_steps", 16), raw.get("min_steps", 1)
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or not 1 <= max_steps <= MAX_SCHEMA_STEPS:
            raise ValueError(f"max_steps {shorten(repr(max_steps))} is not an integer in [1, {MAX_SCHEMA_STEPS}]")
        if isinstance(min_steps, bool) or not isinstance(min_steps, int) or not 1 <= min_steps <= max_steps:
            raise ValueError(f"min_steps {shorten(repr(min_steps))} must be an integer in [1, max_steps = {max_steps}]")
        return cls(actions, max_steps, min_steps, entities, kinds, copy.deepcopy(dict(raw)), subtasks)

    @classmethod
    def from_json(cls, text: str) -> ActionSchema:
        """A schema from its JSON form as a message carries it (WorldInfo.action_schema_json), bounded in length
        (MAX_SCHEMA_JSON_CHARS) and nesting (MAX_SCHEMA_JSON_DEPTH) before it is parsed; InvalidInput (a
        ValueError) naming what is wrong."""
        raw = parse_json_object("action_schema_json", text, MAX_SCHEMA_JSON_CHARS, MAX_SCHEMA_JSON_DEPTH)
        try:
            return cls.from_dict(raw)
        except ValueError as exc:
            raise InvalidInput("malformed_schema", str(exc)) from None

    @classmethod
    def load(cls, path: str | Path) -> ActionSchema:
        """The schema in YAML file `path`; ValueError (OSError when unreadable) naming what is wrong."""
        try:
            raw = yaml.safe_load(Path(path).read_text())
        except yaml.YAMLError as exc:
            raise ValueError(f"{path} is not YAML: {exc}") from None
        return cls.from_dict(raw)

    def extend(self, override: Mapping) -> ActionSchema:
        """This schema with `override` deep-merged in (a world's entities, ranges, choices; None removes a key)."""
        return type(self).from_dict(merged(self.source, override))

    def to_dict(self, resolve_entities: bool = True) -> dict:
        """The dict form; with `resolve_entities`, entity parameters written as their `choices` (a planner file)."""
        out: dict[str, Any] = {"max_steps": self.max_steps}
        if self.min_steps != 1:
            out["min_steps"] = self.min_steps
        if not resolve_entities and self.entities:
            out["entities"] = {k: list(v) for k, v in self.entities.items()}
        if self.kinds:
            out["kinds"] = {k: list(v) for k, v in self.kinds.items()}
        out["actions"] = {name: spec_dict(spec, resolve_entities) for name, spec in self.actions.items()}
        if self.subtasks:
            out["subtasks"] = {name: spec_dict(spec, resolve_entities) for name, spec in self.subtasks.items()}
        return out

    # ------------------------------------------------------------------ reading

    def describe(self) -> str:
        """The allowed actions as one prompt line."""
        return ", ".join(a.signature() for a in self.actions.values())

    def signature(self, action: str) -> str:
        """`move_to(x, y)` for one action."""
        return self.actions[action].signature()

    def actions_of(self, kind: Optional[str]) -> tuple[str, ...]:
        """The actions an agent of `kind` may call (every action when the schema gives no kinds or kind is None)."""
        if kind is None or not self.kinds:
            return tuple(self.actions)
        return self.kinds.get(kind, ())

    def names_self(self) -> bool:
        """True when a parameter may not name the agent the plan is for (plans then depend on the agent)."""
        return any(p.not_self for a in self.actions.values() for p in a.parameters.values())

    def allows(self, step: Step, agent: Optional[str]) -> bool:
        """False when `step` names `agent` where a `not_self` parameter may not (None: the agent is not known)."""
        spec = self.actions.get(step.action)
        return spec is None or all(p.allows(step.parameters.get(n), agent) for n, p in spec.parameters.items()
                                   if n in step.parameters)

    def json_schema(self, max_steps: Optional[int] = None, agent: Optional[str] = None) -> dict:
        """JSON Schema of a plan `{"plan": [step, ...]}` (constrained decoding, a server's structured output).

        A server that enforces it can only write plans `check_plan` accepts (at most `max_steps` steps, else the
        schema's; for `agent`, when given).
        """
        steps = _call_schemas(self.actions, "action", agent)
        limit = max_steps or self.max_steps
        return {"type": "object", "additionalProperties": False, "required": ["plan"],
                "properties": {"plan": {"type": "array", "items": {"anyOf": steps},
                                        "minItems": min(self.min_steps, limit), "maxItems": limit}}}

    def recap_json_schema(self, agent: Optional[str] = None, composites: bool = True, max_items: int = 0) -> dict:
        """JSON Schema of a ReCAP answer `{"think": T, "subtasks": [...]}` (plan_parser.parse_recap): skill calls and,
        with `composites`, `{"subtask": ..., "parameters": ...}` of the schema's subtasks; at most `max_items` (0:
        max_steps)."""
        items = _call_schemas(self.actions, "action", agent)
        if composites:
            items += _call_schemas(self.subtasks, "subtask", agent)
        return {"type": "object", "additionalProperties": False, "required": ["think", "subtasks"],
                "properties": {"think": {"type": "string", "maxLength": MAX_TEXT_CHARS},
                               "subtasks": {"type": "array", "items": {"anyOf": items},
                                            "maxItems": max_items or self.max_steps}}}

    # ------------------------------------------------------------------ validation

    def check_step(self, action: Any, parameters: Any, index: int = 0, kind: Optional[str] = None,
                   agent: Optional[str] = None) -> Step:
        """Step `index` (`action` with `parameters`) validated for an agent of `kind` (for `agent`, when given: its
        own id refused where a parameter is `not_self`); PlanError if not."""
        if not isinstance(action, str) or action not in self.actions:
            raise PlanError(Fault.UNKNOWN_SKILL, f"step {index}: {shorten(repr(action))} is not one of "
                                                 f"{sorted(self.actions)}", index)
        if action not in self.actions_of(kind):
            raise PlanError(Fault.SKILL_NOT_FOR_KIND, f"step {index}: a {kind} agent cannot {action}", index)
        if parameters is None:
            parameters = {}
        if not isinstance(parameters, Mapping):
            raise PlanError(Fault.BAD_PARAMETERS, f"step {index}: parameters of {action} are not an object", index)
        spec = self.actions[action]
        unknown = [k for k in parameters if k not in spec.parameters]
        if unknown:
            raise PlanError(Fault.UNKNOWN_PARAMETER, f"step {index}: {action} has no parameter "
                                                     f"{shorten(str(unknown[0]))}", index, str(unknown[0]))
        out: dict[str, Any] = {}
        for name, p in spec.parameters.items():
            if name not in parameters:
                if p.required:
                    raise PlanError(Fault.MISSING_PARAMETER, f"step {index}: {action} needs '{name}'", index, name)
                continue
            out[name] = _checked(index, action, name, parameters[name], p)
            if not p.allows(out[name], agent):
                raise PlanError(Fault.NAMES_SELF, f"step {index}: {action}.{name} names {agent} itself", index, name)
        return Step(action, out)

    def check(self, raw: Any, index: int = 0, kind: Optional[str] = None, agent: Optional[str] = None) -> Step:
        """Step `index` from its JSON form `{"action": ..., "parameters": {...}}`; PlanError if not valid."""
        if not isinstance(raw, Mapping):
            raise PlanError(Fault.NOT_A_STEP, f"step {index} is {type(raw).__name__}, not an object", index)
        return self.check_step(raw.get("action"), raw.get("parameters"), index, kind, agent)

    def check_subtask(self, raw: Any, index: int = 0) -> Step:
        """Composite subtask `index` from its JSON form `{"subtask": ..., "parameters": {...}}` (ReCAP), checked
        against the schema's `subtasks`; PlanError if not valid."""
        if not isinstance(raw, Mapping):
            raise PlanError(Fault.NOT_A_STEP, f"step {index} is {type(raw).__name__}, not an object", index)
        return self.subtask_schema().check_step(raw.get("subtask"), raw.get("parameters"), index)

    def subtask_schema(self) -> ActionSchema:
        """The composite subtasks as a schema of their own (their calls enumerated and checked like actions')."""
        return ActionSchema(self.subtasks, self.max_steps, 1, self.entities)

    def check_plan(self, raw_steps: Sequence[Any], kind: Optional[str] = None, max_steps: Optional[int] = None,
                   allow_empty: bool = False, agent: Optional[str] = None) -> list[Step]:
        """A whole plan (of `agent`, when given) from the steps' JSON forms: every step valid, 1 (0 with
        `allow_empty`) to `max_steps` (the schema's by default) of them; PlanError for the first problem."""
        return self._plan(raw_steps, lambda i, raw: self.check(raw, i, kind, agent), max_steps, allow_empty)

    def plan_from_pairs(self, pairs: Sequence[tuple[str, str]], kind: Optional[str] = None,
                        max_steps: Optional[int] = None, allow_empty: bool = False,
                        agent: Optional[str] = None) -> list[Step]:
        """A whole plan (of `agent`, when given) from a message's (action, parameters_json) pairs; InvalidInput (a
        PlanError, or the message-bounds reasons of `check_id` / `parse_json_object`) for the first problem."""
        def one(index: int, pair: tuple[str, str]) -> Step:
            action, parameters_json = pair
            check_id("action", action)
            if action in self.actions and action not in self.actions_of(kind):
                raise PlanError(Fault.SKILL_NOT_FOR_KIND, f"step {index}: a {kind} agent cannot {action}", index)
            if action not in self.actions:
                return self.check_step(action, {}, index, kind)   # unknown: refused before its parameters are read
            return self.check_step(action, parse_json_object("parameters_json", parameters_json), index, kind, agent)

        return self._plan(pairs, one, max_steps, allow_empty)

    def _plan(self, items: Sequence[Any], one, max_steps: Optional[int], allow_empty: bool) -> list[Step]:
        limit = max_steps or self.max_steps
        if not items and not allow_empty:
            raise PlanError(Fault.EMPTY_PLAN, "the plan has no steps")
        if len(items) > limit:
            raise PlanError(Fault.LONG_PLAN, f"the plan has {len(items)} steps (at most {limit})")
        return [one(i, item) for i, item in enumerate(items)]


def _call_schemas(specs: Mapping[str, ActionSpec], key: str, agent: Optional[str]) -> list[dict]:
    """JSON Schema of each call of `specs` as `{key: name, "parameters": {...}}` (for `agent`, when given); a call
    with a required parameter left without values for the agent is left out."""
    out = []
    for a in specs.values():
        params = {n: p.json_schema(agent) for n, p in a.parameters.items()}
        required = [n for n, p in a.parameters.items() if p.required]
        if any(params[n].get("enum") == [] for n in required):
            continue  # no value is left for this agent (yield_to in a one-drone scenario)
        out.append({"type": "object", "additionalProperties": False, "required": [key, "parameters"],
                    "properties": {key: {"const": a.name},
                                   "parameters": {"type": "object", "additionalProperties": False,
                                                  "properties": params, "required": required}}})
    return out


def step_from_message(action: str, parameters_json: str) -> Step:
    """A step read from a message's (action, parameters_json), bounds-checked (`check_id`, `parse_json_object`)
    but not against a schema: for an executor whose skills are defined elsewhere (an instruction table)."""
    return Step(check_id("action", action), parse_json_object("parameters_json", parameters_json))


def _checked(index: int, action: str, name: str, value: Any, p: ParameterSpec) -> Any:
    where = f"step {index}: {action}.{name}"
    if isinstance(value, bool) and p.type != "boolean" or not isinstance(value, TYPES[p.type]):
        raise PlanError(Fault.BAD_PARAMETER_TYPE, f"{where} must be a {p.type}", index, name)
    if p.type == "number":
        value = float(value)
        if not math.isfinite(value):
            raise PlanError(Fault.BAD_PARAMETER_VALUE, f"{where} is not finite", index, name)
    if p.type in ("number", "integer") and (
            p.min is not None and (value <= p.min if p.exclusive_min else value < p.min)
            or p.max is not None and (value >= p.max if p.exclusive_max else value > p.max)):
        raise PlanError(Fault.OUT_OF_RANGE, f"{where}={value} is outside {'(' if p.exclusive_min else '['}"
                                            f"{p.min}, {p.max}{')' if p.exclusive_max else ']'}", index, name)
    if p.choices is not None:
        if value not in p.choices:
            raise PlanError(Fault.UNKNOWN_CHOICE, f"{where}={shorten(str(value))} is not a known value", index, name)
    elif p.entity is not None and len(value) > MAX_ID_CHARS:
        raise PlanError(Fault.BAD_PARAMETER_VALUE, f"{where} is longer than an id ({MAX_ID_CHARS} characters)",
                        index, name)
    return value
