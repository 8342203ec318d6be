"""Parse planner output into skill calls and validate them against the agent's action schema.

`parse_plan` reads the JSON plan forms (prose and fences around them allowed), respells ids written another way when
asked, and raises nothing but `PlanError` with a reason (docs/planner.md, "Plan parsing").
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional

from brace_common.action_schema import PLANNER_REASONS, ActionSchema, Fault, PlanError, Step, Subtask
from brace_common.validation import MAX_TEXT_CHARS, json_depths
from brace_memory.recap import subtask_limit

THINK_KEY, SUBTASKS_KEY, COMPOSITE_KEY = "think", "subtasks", "subtask"
"""The keys of a ReCAP answer `{"think": T, "subtasks": [step | {"subtask": name, "parameters": {...}}, ...]}`."""


def first_json(text: str) -> Any:
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
        first_json(text)
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


def spelling(value: str) -> str:
    """What an id spells: its letters and digits, lower case ('Agent-1', 'agent1' and 'agent_1' spell alike)."""
    return re.sub(r"[^0-9a-z]", "", value.lower())


def respell(items: list, schema: ActionSchema, respelled: list[str]) -> list:
    """`items` (raw steps) with each string parameter value outside its choices replaced by the one choice it
    spells; each replacement appended to `respelled` as 'old -> new'. Anything else is left for validation."""
    out = []
    for item in items:
        action = item.get("action") if isinstance(item, dict) else None
        spec = schema.actions.get(action) if isinstance(action, str) else None
        params = item.get("parameters") if spec is not None else None
        if not isinstance(params, dict):
            out.append(item)
            continue
        fixed = dict(params)
        for name, value in params.items():
            p = spec.parameters.get(name)
            if p is None or p.choices is None or not isinstance(value, str) or value in p.choices:
                continue
            same = [c for c in p.choices if isinstance(c, str) and spelling(c) == spelling(value)]
            if len(same) == 1 and spelling(value):
                fixed[name] = same[0]
                respelled.append(f"{value} -> {same[0]}")
        out.append({**item, "parameters": fixed})
    return out


def parse_plan(text: Any, schema: ActionSchema, respelled: Optional[list[str]] = None,
               agent: Optional[str] = None) -> list[Step]:
    """Validated steps from planner output (a plan of `agent`, when given: its own id refused where the schema says
    `not_self`); PlanError (and nothing else) on any problem. With a `respelled` list, ids spelled another way are
    replaced first (see `respell`) and each replacement is appended to it."""
    try:
        if not isinstance(text, str):
            raise PlanError("not_text", f"planner output is {type(text).__name__}")
        items = _step_list(first_json(text))
        return schema.check_plan(items if respelled is None else respell(items, schema, respelled), agent=agent)
    except PlanError as exc:
        raise exc.renamed(PLANNER_REASONS) from None
    except Exception as exc:  # noqa: BLE001 - the contract: malformed output is a PlanError, never a crash
        raise PlanError("unparseable", f"{type(exc).__name__}: {exc}") from None


def parse_recap(text: Any, schema: ActionSchema, agent: Optional[str] = None) -> tuple[str, list[Subtask]]:
    """A ReCAP call's (T, S) from planner output `{"think": T, "subtasks": [...]}`: each subtask a skill call of the
    schema's actions (primitive) or `{"subtask": name, "parameters": {...}}` of its `subtasks` (composite); S may be
    empty (the frame is done), at most the schema's max_steps long; T is text (absent: empty). PlanError (and
    nothing else) on any problem."""
    try:
        if not isinstance(text, str):
            raise PlanError("not_text", f"planner output is {type(text).__name__}")
        value = first_json(text)
        if not isinstance(value, dict) or not isinstance(value.get(SUBTASKS_KEY), list):
            raise PlanError("bad_shape", 'expected {"think": ..., "subtasks": [...]}')
        thought = value.get(THINK_KEY, "")
        if not isinstance(thought, str) or len(thought) > MAX_TEXT_CHARS:
            raise PlanError("bad_shape", f"the thought is not a text of at most {MAX_TEXT_CHARS} characters")
        items, limit = value[SUBTASKS_KEY], subtask_limit(schema.max_steps)
        if len(items) > limit:
            raise PlanError(Fault.LONG_PLAN, f"the plan has {len(items)} subtasks (at most {limit})")
        out = []
        for index, item in enumerate(items):
            if isinstance(item, dict) and COMPOSITE_KEY in item and "action" not in item:
                out.append(Subtask(schema.check_subtask(item, index), composite=True))
            else:
                out.append(Subtask(schema.check(item, index, agent=agent)))
        return thought.strip(), out
    except PlanError as exc:
        raise exc.renamed(PLANNER_REASONS) from None
    except Exception as exc:  # noqa: BLE001 - the contract: malformed output is a PlanError, never a crash
        raise PlanError("unparseable", f"{type(exc).__name__}: {exc}") from None
