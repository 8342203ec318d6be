"""OmniAct's episodic summariser (App. H) over an OpenAI-compatible chat API: what brace_memory's SummaryWorker calls.

Each summary is one streamed POST /chat/completions with OmniAct's episodic prompt (brace_memory.summary, its keys
adapted to a record's), closed once the answer holds a complete JSON value, and bounded by its own deadline
(`memory_summariser_timeout_s`) and by memory's cancel. Every way it can fail is a SummaryFailed (no answer: the
server's reason, as the planner's `server.<reason>` counters name it) or a SummaryInvalid (an answer without a JSON
value); the worker validates the value (brace_memory.summary.summary_fields) before it replaces anything.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from brace_common.action_schema import PlanError
from brace_common.validation import json_depths
from brace_memory.summary import SummaryFailed, SummaryInvalid, SummaryRequest, summary_prompt

from .openai_client import OpenAIClient, ServerError
from .plan_parser import first_json, holds_json

SUMMARY_MAX_TOKENS = 256
"""Decode limit of a summary: the template's limits hold about 1,300 characters of values; a small model writes less."""


def summary_written(text: str) -> bool:
    """The answer holds a complete JSON value: the rest of the stream cannot change the summary."""
    return any(depth == 0 for depth in json_depths(text, prose_first=True)) and holds_json(text)


class ChatSummariser:
    """Summarises an episodic segment with the chat model `model` ("": the server's own) at `client`'s server."""

    def __init__(self, client: OpenAIClient, model: str = "", timeout_s: float = 30.0,
                 max_tokens: int = SUMMARY_MAX_TOKENS) -> None:
        if not timeout_s > 0.0:
            raise ValueError(f"timeout_s {timeout_s} must be positive")
        self.client = client
        self.model = model
        self.timeout_s = timeout_s
        self.max_tokens = max_tokens

    def __repr__(self) -> str:
        return f"ChatSummariser({self.client.base_url!r}, model={self.model!r}, timeout_s={self.timeout_s})"

    def body(self, request: SummaryRequest) -> dict[str, Any]:
        """The chat completion request of `request`'s summary (greedy, OmniAct App. H's messages)."""
        system, user = summary_prompt(request)
        body: dict[str, Any] = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
                                "max_tokens": self.max_tokens, "temperature": 0.0,
                                "stream_options": {"include_usage": True}}
        if self.model:  # else the server's own (a server pinned to one model may refuse any other name)
            body["model"] = self.model
        return body

    def __call__(self, request: SummaryRequest, cancelled: Callable[[], bool] = lambda: False) -> Any:
        """The summary as parsed JSON (the first JSON value of the answer); SummaryFailed or SummaryInvalid."""
        try:
            result = self.client.stream("/chat/completions", self.body(request), time.monotonic() + self.timeout_s,
                                        cancelled, stop_when=summary_written)
        except ServerError as exc:
            raise SummaryFailed(exc.reason, str(exc)) from None
        try:
            return first_json(result.text)
        except PlanError as exc:
            raise SummaryInvalid(str(exc.reason), f"{exc.detail} (answer: {result.text[:120]!r})") from None
