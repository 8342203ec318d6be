"""Parse planner output into skill calls and validate them against the agent's action schema.

Plans are JSON skill calls (OmniAct App. C/G style): one `{"action": ..., "parameters": {...}}`
object, a list of them, `{"plan": [...]}`, or `{"next_step": {...} | null}`,
possibly wrapped in prose or a ```json fence. Nothing is ever executed as code.
Every failure is a `PlanError` with a reason; `parse_plan` never raises
anything else, whatever the text.
"""

from __future__ import annotations

import json
from typing import Any

from brace_common.action_schema import PLANNER_REASONS, ActionSchema, PlanError, Step
from brace_common.validation import json_depths


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


def parse_plan(text: Any, schema: ActionSchema) -> list[Step]:
    """Validated steps from planner output; PlanError (and nothing else) on any problem."""
    try:
        if not isinstance(text, str):
            raise PlanError("not_text", f"planner output is {type(text).__name__}")
        return schema.check_plan(_step_list(first_json(text)))
    except PlanError as exc:
        raise exc.renamed(PLANNER_REASONS) from None
    except Exception as exc:  # noqa: BLE001 - the contract: malformed output is a PlanError, never a crash
        raise PlanError("unparseable", f"{type(exc).__name__}: {exc}") from None
