"""A streaming client of an OpenAI-compatible completion server (vLLM, SGLang, llama.cpp, `transformers serve`).

Plain sockets and HTTP/1.1 (brace_common.http_deadline), so that every wait —
connect, TLS handshake, send, headers, each byte of the stream — is bounded by
the call's hard deadline, not by a per-read timeout a dripping server never
trips, and a cancel closes the connection at once (the server sees the client
go and stops generating). Every way a request can fail ends in a
`ServerError` whose `reason` is one of REASONS; nothing else is raised.
The API key is sent as a bearer token and never appears in an error text.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Optional

from brace_common.http_deadline import Connection, check_base_url

REASONS = ("connection_refused", "connect_timeout", "connection_lost", "rate_limited", "http_error", "server_error",
           "truncated", "not_json", "deadline", "cancelled")
"""Why a request failed: the label of `ServerError.reason` and of the planner's `server.<reason>` counters."""

RETRYABLE = frozenset({"connection_refused", "connect_timeout", "connection_lost", "rate_limited", "server_error"})
"""Failures worth another try before any token arrived (the server may be starting, restarting or busy)."""

STOP_GRACE_EVENTS = 3  # events read after `stop_when` holds, for the finish and usage report, before closing
MAX_HEADER_BYTES = 65536
MAX_BODY_BYTES = 8 * 1024 * 1024


class ServerError(Exception):
    """A failed request: `reason` (one of REASONS), an optional Retry-After (s) and the HTTP status if any."""

    def __init__(self, reason: str, detail: str = "", retry_after_s: Optional[float] = None, status: int = 0):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.retry_after_s = retry_after_s
        self.status = status

    @property
    def retryable(self) -> bool:
        """Whether trying again (before the deadline, after a backoff) may succeed."""
        return self.reason in RETRYABLE


@dataclass
class StreamTimes:
    """Steady-clock instants (time.monotonic) of one streamed request."""

    sent: float = 0.0          # request written
    answered: float = 0.0      # status line and headers read (the server took the request off its queue)
    first_token: float = 0.0   # first generated text arrived (0: none)
    done: float = 0.0          # the stream ended or was closed by us


@dataclass
class StreamResult:
    """What a streamed completion produced."""

    text: str = ""
    finish_reason: str = ""
    prompt_tokens: int = 0       # the server's usage report (0 when it sent none)
    completion_tokens: int = 0
    chunks: int = 0
    stopped_early: bool = False  # we closed the stream before it finished (`stop_when`: the output is complete)
    times: StreamTimes = field(default_factory=StreamTimes)


_REASON_OF = {"too_large": "not_json", "malformed": "not_json"}  # http_deadline's reasons that are ours by another name


def _server_error(reason: str, detail: str) -> ServerError:
    """The ServerError of an http_deadline failure."""
    return ServerError(_REASON_OF.get(reason, reason), detail)


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """Retry-After in seconds (the delta-seconds form; an HTTP date or garbage gives None)."""
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0.0 <= seconds < 86400.0 else None


@dataclass
class _Response:
    status: int
    headers: dict[str, str]
    body: Iterator[bytes]


