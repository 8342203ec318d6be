"""One replanning call on a planner served by an OpenAI-compatible server (backend `openai`).

[queue ->] context_compress -> retrieve -> request -> first_token -> decode -> parse.
The context is rendered and compressed to B_t here, before anything is sent
(prompt-level E-RECAP: the local scorer model's kept tokens become the
prompt; or any budget-matched compressor), so the server reads at most B_t
context tokens as counted by the local tokenizer. `request` runs from the
first send (retries and backoff included) until the server answers, i.e. its
queue; `first_token` until the first generated text, i.e. its prefill. The
server's own usage report is kept next to our counts.

The hard deadline bounds every wait; a cancel closes the stream. A server
that is down, busy (429, honouring Retry-After) or failing (5xx) is retried
with capped exponential backoff while the deadline allows and no token has
arrived; then the call ends UNAVAILABLE, counted by reason. Output is
validated against the action schema like the local path's; anything else is
a PLANNER_ERROR. Neither ever raises.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional

from brace_common.action_schema import ActionSchema
from brace_common.vocabulary import CallStatus, Phase

from .call_path import (
    CallOutcome,
    CallRequest,
    checkpoint_of,
    end_aborted,
    json_object_closed,
    no_schema_outcome,
    parse_into,
    request_text,
)
from .compressors import Compressor
from .context import DEFAULT_SYSTEM_PROMPT, LAYOUTS, ContextBuffer, RenderedContext, TokenCounts
from .memory_phase import MemoryUse, call_blocks, goal_stack, memory_ids, retrieve, splice_memory
from .openai_client import OpenAIClient, ServerError, StreamResult
from .phase_clock import PhaseClock
from .plan_parser import holds_json
from .pruned_forward import CallAborted
from .scoring import enumerate_steps

ENDPOINTS = ("chat", "completions")
"""chat: /chat/completions with system + user messages (the server applies its chat template);
completions: /completions with the locally templated prompt text (servers without chat, or to send
exactly the tokens the compressor kept)."""

STRUCTURED_OUTPUTS = ("json_schema", "json_object", "none")
"""How the server is asked for a schema-valid plan: json_schema = `response_format` {type: json_schema}
(vLLM, SGLang, llama.cpp's server); json_object = `response_format` {type: json_object, schema}
(llama-cpp-python's server); none = free text (e.g. `transformers serve`, which ignores response_format)."""


_PROGRESS_PHASES = {"answered": Phase.FIRST_TOKEN, "first_token": Phase.DECODE}  # what begins when the stream says


def plan_written(text: str) -> bool:
    """The output holds a complete JSON value: the rest of the stream cannot change the plan."""
    return json_object_closed(text) and holds_json(text)


@dataclass
class Backoff:
    """Capped exponential backoff shared by every call to one server (thread-safe)."""

    initial_s: float = 0.1
    max_s: float = 5.0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._failures = 0
        self._not_before = 0.0

    def failed(self, retry_after_s: Optional[float] = None) -> float:
        """Record a failure; the instant (time.monotonic) before which the server is not tried again."""
        with self._lock:
            self._failures += 1
            wait = min(self.max_s, self.initial_s * 2 ** (self._failures - 1))
            if retry_after_s is not None:
                wait = max(wait, retry_after_s)
            self._not_before = max(self._not_before, time.monotonic() + wait)
            return self._not_before

    def succeeded(self) -> None:
        """The server answered: the next call goes at once."""
        with self._lock:
            self._failures, self._not_before = 0, 0.0

    @property
    def not_before(self) -> float:
        """No request before this instant (time.monotonic); 0 = now."""
        with self._lock:
            return self._not_before


class ServerCallPath:
    """Runs replanning calls on a planner server; compression and validation stay local."""

    def __init__(self, client: OpenAIClient, server_model: str, tokenizer, schema: Optional[ActionSchema],
                 compressor: Compressor, compressor_name: str, endpoint: str = "chat",
                 structured_output: str = "none", max_new_tokens: int = 64,
                 system_prompt: str = DEFAULT_SYSTEM_PROMPT, memory: Optional[MemoryUse] = None,
                 plan_steps: Optional[dict[int, int]] = None, layout: str = "focus",
                 max_context_tokens: Optional[int] = None, backoff: Optional[Backoff] = None):
        if endpoint not in ENDPOINTS:
            raise ValueError(f"endpoint '{endpoint}' is not one of {', '.join(ENDPOINTS)}")
        if structured_output not in STRUCTURED_OUTPUTS:
            raise ValueError(f"structured_output '{structured_output}' is not one of {', '.join(STRUCTURED_OUTPUTS)}")
        if layout not in LAYOUTS:
            raise ValueError(f"layout '{layout}' is not one of {LAYOUTS}")
        self.client = client
        self.server_model = server_model
        self.tokenizer = tokenizer
        self.schema = schema  # replaced whole by set_schema; a call reads it once (None: none known yet)
        self.compressor = compressor
        self.compressor_name = compressor_name
        self.endpoint = endpoint
        self.structured_output = structured_output
        self.max_new_tokens = max_new_tokens
        self.system_prompt = system_prompt
        self.memory = memory
        if schema is not None:
            self.set_schema(schema)
        self.plan_steps = dict(plan_steps or {})
        self.layout = layout
        self.max_context_tokens = max_context_tokens
        self.token_counts = TokenCounts(tokenizer)  # each entry's tokens, counted once
        self.backoff = backoff or Backoff()
        # Free text may ramble past the plan: close the stream once it is written. Structured output ends at the
        # plan by itself, and closing early would only risk a server that mishandles a client going away
        # (llama-cpp-python's server then cut or emptied the next reply).
        self.stop_when: Callable[[str], bool] = plan_written if structured_output == "none" else (lambda text: False)
        self.counts: Counter[str] = Counter()  # server.<reason> failures, server.retries, server.stopped_early
        self._at_server = 0  # this path's requests sent and not yet answered to the end (what the server holds of ours)
        self._at_server_lock = threading.Lock()

    @property
    def at_server(self) -> int:
        """This path's requests the server holds now (sent, not yet read to their end)."""
        with self._at_server_lock:
            return self._at_server

    def _held_by_server(self, delta: int) -> None:
        with self._at_server_lock:
            self._at_server += delta

    @property
    def model_name(self) -> str:
        """The model the calls name (the ReplanCall's `model`): `server_model` as configured or as the server listed."""
        return self.server_model

    def set_schema(self, schema: ActionSchema) -> None:
        """Plan with `schema` (its JSON Schema as response_format) from the next call on; the running one keeps
        its own. CandidateLimit (a ValueError), the schema unchanged, when memory needs its skill calls and they are
        more than scoring.MAX_CANDIDATES."""
        steps = enumerate_steps(schema) if self.memory is not None else None
        self.schema = schema
        if steps is not None:
            self.memory.system.on_schema(steps)

    # ------------------------------------------------------------------ request body

    def body(self, kept_ids: list[int], ctx: RenderedContext, kept_index: list[int], mode: int,
             schema: Optional[ActionSchema] = None, agent: Optional[str] = None) -> tuple[str, dict]:
        """(path, JSON body) of the completion request for the kept tokens (`schema`: the call's, else the
        current one; its JSON Schema for a plan of `agent`, when given)."""
        schema = schema if schema is not None else self.schema
        body: dict = {"max_tokens": self.max_new_tokens, "temperature": 0.0, "stream_options": {"include_usage": True}}
        if self.server_model:  # else the server's own (a server pinned to one model may refuse any other name)
            body["model"] = self.server_model
        if self.endpoint == "completions":
            body["prompt"] = self.tokenizer.decode(kept_ids, skip_special_tokens=False)
            path = "/completions"
        else:
            start, stop = ctx.content_span
            user = [t for t, i in zip(kept_ids, kept_index, strict=True) if i < 0 or start <= i < stop]
            body["messages"] = [{"role": "system", "content": self.system_prompt},
                                {"role": "user", "content": self.tokenizer.decode(user, skip_special_tokens=True)}]
            path = "/chat/completions"
        if self.structured_output != "none":
            plan = schema.json_schema(self.plan_steps.get(mode), agent)
            body["response_format"] = (
                {"type": "json_schema", "json_schema": {"name": "plan", "schema": plan, "strict": True}}
                if self.structured_output == "json_schema" else {"type": "json_object", "schema": plan})
        return path, body

    # ------------------------------------------------------------------ the call

    def _send(self, path: str, body: dict, clock: PhaseClock) -> StreamResult:
        """The request, retried with backoff while the deadline allows and nothing was generated."""
        while True:
            wait_until = self.backoff.not_before
            while time.monotonic() < wait_until:
                if clock.abort():
                    raise ServerError("cancelled" if clock.cancelled() else "deadline", "while backing off")
                time.sleep(min(0.02, max(0.0, wait_until - time.monotonic())))
            try:
                result = self.client.stream(path, body, clock.deadline, clock.cancelled, stop_when=self.stop_when,
                                            on_progress=lambda what: clock.begin(_PROGRESS_PHASES[what]))
            except ServerError as exc:
                if exc.reason not in ("deadline", "cancelled"):
                    self.counts[f"server.{exc.reason}"] += 1
                if not exc.retryable:
                    if exc.reason not in ("deadline", "cancelled"):
                        self.backoff.failed(exc.retry_after_s)
                    raise
                resume = self.backoff.failed(exc.retry_after_s)
                if resume >= clock.deadline:
                    raise ServerError(exc.reason, f"{exc} (no time left to retry)", exc.retry_after_s,
                                      exc.status) from None
                self.counts["server.retries"] += 1
                continue
            self.backoff.succeeded()
            if result.stopped_early:
                self.counts["server.stopped_early"] += 1
            return result

    def run(self, buffer: ContextBuffer, request: CallRequest, cancelled: Callable[[], bool] = lambda: False,
            on_phase: Callable[[str, float], None] = lambda phase, elapsed_ms: None,
            queued_at: Optional[float] = None) -> CallOutcome:
        """One call; never raises for server failures, planner output, deadline or cancellation."""
        clock = PhaseClock(request.hard_deadline_ms, cancelled, on_phase, queued_at)
        outcome = CallOutcome(status=CallStatus.OK, slo_ms=request.slo_ms, compressor=self.compressor_name,
                              backend="openai")
        schema = self.schema  # this call's, whatever replaces it meanwhile
        if schema is None:
            return no_schema_outcome(outcome, clock)
        t0 = clock.begin(Phase.CONTEXT_COMPRESS)
        checkpoint = checkpoint_of(clock.abort, "context_compress")
        try:
            checkpoint()
            ctx = buffer.render(self.tokenizer, request.agent_id, request_text(schema, request.agent_id,
                                                                               request.mode),
                                self.system_prompt, call_blocks(buffer, self.layout, self.memory), self.layout,
                                self.max_context_tokens, checkpoint, self.token_counts,
                                goal_stack(self.memory, self.layout, request.agent_id))
            checkpoint()
            reserve = self.memory.reserve(request.token_budget, request.memory) if self.memory else 0
            compressed = self.compressor.compress(ctx, request.token_budget - reserve, should_abort=clock.abort)
        except CallAborted as exc:
            clock.end(Phase.CONTEXT_COMPRESS, t0, 0, 0)
            return self._aborted(outcome, clock, str(exc))
        kept_ids, kept_index = compressed.token_ids, compressed.kept_index
        outcome.tokens_before = len(ctx)
        clock.end(Phase.CONTEXT_COMPRESS, t0, len(ctx), len(kept_ids))

        t0 = clock.begin(Phase.RETRIEVE)
        got = retrieve(self.memory, self.tokenizer, buffer, request.agent_id, request.step, reserve,
                       self.layout)
        block = memory_ids(self.tokenizer, got.lines, reserve)
        request_at = compressed.position_of(ctx.request_start)
        kept_ids, _ = splice_memory(block, kept_ids, request_at)
        kept_index = kept_index[:request_at] + [-1] * len(block) + kept_index[request_at:]
        clock.end(Phase.RETRIEVE, t0, got.tokens, len(block))
        outcome.tokens_after = len(kept_ids)
        if clock.abort():
            return self._aborted(outcome, clock, "before the request")

        path, body = self.body(kept_ids, ctx, kept_index, request.mode, schema, request.agent_id)
        t0 = clock.begin(Phase.REQUEST)
        self._held_by_server(1)
        try:
            result = self._send(path, body, clock)
        except ServerError as exc:
            clock.end(Phase.REQUEST, t0, len(kept_ids), 0)
            if exc.reason in ("deadline", "cancelled"):
                return self._aborted(outcome, clock, str(exc))
            outcome.status = CallStatus.UNAVAILABLE
            outcome.error = f"planner server {self.client.base_url}: {exc}"
            return self._finish(outcome, clock)
        finally:
            self._held_by_server(-1)
        times = result.times
        outcome.server_prompt_tokens = result.prompt_tokens
        outcome.server_completion_tokens = result.completion_tokens
        produced = result.completion_tokens or len(self.tokenizer(result.text, add_special_tokens=False)
                                                   ["input_ids"])
        first = times.first_token or times.done
        clock.end(Phase.REQUEST, t0, len(kept_ids), 0, t1=times.answered)
        clock.end(Phase.FIRST_TOKEN, times.answered, len(kept_ids), result.prompt_tokens or len(kept_ids),
                  t1=first)
        clock.end(Phase.DECODE, first, len(kept_ids), produced, t1=times.done)
        outcome.output_text = result.text

        t0 = clock.begin(Phase.PARSE)
        parse_into(outcome, result.text, schema, request.agent_id)
        clock.end(Phase.PARSE, t0, produced, len(outcome.steps))
        return self._finish(outcome, clock)

    @staticmethod
    def _finish(outcome: CallOutcome, clock: PhaseClock) -> CallOutcome:
        outcome.phases = clock.phases
        outcome.latency_ms = clock.elapsed_ms()
        return outcome

    def _aborted(self, outcome: CallOutcome, clock: PhaseClock, why: str) -> CallOutcome:
        end_aborted(outcome, clock, why)
        return self._finish(outcome, clock)


class ServerProbe:
    """Whether the planner server answers GET /models (any HTTP answer), what it lists and when it was asked."""

    def __init__(self) -> None:
        self.answered = False
        self.models: list[str] = []
        self.error = "not asked yet"
        self.checked_at = 0.0

    def probe(self, path: ServerCallPath, timeout_s: float) -> None:
        """Ask once (blocks at most `timeout_s`)."""
        self.checked_at = time.monotonic()
        try:
            listing = path.client.get_json("/models", time.monotonic() + timeout_s)
        except ServerError as exc:
            # An HTTP error is still an answer: the server runs (some list no models, or fail to list them).
            self.answered, self.models, self.error = exc.status > 0, [], str(exc)
            return
        data = listing.get("data")
        self.models = [str(m.get("id")) for m in data if isinstance(m, dict) and m.get("id")] \
            if isinstance(data, list) else []
        self.answered, self.error = True, ""
