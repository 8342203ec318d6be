"""Input validation at the message boundary: the bounds, caps and syntax every node applies before its core sees a message.

A message from the graph can hold anything its type allows: a 100 KB agent id,
a step of 2^64 - 1, NaN, JSON nested ten thousand deep. Each package's convert
module checks every field it reads with these helpers and raises `InvalidInput`
naming the field and a counter key (`reason`); the node counts rejections by
reason on /diagnostics and logs them throttled with ids shortened
(`Rejections`). Nothing malformed reaches a core, so no core arithmetic sees a
value it was not written for.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any, Optional

from .counters import Health

MAX_ID_CHARS = 128
"""Agent, trigger, decision, call and plan ids."""
MAX_TEXT_CHARS = 8192
"""A context entry's text, a detail or error string."""
MAX_JSON_CHARS = 4096
"""A plan step's parameters as JSON."""
MAX_JSON_DEPTH = 8
"""Nesting of a plan step's parameters (objects and arrays)."""
MAX_STEP = 2**31 - 1
"""Controller steps (far beyond any episode; keeps every step difference a small integer)."""
MAX_STEP_JUMP = 100_000
"""How far one message may move an agent's step forward from the latest seen: a larger jump is rejected."""
MAX_COUNT = 1_000_000
MAX_RECAP_DEPTH = 16
"""The deepest ReCAP frame stack a planner may keep (recap_max_depth) and a trigger may name (depth)."""
"""Counters carried in messages (consecutive failures, tokens)."""
MAX_LOG_ID_CHARS = 48
"""Ids are shortened to this in logs."""
ID_PATTERN = re.compile(r"[A-Za-z0-9_.:/@-]+")
"""What an id may contain (matched whole: `fullmatch`, so no trailing newline slips through `$`)."""
MAX_AGENT_ID_CHARS = 64
"""An agent id's length (it names ROS namespaces and files)."""
AGENT_ID_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
"""What an agent id may contain: a ROS name token, so it can name a namespace or a file (no '/', '.', '..')."""


class InvalidInput(ValueError):
    """A message field that is out of bounds; `reason` is the counter key, the message names the field."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def shorten(text: str, limit: int = MAX_LOG_ID_CHARS) -> str:
    """`text` cut to `limit` characters for a log line ('...' and its length when cut)."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


def check_id(field: str, value: str, allow_empty: bool = False) -> str:
    """An id: non-empty (unless allowed), at most MAX_ID_CHARS, ID_PATTERN characters."""
    if not value:
        if allow_empty:
            return value
        raise InvalidInput(f"empty_{field}", f"{field} is empty")
    if len(value) > MAX_ID_CHARS:
        raise InvalidInput(f"long_{field}", f"{field} has {len(value)} characters (at most {MAX_ID_CHARS})")
    if not ID_PATTERN.fullmatch(value):
        raise InvalidInput(f"bad_{field}", f"{field} {shorten(value)!r} has characters outside [A-Za-z0-9_.:/@-]")
    return value


def check_agent_id(field: str, value: str) -> str:
    """An agent id: a letter, then letters, digits and '_' (a ROS name token), at most MAX_AGENT_ID_CHARS."""
    if not value:
        raise InvalidInput(f"empty_{field}", f"{field} is empty")
    if len(value) > MAX_AGENT_ID_CHARS:
        raise InvalidInput(f"long_{field}", f"{field} has {len(value)} characters (at most {MAX_AGENT_ID_CHARS})")
    if not AGENT_ID_PATTERN.fullmatch(value):
        raise InvalidInput(f"bad_{field}", f"{field} {shorten(value)!r} is not a letter followed by letters, digits "
                                           "and '_' (an agent id names namespaces and files)")
    return value


def check_text(field: str, value: str, limit: int = MAX_TEXT_CHARS, allow_empty: bool = True) -> str:
    """A free text of at most `limit` characters (non-blank unless `allow_empty`)."""
    if len(value) > limit:
        raise InvalidInput(f"long_{field}", f"{field} has {len(value)} characters (at most {limit})")
    if not allow_empty and not value.strip():
        raise InvalidInput(f"empty_{field}", f"{field} is empty")
    return value


