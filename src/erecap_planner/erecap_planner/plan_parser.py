"""Parse planner output into skill calls and validate them against the agent's action schema.

Plans are JSON skill calls (OmniAct App. C/G style): one `{"action": ..., "parameters": {...}}`
object, a list of them, `{"plan": [...]}`, or `{"next_step": {...} | null}`,
possibly wrapped in prose or a ```json fence. Nothing is ever executed as code.
Every failure is a `PlanError` with a reason; `parse_plan` never raises
anything else, whatever the text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

from brace_common.validation import json_depths


class PlanError(ValueError):
    """Planner output that is not a valid plan; `reason` is a short machine-readable cause."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of a skill: its JSON type and, optionally, the allowed values."""

    type: str = "string"                 # string | number | integer | boolean
    choices: Optional[tuple] = None
    required: bool = True


@dataclass(frozen=True)
class ActionSpec:
    """A skill the agent may call."""

    name: str
    params: dict[str, ParamSpec] = field(default_factory=dict)

    def signature(self) -> str:
        """`name(p1, p2)` as shown to the planner."""
        return f"{self.name}({', '.join(self.params)})"


@dataclass(frozen=True)
class ActionSchema:
    """The allowed-action schema of an agent."""

    actions: dict[str, ActionSpec]
    max_steps: int = 16
    min_steps: int = 1   # constrained decoding writes at least this many steps (a task whose plans have a known shape)

    @classmethod
    def from_dict(cls, raw: dict) -> ActionSchema:
        """{'max_steps': n, 'min_steps': m, 'actions': {name: {param: {type, choices, required}}}}."""
        actions = {}
        for name, params in (raw.get("actions") or {}).items():
            specs = {}
            for pname, p in (params or {}).items():
                p = p or {}
                choices = tuple(p["choices"]) if p.get("choices") is not None else None
                specs[pname] = ParamSpec(p.get("type", "string"), choices, bool(p.get("required", True)))
            actions[name] = ActionSpec(name, specs)
        if not actions:
            raise ValueError("an action schema needs at least one action")
        max_steps, min_steps = int(raw.get("max_steps", 16)), int(raw.get("min_steps", 1))
        if not 1 <= min_steps <= max_steps:
            raise ValueError(f"min_steps {min_steps} must be in [1, max_steps = {max_steps}]")
        return cls(actions, max_steps, min_steps)

    def describe(self) -> str:
        """The allowed actions as one prompt line."""
        return ", ".join(a.signature() for a in self.actions.values())

    def json_schema(self, max_steps: Optional[int] = None) -> dict:
        """JSON Schema of a plan `{"plan": [step, ...]}` in this schema (structured output of a planner server).

        A server that enforces it can only write plans `parse_plan` accepts (the step count at most
        `max_steps`, else the schema's).
        """
        def param(spec: ParamSpec) -> dict:
            out: dict[str, Any] = {"type": spec.type if spec.type in _TYPES else "string"}
            if spec.choices is not None:
                out["enum"] = list(spec.choices)
            return out

        steps = [{"type": "object", "additionalProperties": False, "required": ["action", "parameters"],
                  "properties": {"action": {"const": a.name},
                                 "parameters": {"type": "object", "additionalProperties": False,
                                                "properties": {n: param(p) for n, p in a.params.items()},
                                                "required": [n for n, p in a.params.items() if p.required]}}}
                 for a in self.actions.values()]
        return {"type": "object", "additionalProperties": False, "required": ["plan"],
                "properties": {"plan": {"type": "array", "items": {"anyOf": steps},
                                        "minItems": min(self.min_steps, max_steps or self.max_steps),
                                        "maxItems": max_steps or self.max_steps}}}


@dataclass(frozen=True)
class Step:
    """One validated skill call."""

    action: str
    parameters: dict[str, Any]

    def parameters_json(self) -> str:
        """Parameters as canonical JSON."""
        return json.dumps(self.parameters, sort_keys=True)


_TYPES = {"string": (str,), "number": (int, float), "integer": (int,), "boolean": (bool,)}


def _first_json(text: str) -> Any:
    """The first JSON object or array in `text` (after any ``` fence).

    A value the text ends inside (output cut at the token limit) is an error, not the first complete value
    nested in it: '{"plan": [step 1, step 2, ...' is not the one-step plan [step 1].
    """
    decoder = json.JSONDecoder()
    for i, ch in enumerate(text):
        if ch in "{[":
            try:
                value, _ = decoder.raw_decode(text, i)
                return value
            except (json.JSONDecodeError, RecursionError):
                if 0 not in json_depths(text[i:]):
                    raise PlanError("truncated", "the output ends inside its JSON (cut at the token limit?)") from None
                continue
    raise PlanError("no_json", "no JSON object or array in the output")


def holds_json(text: str) -> bool:
    """True when `text` holds a complete JSON object or array (what `parse_plan` reads first)."""
    try:
        _first_json(text)
    except PlanError:
        return False
    return True


def _step_list(value: Any) -> list:
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        if "plan" in value:
            return _step_list(value["plan"])
        if "next_step" in value:
            nxt = value["next_step"]
            return [] if nxt is None else _step_list(nxt)
        if "action" in value:
            return [value]
    raise PlanError("bad_shape", "expected a step, a list of steps, {'plan': [...]} or {'next_step': ...}")


def _validate_step(raw: Any, schema: ActionSchema) -> Step:
    if not isinstance(raw, dict):
        raise PlanError("bad_step", f"step is {type(raw).__name__}, not an object")
    action = raw.get("action")
    if not isinstance(action, str) or action not in schema.actions:
        raise PlanError("unknown_action", f"{action!r} is not one of {sorted(schema.actions)}")
    params = raw.get("parameters", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise PlanError("bad_parameters", f"parameters of {action} are not an object")
    spec = schema.actions[action]
    unknown = set(params) - set(spec.params)
    if unknown:
        raise PlanError("unknown_parameter", f"{action} has no parameter(s) {sorted(map(str, unknown))}")
    for pname, pspec in spec.params.items():
        if pname not in params:
            if pspec.required:
                raise PlanError("missing_parameter", f"{action} needs '{pname}'")
            continue
        value = params[pname]
        types = _TYPES.get(pspec.type, (str,))
        if isinstance(value, bool) and pspec.type != "boolean" or not isinstance(value, types):
            raise PlanError("bad_parameter_type", f"{action}.{pname} must be {pspec.type}")
        if pspec.choices is not None and value not in pspec.choices:
            raise PlanError("hallucinated_value", f"{action}.{pname}={value!r} is not a known value")
    return Step(action, dict(params))


def parse_plan(text: Any, schema: ActionSchema) -> list[Step]:
    """Validated steps from planner output; PlanError (and nothing else) on any problem."""
    try:
        if not isinstance(text, str):
            raise PlanError("not_text", f"planner output is {type(text).__name__}")
        steps = [_validate_step(s, schema) for s in _step_list(_first_json(text))]
    except PlanError:
        raise
    except Exception as exc:  # noqa: BLE001 - the contract: malformed output is a PlanError, never a crash
        raise PlanError("unparseable", f"{type(exc).__name__}: {exc}") from None
    if not steps:
        raise PlanError("empty_plan", "the plan has no steps")
    if len(steps) > schema.max_steps:
        raise PlanError("too_long", f"{len(steps)} steps > max_steps {schema.max_steps}")
    return steps