class OpenAIClient:
    """Requests to one server at `base_url` (e.g. http://127.0.0.1:8001/v1); one connection per request."""

    def __init__(self, base_url: str, api_key: str = "", connect_timeout_s: float = 1.0):
        endpoint = check_base_url(base_url.rstrip("/"))
        self.host, self.port, self.tls = endpoint.host, endpoint.port, endpoint.tls
        self.prefix = endpoint.target.rstrip("/")
        self.base_url = f"{'https' if self.tls else 'http'}://{endpoint.netloc}{self.prefix}"
        self._api_key = api_key
        self.connect_timeout_s = connect_timeout_s

    def __repr__(self) -> str:  # the key stays out of logs
        return f"OpenAIClient({self.base_url!r}, api_key={'set' if self._api_key else 'none'})"

    # ------------------------------------------------------------------ HTTP

    def _open(self, method: str, path: str, body: Optional[dict], deadline: float,
              cancelled: Callable[[], bool], times: Optional[StreamTimes] = None,
              root: bool = False) -> tuple[Connection, _Response]:
        conn = Connection(self.host, self.port, deadline, self.tls, cancelled, self.connect_timeout_s, _server_error)
        try:
            payload = json.dumps(body).encode() if body is not None else b""
            headers = {"Accept": "text/event-stream, application/json", "User-Agent": "brace-ros-erecap-planner"}
            if body is not None:
                headers["Content-Type"] = "application/json"
            if self._api_key:
                headers["Authorization"] = f"Bearer {self._api_key}"
            conn.request(method, path if root else f"{self.prefix}{path}", f"{self.host}:{self.port}", headers, payload)
            if times is not None:
                times.sent = time.monotonic()
            status, headers = conn.read_head(MAX_HEADER_BYTES)
            if times is not None:
                times.answered = time.monotonic()
            return conn, _Response(status, headers, conn.body(headers, MAX_BODY_BYTES))
        except BaseException:
            conn.close()
            raise

    @staticmethod
    def _error_of(response: _Response) -> ServerError:
        text = b"".join(response.body)[:400].decode("utf-8", "replace") if response.status != 429 else ""
        retry = parse_retry_after(response.headers.get("retry-after"))
        if response.status == 429:
            return ServerError("rate_limited", "HTTP 429", retry, 429)
        reason = "server_error" if response.status >= 500 else "http_error"
        return ServerError(reason, f"HTTP {response.status} {text.strip()}", retry, response.status)

    # ------------------------------------------------------------------ API

    def get_json(self, path: str, deadline: float, cancelled: Callable[[], bool] = lambda: False) -> dict:
        """GET `path` (e.g. '/models') as a JSON object; ServerError on anything else."""
        conn, response = self._open("GET", path, None, deadline, cancelled)
        try:
            if response.status != 200:
                raise self._error_of(response)
            raw = b"".join(response.body)
        finally:
            conn.close()
        try:
            value = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ServerError("not_json", f"GET {path} body is not JSON: {raw[:80]!r}") from None
        if not isinstance(value, dict):
            raise ServerError("not_json", f"GET {path} body is not a JSON object")
        return value

    def get_text(self, target: str, deadline: float) -> str:
        """GET `target`, a path from the server's root (e.g. '/metrics', outside the API prefix), as text;
        ServerError on anything but HTTP 200."""
        conn, response = self._open("GET", target, None, deadline, lambda: False, root=True)
        try:
            if response.status != 200:
                raise self._error_of(response)
            return b"".join(response.body).decode("utf-8", "replace")
        finally:
            conn.close()

    def stream(self, path: str, body: dict, deadline: float, cancelled: Callable[[], bool] = lambda: False,
               stop_when: Callable[[str], bool] = lambda text: False,
               on_progress: Callable[[str], None] = lambda what: None) -> StreamResult:
        """POST a streaming completion (`body["stream"]` is set) and collect its text.

        The stream is closed a few events after `stop_when(text so far)` holds (time for the server's finish and
        usage report), or at once when the call is cancelled or the deadline passes. A server that answers with
        one JSON body instead of a stream is read as well. `on_progress` hears "answered" (headers read) and
        "first_token".
        """
        result = StreamResult()
        conn, response = self._open("POST", path, {**body, "stream": True}, deadline, cancelled, result.times)
        try:
            if response.status != 200:
                raise self._error_of(response)
            on_progress("answered")
            if "text/event-stream" in response.headers.get("content-type", ""):
                self._read_events(response.body, result, stop_when, on_progress)
            else:
                self._read_whole(b"".join(response.body), result)
        finally:
            conn.close()
            result.times.done = time.monotonic()
        return result

    @staticmethod
    def _apply(event: dict, result: StreamResult, delta_key: str) -> None:
        if "error" in event:
            error = event["error"]
            message = error.get("message", error) if isinstance(error, dict) else error
            raise ServerError("server_error", f"error event: {str(message)[:200]}")
        usage = event.get("usage")
        if isinstance(usage, dict):
            result.prompt_tokens = int(usage.get("prompt_tokens") or 0)
            result.completion_tokens = int(usage.get("completion_tokens") or 0)
        choices = event.get("choices")
        if not isinstance(choices, list):
            raise ServerError("not_json", "an event without a choices list")
        for choice in choices:
            if not isinstance(choice, dict):
                raise ServerError("not_json", "a choice that is not an object")
            piece = choice.get(delta_key)
            if delta_key in ("delta", "message"):
                piece = piece.get("content") if isinstance(piece, dict) else None
            if isinstance(piece, str) and piece:
                if not result.text:
                    result.times.first_token = time.monotonic()
                result.text += piece
            if choice.get("finish_reason"):
                result.finish_reason = str(choice["finish_reason"])

    def _read_events(self, body: Iterator[bytes], result: StreamResult, stop_when: Callable[[str], bool],
                     on_progress: Callable[[str], None]) -> None:
        pending, complete_at = b"", None
        for data in body:
            pending = (pending + data).replace(b"\r\n", b"\n")
            while b"\n\n" in pending:
                raw, _, pending = pending.partition(b"\n\n")
                payload = "\n".join(line[5:].strip() for line in raw.decode("utf-8", "replace").split("\n")
                                    if line.startswith("data:"))
                if not payload:
                    continue  # a comment or keep-alive
                if payload == "[DONE]":
                    return
                try:
                    event = json.loads(payload)
                except json.JSONDecodeError:
                    raise ServerError("not_json", f"event is not JSON: {payload[:80]!r}") from None
                if not isinstance(event, dict):
                    raise ServerError("not_json", "event is not a JSON object")
                result.chunks += 1
                choices = event.get("choices") or [{}]
                key = "delta" if isinstance(choices[0], dict) and "delta" in choices[0] else "text"
                had_text = bool(result.text)
                self._apply(event, result, key)
                if result.text and not had_text:
                    on_progress("first_token")
                if result.finish_reason and result.prompt_tokens:
                    continue  # finished and counted: only [DONE] is left
                if complete_at is None and result.text and stop_when(result.text):
                    complete_at = result.chunks
                if complete_at is not None and result.chunks - complete_at >= STOP_GRACE_EVENTS:
                    result.stopped_early = True
                    return
        if not result.finish_reason:
            raise ServerError("truncated", f"the stream ended after {result.chunks} events without finishing")

    def _read_whole(self, raw: bytes, result: StreamResult) -> None:
        try:
            event = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ServerError("not_json", f"body is not JSON: {raw[:80]!r}") from None
        if not isinstance(event, dict):
            raise ServerError("not_json", "body is not a JSON object")
        choices = event.get("choices") or [{}]
        self._apply(event, result, "message" if isinstance(choices[0], dict) and "message" in choices[0] else "text")
        result.chunks = 1
