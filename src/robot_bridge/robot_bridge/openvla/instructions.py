"""From a plan step (skill + JSON parameters) to the language instruction the VLA is given (no ROS).

A template per skill (`pick=pick up the {object}`; named or positional placeholders) and an alias per id
(`cup_3=red cup`; default: underscores become spaces). Every problem is an `InstructionError` whose `reason` is
the counter key (rejected.plan.<reason>). The rules: docs/openvla_executor.md, "Parameters" and "Malformed plans".
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping, Sequence
from typing import Any

from brace_common.validation import InvalidInput

MAX_VALUE_CHARS = 64
"""A parameter value put into an instruction."""
_VALUE_PATTERN = re.compile(r"[A-Za-z0-9 _.:/@-]+")


class InstructionError(InvalidInput):
    """A plan step that cannot be turned into an instruction; `reason` is a short counter key."""


def parse_table(entries: Sequence[str], what: str) -> dict[str, str]:
    """A `name=value` list (a ROS string-array parameter) as a dict; ValueError naming `what` on a bad entry."""
    table: dict[str, str] = {}
    for entry in entries:
        name, sep, value = str(entry).partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise ValueError(f"{what}: entry '{entry}' is not 'name=value'")
        if name in table:
            raise ValueError(f"{what}: '{name}' is given twice")
        table[name] = value
    return table


def with_entries(entries: Sequence[str], overrides: Sequence[str]) -> list[str]:
    """`name=value` entries with those of `overrides` put in place of the entries of the same name (or added)."""
    names = {str(o).partition("=")[0].strip(): str(o) for o in overrides}
    out = [names.pop(str(e).partition("=")[0].strip(), str(e)) for e in entries]
    return out + list(names.values())


def _fields(template: str) -> list[str]:
    try:
        return [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as exc:
        raise ValueError(f"template '{template}': {exc}") from None


class InstructionTemplates:
    """The skill -> instruction template table, and the aliases of parameter values."""

    def __init__(self, templates: Mapping[str, str], aliases: Mapping[str, str] | None = None):
        if not templates:
            raise ValueError("the template table is empty")
        self.templates = dict(templates)
        self.aliases = dict(aliases or {})
        self._fields: dict[str, list[str]] = {}
        for skill, template in self.templates.items():
            fields = _fields(template)
            if any(not f or not (f.isidentifier() or f.isdigit()) for f in fields):
                raise ValueError(f"template '{template}' of '{skill}': placeholders must be {{name}} or {{0}}, {{1}}, ...")
            if {f.isdigit() for f in fields} == {True, False}:
                raise ValueError(f"template '{template}' of '{skill}' mixes named and positional placeholders")
            self._fields[skill] = fields

    @classmethod
    def from_entries(cls, templates: Sequence[str], aliases: Sequence[str] = ()) -> InstructionTemplates:
        """From `skill=template` and `id=words` lists (ValueError on a malformed entry or template)."""
        return cls(parse_table(templates, "instruction_templates"), parse_table(aliases, "object_aliases"))

    @property
    def skills(self) -> frozenset[str]:
        """The skills that have a template."""
        return frozenset(self.templates)

    def words(self, value: Any, name: str) -> str:
        """What the VLA reads for one parameter value: its alias, else the id with underscores as spaces."""
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise InstructionError("bad_parameter", f"parameter '{name}' is a {type(value).__name__}, not a name")
        text = str(value).strip()
        if not text or len(text) > MAX_VALUE_CHARS or not _VALUE_PATTERN.fullmatch(text):
            raise InstructionError("bad_parameter", f"parameter '{name}' value {text[:MAX_VALUE_CHARS]!r} is empty, "
                                   f"longer than {MAX_VALUE_CHARS} characters or not a plain name")
        return self.aliases.get(text, text.replace("_", " "))

    def instruction(self, action: str, parameters: Mapping[str, Any] | str) -> str:
        """The instruction for skill `action` with `parameters` (a dict or its JSON text); InstructionError if not."""
        if action not in self.templates:
            raise InstructionError("unknown_skill", f"no instruction template for skill '{action[:MAX_VALUE_CHARS]}' "
                                   f"(known: {sorted(self.templates)})")
        if isinstance(parameters, str):
            try:
                parameters = json.loads(parameters) if parameters.strip() else {}
            except (json.JSONDecodeError, RecursionError):
                raise InstructionError("bad_parameters_json", "the step's parameters are not JSON") from None
        if not isinstance(parameters, Mapping):
            raise InstructionError("bad_parameters_json", "the step's parameters are not a JSON object")
        fields = self._fields[action]
        values = list(parameters.items())
        if fields and fields[0].isdigit():
            needed = max(int(f) for f in fields) + 1
            if len(values) < needed:
                raise InstructionError("missing_parameter", f"'{action}' needs {needed} parameters, got {len(values)}")
            args = [self.words(v, k) for k, v in values[:needed]]
            return self.templates[action].format(*args)
        missing = [f for f in fields if f not in parameters]
        if missing:
            raise InstructionError("missing_parameter", f"'{action}' needs parameter(s) {missing}")
        return self.templates[action].format(**{f: self.words(parameters[f], f) for f in fields})
