"""A streaming client of an OpenAI-compatible completion server (vLLM, SGLang, llama.cpp, `transformers serve`).

Plain sockets and HTTP/1.1, so that every wait is bounded by the call's hard
deadline and a cancel closes the connection at once (the server sees the
client go and stops generating). Every way a request can fail ends in a
`ServerError` whose `reason` is one of REASONS; nothing else is raised.
The API key is sent as a bearer token and never appears in an error text.
"""

from __future__ import annotations

import json
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Optional
from urllib.parse import urlsplit

REASONS = ("connection_refused", "connect_timeout", "connection_lost", "rate_limited", "http_error", "server_error",
           "truncated", "not_json", "deadline", "cancelled")
"""Why a request failed: the label of `ServerError.reason` and of the planner's `server.<reason>` counters."""

RETRYABLE = frozenset({"connection_refused", "connect_timeout", "connection_lost", "rate_limited", "server_error"})
"""Failures worth another try before any token arrived (the server may be starting, restarting or busy)."""

POLL_S = 0.05  # longest blocking socket wait: how soon a cancel is seen
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


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """Retry-After in seconds (the delta-seconds form; an HTTP date or garbage gives None)."""
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0.0 <= seconds < 86400.0 else None


class _Connection:
    """One HTTP/1.1 exchange on a socket whose every wait checks a deadline and a cancel flag."""

    def __init__(self, host: str, port: int, tls: bool, deadline: float, cancelled: Callable[[], bool],
                 connect_timeout_s: float):
        self.deadline, self.cancelled = deadline, cancelled
        timeout = max(0.001, min(connect_timeout_s, deadline - time.monotonic()))
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except ConnectionRefusedError as exc:
            raise ServerError("connection_refused", f"{host}:{port} ({exc.strerror})") from None
        except TimeoutError:
            raise ServerError("deadline" if time.monotonic() >= deadline else "connect_timeout",
                              f"no connection to {host}:{port} within {timeout:.2f} s") from None
        except OSError as exc:
            raise ServerError("connection_refused", f"{host}:{port}: {exc}") from None
        if tls:
            try:
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
            except (OSError, ssl.SSLError) as exc:
                sock.close()
                raise ServerError("connection_lost", f"TLS to {host}:{port}: {exc}") from None
        sock.settimeout(POLL_S)
        self.sock = sock
        self.buffer = b""

    def close(self) -> None:
        """Close the socket (the server sees the client go)."""
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, data: bytes) -> None:
        """Write all of `data` before the deadline."""
        view = memoryview(data)
        while view:
            self._check()
            try:
                sent = self.sock.send(view)
            except TimeoutError:
                continue
            except OSError as exc:
                raise ServerError("connection_lost", f"while sending: {exc}") from None
            view = view[sent:]

    def _check(self) -> None:
        if self.cancelled():
            raise ServerError("cancelled", "the call was cancelled")
        if time.monotonic() >= self.deadline:
            raise ServerError("deadline", "the hard deadline passed while waiting for the server")

    def _fill(self) -> bool:
        """Read more bytes into the buffer; False at end of stream."""
        while True:
            self._check()
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError as exc:
                raise ServerError("connection_lost", f"while reading: {exc}") from None
            if not data:
                return False
            self.buffer += data
            return True

    def read_until(self, marker: bytes, limit: int) -> Optional[bytes]:
        """Bytes up to and including `marker`; None if the stream ends first."""
        while marker not in self.buffer:
            if len(self.buffer) > limit:
                raise ServerError("not_json", f"more than {limit} bytes without {marker!r}")
            if not self._fill():
                return None
        head, _, self.buffer = self.buffer.partition(marker)
        return head + marker

    def read_exactly(self, count: int) -> Optional[bytes]:
        """`count` bytes; None if the stream ends first."""
        while len(self.buffer) < count:
            if not self._fill():
                return None
        data, self.buffer = self.buffer[:count], self.buffer[count:]
        return data

    def read_available(self) -> Optional[bytes]:
        """Whatever arrives next (body without a length); None at end of stream."""
        if not self.buffer and not self._fill():
            return None
        data, self.buffer = self.buffer, b""
        return data


