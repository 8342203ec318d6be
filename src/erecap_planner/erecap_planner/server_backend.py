"""The OpenAI-compatible server backend (backend `openai`) behind call_path.Backend: request, first_token, decode.

The call path has compressed the context to B_t before this backend sends it. A server that is down, busy or failing
is retried with the one Backoff while the deadline allows and nothing was generated, then the call is UNAVAILABLE.
Torch-free. docs/planner_server.md has the why.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Optional

from brace_common.backoff import Backoff
from brace_common.counters import Counters, Health
from brace_common.vocabulary import Phase
from brace_memory.recap import subtask_limit

from .call_aborted import CallAborted
from .call_path import BackendUnavailable, CallOptions, CallOutcome, CallRequest, Generated, Prompt, SchemaUse, json_object_closed
from .openai_client import REASONS, OpenAIClient, ServerError, StreamResult
from .phase_clock import PhaseClock
from .plan_parser import holds_json

ENDPOINTS = ("chat", "completions")
"""chat: /chat/completions with system + user messages (the server applies its chat template);
completions: /completions with the locally templated prompt text (servers without chat, or to send
exactly the tokens the compressor kept)."""

STRUCTURED_OUTPUTS = ("json_schema", "json_object", "none")
"""How the server is asked for a schema-valid plan: json_schema = `response_format` {type: json_schema}
(vLLM, SGLang, llama.cpp's server); json_object = `response_format` {type: json_object, schema}
(llama-cpp-python's server); none = free text (e.g. `transformers serve`, which ignores response_format)."""

_PROGRESS_PHASES = {"answered": Phase.FIRST_TOKEN, "first_token": Phase.DECODE}  # what begins when the stream says
_ENDED = ("deadline", "cancelled")  # a call's own end, not the server's failure


def plan_written(text: str) -> bool:
    """The output holds a complete JSON value: the rest of the stream cannot change the plan."""
    return json_object_closed(text) and holds_json(text)


class ServerBackend:
    """A planner server reached through `client`; `server_model` named in each request (empty: the server's own)."""

    name = "openai"

    def __init__(self, client: OpenAIClient, tokenizer, options: CallOptions, server_model: str = "", *,
                 endpoint: str = "chat", structured_output: str = "none", backoff: Optional[Backoff] = None) -> None:
        if endpoint not in ENDPOINTS:
            raise ValueError(f"endpoint '{endpoint}' is not one of {', '.join(ENDPOINTS)}")
        if structured_output not in STRUCTURED_OUTPUTS:
            raise ValueError(f"structured_output '{structured_output}' is not one of {', '.join(STRUCTURED_OUTPUTS)}")
        self.client = client
        self.tokenizer = tokenizer
        self.options = options
        self.server_model = server_model
        self.endpoint = endpoint
        self.structured_output = structured_output
        self.backoff = backoff or Backoff(0.1, 5.0)
        # Free text may ramble past the plan: close the stream once it is written. Structured output ends at the
        # plan by itself, and closing early would only risk a server that mishandles a client going away.
        self.stop_when: Callable[[str], bool] = plan_written if structured_output == "none" else (lambda text: False)
        self.counts = Counters([f"server.{r}" for r in REASONS if r not in _ENDED]
                               + ["server.retries", "server.stopped_early"])
        self._at_server = 0  # requests sent and not yet read to their end (what the server holds of ours)
        self._at_server_lock = threading.Lock()

    @property
    def model_name(self) -> str:
        """The model the calls name (the ReplanCall's `model`): `server_model` as configured or as the server listed."""
        return self.server_model

    @property
    def at_server(self) -> int:
        """This backend's requests the server holds now (sent, not yet read to their end)."""
        with self._at_server_lock:
            return self._at_server

    def _held_by_server(self, delta: int) -> None:
        with self._at_server_lock:
            self._at_server += delta

    def health(self) -> Health:
        """The server and its model, failures by reason, retries and streams closed once the plan was written."""
        return Health({"backend": self.name, "server_url": self.client.base_url, "server_model": self.server_model,
                       **{k: v for k, v in sorted(self.counts.items()) if v}})

    def body(self, prompt: Prompt, mode: int, use: SchemaUse, agent: Optional[str] = None) -> tuple[str, dict]:
        """(path, JSON body) of the completion request for the prompt's kept tokens (the schema's JSON Schema for a
        plan of `agent`, when given)."""
        o = self.options
        body: dict = {"max_tokens": o.max_new_tokens, "temperature": 0.0, "stream_options": {"include_usage": True}}
        if self.server_model:  # else the server's own (a server pinned to one model may refuse any other name)
            body["model"] = self.server_model
        if self.endpoint == "completions":
            body["prompt"] = self.tokenizer.decode(prompt.ids, skip_special_tokens=False)
            path = "/completions"
        else:
            start, stop = prompt.ctx.content_span
            user = [t for t, i in zip(prompt.ids, prompt.kept_index, strict=True) if i < 0 or start <= i < stop]
            body["messages"] = [{"role": "system", "content": o.system_prompt},
                                {"role": "user", "content": self.tokenizer.decode(user, skip_special_tokens=True)}]
            path = "/chat/completions"
        if self.structured_output != "none":
            plan = use.schema.recap_json_schema(agent, not prompt.deepest, subtask_limit(use.schema.max_steps)) \
                if o.recursion else \
                use.schema.json_schema(o.plan_steps.get(mode), agent)
            body["response_format"] = (
                {"type": "json_schema", "json_schema": {"name": "plan", "schema": plan, "strict": True}}
                if self.structured_output == "json_schema" else {"type": "json_object", "schema": plan})
        return path, body

    def generate(self, prompt: Prompt, request: CallRequest, use: SchemaUse, clock: PhaseClock,
                 outcome: CallOutcome) -> Generated:
        """Send the prompt (retried with backoff) and read the stream: request, first_token and decode phases."""
        outcome.tokens_after = len(prompt.ids)
        if clock.abort():
            raise CallAborted("before the request")
        path, body = self.body(prompt, request.mode, use, request.agent_id)
        t0 = clock.begin(Phase.REQUEST)
        self._held_by_server(1)
        try:
            result = self._send(path, body, clock)
        except ServerError as exc:
            clock.end(Phase.REQUEST, t0, len(prompt.ids), 0)
            if exc.reason in _ENDED:
                raise CallAborted(str(exc)) from None
            raise BackendUnavailable(f"planner server {self.client.base_url}: {exc}") from None
        finally:
            self._held_by_server(-1)
        times = result.times
        outcome.server_prompt_tokens = result.prompt_tokens
        outcome.server_completion_tokens = result.completion_tokens
        produced = result.completion_tokens or len(self.tokenizer(result.text, add_special_tokens=False)["input_ids"])
        first = times.first_token or times.done
        n = len(prompt.ids)
        clock.end(Phase.REQUEST, t0, n, 0, t1=times.answered)
        clock.end(Phase.FIRST_TOKEN, times.answered, n, result.prompt_tokens or n, t1=first)
        clock.end(Phase.DECODE, first, n, produced, t1=times.done)
        outcome.output_text = result.text
        return Generated(result.text, produced)

    def _send(self, path: str, body: dict, clock: PhaseClock) -> StreamResult:
        """The request, retried with backoff while the deadline allows and nothing was generated."""
        while True:
            while not self.backoff.due(time.monotonic()):
                if clock.abort():
                    raise ServerError("cancelled" if clock.cancelled() else "deadline", "while backing off")
                time.sleep(min(0.02, max(0.0, self.backoff.not_before - time.monotonic())))
            try:
                result = self.client.stream(path, body, clock.deadline, clock.cancelled, stop_when=self.stop_when,
                                            on_progress=lambda what: clock.begin(_PROGRESS_PHASES[what]))
            except ServerError as exc:
                if exc.reason in _ENDED:
                    raise
                self.counts.add(f"server.{exc.reason}")
                self.backoff.failed(time.monotonic(), exc.retry_after_s)
                if not exc.retryable:
                    raise
                if self.backoff.not_before >= clock.deadline:
                    raise ServerError(exc.reason, f"{exc} (no time left to retry)", exc.retry_after_s,
                                      exc.status) from None
                self.counts.add("server.retries")
                continue
            self.backoff.succeeded()
            if result.stopped_early:
                self.counts.add("server.stopped_early")
            return result
