"""OmniAct's LLM summariser of episodic records (OmniAct Sec. 3.4, App. H), off the callers' threads.

`SummaryWorker` asks the injected summariser for a template record's fields on one background thread with a bounded
queue, validates the answer (`summary_fields`) and replaces the record's fields only while it still holds the template
(docs/memory.md, "The LLM summariser").
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Optional

from brace_common.counters import Counters, Health

from .episodic import LIST_LIMITS, MAX_FIELD_CHARS, RECORD_KEYS, TEXT_LIMITS, Segment, cut
from .records import MemoryRecord

SUMMARY_QUEUE = 16
"""Summaries that wait for the worker by default; beyond it the oldest pending one is dropped."""
CLOSE_TIMEOUT_S = 5.0
"""How long `close` waits for the worker to stop (a summariser hears the cancel and should end well within it)."""
MAX_SOURCE_ENTRIES = 48
"""The segment's entries a prompt quotes at most: the first 8 and the newest 40 (the rest are counted, not quoted)."""
OUTCOMES = ("applied", "invalid", "failed", "late", "dropped")
"""What became of a requested summary (the worker's counts): its fields replaced the template's; the answer was
not a summary (counted also by reason, `invalid.<reason>`); no answer (`failed.<reason>`: the server, its timeout,
a cancel); the record was no longer the template when the summary came (evicted, cleared, rewritten, memory
closed); never asked (the queue was full, or memory closed first)."""

SYSTEM_PROMPT = (
    "You are an episodic interaction log writer for an embodied planner. Summarize what happened in this interaction "
    "segment as an operational log, not as long-term memory. Preserve chronology, task context, concrete "
    "observations, skills, actions, useful parameters, outcomes, errors, and unresolved questions. Do not infer "
    "durable preferences unless one was explicitly stated; if present, keep it as evidence rather than as the main "
    "focus. Return strict JSON with keys: " + ", ".join(RECORD_KEYS) + ". topic, request and outcome are strings; "
    "actions, observations, open_questions and evidence are lists of short strings.")
"""OmniAct App. H's episodic system prompt, its keys adapted to a record's (and its tools to skills)."""

USER_PROMPT = """Level: Episodic
Agent: {agent}
Trigger: {boundary}
Suggested topic: {boundary}
Source step range: t={first}-{last}

Write this as an episodic interaction log. Prioritize the step-by-step task flow, the request, the agent's skills and \
their parameters, the execution result, and concrete feedback. Keep every string under {chars} characters and at \
most {actions} actions.

Request: {request}

Source text:
{source}"""
"""OmniAct App. H's episodic user prompt template (Device -> Agent, turn range -> step range)."""


class SummaryInvalid(ValueError):
    """The summariser answered, but not with a summary (no JSON object, a key missing, a wrong type, an empty
    topic or outcome); `reason` labels the count."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


class SummaryFailed(Exception):
    """The summariser gave no answer (server error, timeout, cancel); `reason` labels the count."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass(frozen=True)
class SummaryRequest:
    """A template record just written and the segment it folded (the segment is no longer written to)."""

    record: MemoryRecord
    segment: Segment

    @property
    def boundary(self) -> str:
        """What closed the segment (task done, failure, preemption, plan change, handoff, segment full)."""
        return str(self.record.fields.get("boundary", self.record.fields.get("topic", "")))


Summariser = Callable[[SummaryRequest, Callable[[], bool]], Any]
"""(request, cancelled) -> the summary as parsed JSON (validated by `summary_fields`); raises SummaryInvalid or
SummaryFailed. `cancelled()` turns true when memory closes: the summariser should give up then."""


def source_lines(segment: Segment, most: int = MAX_SOURCE_ENTRIES) -> list[str]:
    """The segment's entries as the prompt quotes them, in arrival order (`t=<step> <kind>: <text>`), at most `most`:
    the first eighth and the newest, with a line counting those left out between them."""
    lines = [f"t={step} {kind}: {text}" for step, kind, text in segment.entries]
    if len(lines) <= most:
        return lines
    head = most // 8
    return [*lines[:head], f"({len(lines) - most} entries left out)", *lines[len(lines) - (most - head):]]


def summary_prompt(request: SummaryRequest) -> tuple[str, str]:
    """(system, user) messages asking for the summary of `request`'s segment (OmniAct App. H adapted)."""
    record = request.record
    user = USER_PROMPT.format(agent=record.agent_id, boundary=request.boundary, first=record.first_step,
                              last=record.last_step, chars=MAX_FIELD_CHARS, actions=LIST_LIMITS["actions"][0],
                              request=record.fields.get("request") or "(none given)",
                              source="\n".join(source_lines(request.segment)))
    return SYSTEM_PROMPT, user