@dataclass
class _Response:
    status: int
    headers: dict[str, str]
    body: Iterator[bytes]


class OpenAIClient:
    """Requests to one server at `base_url` (e.g. http://127.0.0.1:8000/v1); one connection per request."""

    def __init__(self, base_url: str, api_key: str = "", connect_timeout_s: float = 1.0):
        parts = urlsplit(base_url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"'{base_url}' is not an http(s)://host[:port][/path] URL")
        self.host = parts.hostname
        self.tls = parts.scheme == "https"
        self.port = parts.port or (443 if self.tls else 80)
        self.prefix = parts.path
        self.base_url = f"{parts.scheme}://{parts.netloc}{parts.path}"
        self._api_key = api_key
        self.connect_timeout_s = connect_timeout_s

    def __repr__(self) -> str:  # the key stays out of logs
        return f"OpenAIClient({self.base_url!r}, api_key={'set' if self._api_key else 'none'})"

    # ------------------------------------------------------------------ HTTP

    def _open(self, method: str, path: str, body: Optional[dict], deadline: float,
              cancelled: Callable[[], bool], times: Optional[StreamTimes] = None) -> tuple[_Connection, _Response]:
        conn = _Connection(self.host, self.port, self.tls, deadline, cancelled, self.connect_timeout_s)
        try:
            payload = json.dumps(body).encode() if body is not None else b""
            lines = [f"{method} {self.prefix}{path} HTTP/1.1", f"Host: {self.host}:{self.port}",
                     "Accept: text/event-stream, application/json", "Connection: close",
                     "User-Agent: brace-ros-erecap-planner"]
            if body is not None:
                lines += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
            if self._api_key:
                lines.append(f"Authorization: Bearer {self._api_key}")
            conn.send(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
            if times is not None:
                times.sent = time.monotonic()
            head = conn.read_until(b"\r\n\r\n", MAX_HEADER_BYTES)
            if head is None:
                raise ServerError("connection_lost", "the server closed the connection before answering")
            status_line, *header_lines = head.decode("latin-1").split("\r\n")
            try:
                status = int(status_line.split(" ", 2)[1])
            except (IndexError, ValueError):
                raise ServerError("not_json", f"not an HTTP status line: {status_line[:80]!r}") from None
            headers = {}
            for line in header_lines:
                name, sep, value = line.partition(":")
                if sep:
                    headers[name.strip().lower()] = value.strip()
            if times is not None:
                times.answered = time.monotonic()
            return conn, _Response(status, headers, self._body(conn, headers))
        except BaseException:
            conn.close()
            raise

    @staticmethod
    def _body(conn: _Connection, headers: dict[str, str]) -> Iterator[bytes]:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                size_line = conn.read_until(b"\r\n", 1024)
                if size_line is None:
                    raise ServerError("truncated", "the stream ended inside a chunk header")
                try:
                    size = int(size_line.split(b";")[0].strip(), 16)
                except ValueError:
                    raise ServerError("truncated", f"bad chunk size {size_line[:20]!r}") from None
                if size == 0:
                    return
                data = conn.read_exactly(size + 2)
                if data is None:
                    raise ServerError("truncated", "the stream ended inside a chunk")
                yield data[:-2]
        elif "content-length" in headers:
            try:
                length = int(headers["content-length"])
            except ValueError:
                raise ServerError("not_json", "bad Content-Length") from None
            if length > MAX_BODY_BYTES:
                raise ServerError("not_json", f"a {length}-byte body")
            data = conn.read_exactly(length)
            if data is None:
                raise ServerError("truncated", f"the body ended before its {length} bytes")
            yield data
        else:
            while (data := conn.read_available()) is not None:
                yield data

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