def check_int(field: str, value: int, low: int, high: int) -> int:
    """An integer within [low, high]."""
    value = int(value)
    if not low <= value <= high:
        raise InvalidInput(f"range_{field}", f"{field} {shorten(str(value), 24)} is outside [{low}, {high}]")
    return value


def check_float(field: str, value: float, low: float = -math.inf, high: float = math.inf) -> float:
    """A finite float within [low, high]."""
    value = float(value)
    if not math.isfinite(value) or not low <= value <= high:
        raise InvalidInput(f"range_{field}", f"{field} {value} is not a finite number in [{low}, {high}]")
    return value


def check_step(field: str, value: int, latest: Optional[int] = None) -> int:
    """A controller step: at most MAX_STEP, and at most MAX_STEP_JUMP past `latest` (the latest seen)."""
    value = check_int(field, value, 0, MAX_STEP)
    if latest is not None and value > latest + MAX_STEP_JUMP:
        raise InvalidInput(f"jump_{field}", f"{field} {value} jumps more than {MAX_STEP_JUMP} past {latest}")
    return value


def json_depths(text: str, prose_first: bool = False) -> Iterator[int]:
    """The nesting depth after each bracket of JSON `text`, brackets inside strings skipped.

    With `prose_first`, what comes before the first opening bracket is prose (a model's chatter before its JSON):
    quotes and closing brackets there are not JSON.
    """
    depth = 0
    in_string = escaped = False
    started = not prose_first
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = started
        elif ch in "{[":
            depth += 1
            started = True
            yield depth
        elif ch in "}]" and started:
            depth -= 1
            yield depth


def json_depth(text: str) -> int:
    """The deepest nesting of objects and arrays in JSON `text` (strings respected), without parsing it."""
    return max(json_depths(text), default=0)


def parse_json_object(field: str, text: str, max_chars: int = MAX_JSON_CHARS,
                      max_depth: int = MAX_JSON_DEPTH) -> dict[str, Any]:
    """A JSON object of at most `max_chars` and `max_depth` levels ('' = {}); InvalidInput otherwise."""
    if not text:
        return {}
    if len(text) > max_chars:
        raise InvalidInput(f"long_{field}", f"{field} has {len(text)} characters (at most {max_chars})")
    if json_depth(text) > max_depth:
        raise InvalidInput(f"deep_{field}", f"{field} nests deeper than {max_depth} levels")
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise InvalidInput(f"bad_{field}", f"{field} is not JSON: {shorten(str(exc), 80)}") from None
    if not isinstance(value, dict):
        raise InvalidInput(f"bad_{field}", f"{field} is not a JSON object")
    return value


class Rejections:
    """Rejected inputs of a node, counted by reason (for /diagnostics) and logged throttled with ids shortened."""

    def __init__(self, logger=None, throttle_s: float = 1.0):
        self.logger = logger
        self.throttle_s = throttle_s
        self.counts: Counter[str] = Counter()
        self._reported = 0  # the total at the last news()

    def reject(self, what: str, exc: ValueError, ident: str = "") -> None:
        """Count one rejected `what` (e.g. 'trigger') by the exception's reason; log it."""
        reason = getattr(exc, "reason", "malformed")
        self.counts[f"{what}.{reason}"] += 1
        if self.logger is not None:
            name = f" '{shorten(ident)}'" if ident else ""
            self.logger.warning(f"dropped {what}{name}: {shorten(str(exc), 200)}", throttle_duration_sec=self.throttle_s)

    @property
    def total(self) -> int:
        """Inputs rejected so far."""
        return sum(self.counts.values())

    def news(self) -> Health:
        """A warning naming the inputs rejected since the last call (a diagnostics tick's news)."""
        total, reported = self.total, self._reported
        self._reported = total
        return Health(warnings=(f"{total - reported} inputs rejected",) if total > reported else ())

    def health(self, prefix: str = "rejected.") -> Health:
        """The rejections per kind and reason as values (after `prefix`); any rejection is a warning."""
        counts = dict(self.counts)
        return Health({prefix + k: v for k, v in sorted(counts.items())}, tuple(prefix + k for k, v in counts.items() if v))