def summary_fields(raw: Any, template: Mapping[str, Any]) -> dict[str, Any]:
    """A record's fields from a summariser's answer `raw` (parsed JSON), within the template's limits; SummaryInvalid
    unless it is an object with every one of RECORD_KEYS, texts as strings, lists as lists of strings (a lone string
    is one item, null an empty list or request), and a topic and an outcome. Other keys are ignored; every string is
    put on one line and cut to TEXT_LIMITS / LIST_LIMITS; `boundary` is the template's."""
    if not isinstance(raw, dict):
        raise SummaryInvalid("not_object", f"the summary is a {type(raw).__name__}, not a JSON object")
    missing = [key for key in RECORD_KEYS if key not in raw]
    if missing:
        raise SummaryInvalid("missing_key", f"the summary has no {', '.join(missing)}")
    fields: dict[str, Any] = {}
    for key, chars in TEXT_LIMITS.items():
        value = "" if raw[key] is None and key == "request" else raw[key]
        if not isinstance(value, str):
            raise SummaryInvalid("wrong_type", f"{key} is a {type(value).__name__}, not a string")
        fields[key] = cut(value, chars)
    for key, (most, chars) in LIST_LIMITS.items():
        value = raw[key]
        value = [] if value is None else [value] if isinstance(value, str) else value
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise SummaryInvalid("wrong_type", f"{key} is not a list of strings")
        fields[key] = [cut(item, chars) for item in value if item.strip()][:most]
    for key in ("topic", "outcome"):
        if not fields[key]:
            raise SummaryInvalid("empty", f"the summary's {key} is empty")
    return {**{key: fields[key] for key in RECORD_KEYS},
            "boundary": str(template.get("boundary", template.get("topic", "")))}


class SummaryWorker:
    """One background thread that summarises requests from a bounded queue and hands each valid summary to `apply`.

    `apply(request, fields) -> bool` replaces the record's fields when it still holds the template (False: late).
    `submit` never blocks; `close` stops the thread within a bound. `counts` holds `requested`, OUTCOMES and the
    invalid / failed reasons; `log` hears why a summary was not applied (throttle it: a small model fails often).
    """

    def __init__(self, summarise: Summariser, apply: Callable[[SummaryRequest, dict[str, Any]], bool],
                 queue_size: int = SUMMARY_QUEUE, log: Optional[Callable[[str], None]] = None) -> None:
        if queue_size < 1:
            raise ValueError(f"queue_size {queue_size} must be at least 1")
        self.summarise = summarise
        self.apply = apply
        self.queue_size = queue_size
        self.log = log
        self._queue: deque[SummaryRequest] = deque()
        self._cond = threading.Condition()
        self._busy = False
        self._stop = threading.Event()
        self._counts = Counters(("requested", *OUTCOMES))  # and `<outcome>.<reason>`, declared as they come
        self._thread = threading.Thread(target=self._run, name="episodic-summariser", daemon=True)
        self._thread.start()

    def submit(self, request: SummaryRequest) -> None:
        """Queue a summary of `request` (never blocks; when the queue is full, the oldest pending one is dropped)."""
        with self._cond:
            self._counts["requested"] += 1
            if self._stop.is_set():
                self._counts["dropped"] += 1
                return
            if len(self._queue) >= self.queue_size:
                self._queue.popleft()
                self._counts["dropped"] += 1
            self._queue.append(request)
            self._cond.notify_all()

    @property
    def pending(self) -> int:
        """Summaries queued and not yet started."""
        with self._cond:
            return len(self._queue)

    @property
    def counts(self) -> dict[str, int]:
        """requested, applied, invalid, failed, late, dropped, `pending`, and `invalid.<reason>` / `failed.<reason>`."""
        with self._cond:
            return {**self._counts, "pending": len(self._queue)}

    def health(self, prefix: str = "") -> Health:
        """`counts` as values (each name after `prefix`)."""
        return Health({prefix + k: v for k, v in self.counts.items()})

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no summary is queued or running, at most `timeout_s`; whether it is so."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout_s)

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> bool:
        """Stop the worker: pending summaries are dropped (counted), a running one is cancelled; whether the thread
        ended within `timeout_s` (a summariser that ignores the cancel is left to end on its own, its answer late)."""
        with self._cond:
            self._stop.set()
            self._counts["dropped"] += len(self._queue)
            self._queue.clear()
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._stop.is_set())
                if self._stop.is_set():
                    self._busy = False
                    self._cond.notify_all()
                    return
                request = self._queue.popleft()
                self._busy = True
            outcome = self._summarise(request)
            with self._cond:
                if "." in outcome:  # `<outcome>.<reason>`: a reason the summariser gave, counted with its outcome
                    self._counts.declare(outcome)
                    self._counts[outcome.split(".", 1)[0]] += 1
                self._counts[outcome] += 1
                self._busy = False
                self._cond.notify_all()

    def _summarise(self, request: SummaryRequest) -> str:
        """One summary asked, validated and applied; what became of it (an outcome, or `<outcome>.<reason>`)."""
        where = f"episodic summary of {request.record.agent_id}/{request.record.key}"
        try:
            fields = summary_fields(self.summarise(request, self._stop.is_set), request.record.fields)
            if self._stop.is_set() or not self.apply(request, fields):
                return "late"
            return "applied"
        except SummaryInvalid as exc:
            self._say(f"{where}: the template record stays, the summary is invalid ({exc})")
            return f"invalid.{exc.reason}"
        except SummaryFailed as exc:
            self._say(f"{where}: the template record stays, the summariser failed ({exc})")
            return f"failed.{exc.reason}"
        except Exception as exc:  # noqa: BLE001 - a summariser's or the store's error never ends the worker
            self._say(f"{where}: the template record stays ({type(exc).__name__}: {exc})")
            return "failed.error"

    def _say(self, text: str) -> None:
        if self.log is not None:
            try:
                self.log(text)
            except Exception:  # noqa: BLE001 - a logger that fails must not end the worker
                pass
