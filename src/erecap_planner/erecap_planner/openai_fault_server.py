"""An OpenAI-protocol server on 127.0.0.1 that answers with scripted faults (tests, the fuzz harness: a test double of a
serving engine at the protocol level).

The happy path is tested against a real server (`transformers serve`); this
one produces what a real server does only under failure: 429 with
Retry-After, 5xx, error events, garbage events, non-JSON bodies, streams
cut mid-way, answers that come after the deadline, a server that never
answers, and one that drips its answer a byte at a time (each byte well
inside any per-read timeout, the whole far beyond the deadline). Each
request's path, headers and JSON body are recorded, and so is a client that
went away mid-stream.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler

from brace_common.local_http import LocalHTTPServer, answer

PLAN = '{"plan": [{"action": "pick", "parameters": {"object": "cup_3"}}]}'


def _chunk(text: str = "", finish: str = "", usage: dict | None = None, chat: bool = True) -> bytes:
    choice = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
    if finish:
        choice["finish_reason"] = finish
    event = {"id": "x", "object": "chat.completion.chunk", "choices": [choice]}
    if usage:
        event["usage"] = usage
    return f"data: {json.dumps(event)}\n\n".encode()


class FaultServer:
    """Serves scripted replies in order (then the default) on `port` (0: a free one); a context manager."""

    def __init__(self, default: str = "ok", text: str = PLAN, chunk_delay_s: float = 0.0, port: int = 0):
        self.script: deque[str] = deque()
        self.default = default
        self.text = text
        self.answers: deque[str] = deque()  # texts the next answers give, in order (then `text`)
        self.chunk_delay_s = chunk_delay_s
        self.requests: list[dict] = []
        self.disconnects = 0
        self.retry_after = "1"
        self.drip_s = 0.1  # the drip modes: one byte per drip_s
        self.metrics: str | None = None  # GET /metrics's text (None: 404, a server without metrics)
        self.stop = threading.Event()  # ends a drip (at __exit__)
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                return

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path == "/metrics":  # Prometheus text, as serving engines publish their load
                    if server.metrics is None:
                        self._send(404, b'{"error": "not found"}', "application/json")
                    else:
                        self._send(200, server.metrics.encode(), "text/plain; version=0.0.4")
                    return
                body = json.dumps({"object": "list", "data": [{"id": "scripted-model"}]}).encode()
                self._send(200, body, "application/json")

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                server.requests.append({"path": self.path, "headers": dict(self.headers),
                                        "body": json.loads(raw or b"{}")})
                mode = server.script.popleft() if server.script else server.default
                self.text = server.answers.popleft() if server.answers and mode in ("ok", "whole_json") \
                    else server.text
                getattr(self, f"reply_{mode}")()

            def _send(self, status: int, body: bytes, ctype: str, extra: dict | None = None) -> None:
                answer(self, status, body, ctype, extra)

            def _stream(self, events: list[bytes], chunked: bool = True, close_after: int = -1) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for i, event in enumerate(events):
                        if i == close_after:
                            self.close_connection = True
                            self.connection.shutdown(2)
                            return
                        time.sleep(server.chunk_delay_s)
                        self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    server.disconnects += 1

            def _events(self) -> list[bytes]:
                chat = self.path.endswith("/chat/completions")
                pieces = [self.text[i:i + 8] for i in range(0, len(self.text), 8)]
                usage = {"prompt_tokens": 123, "completion_tokens": len(pieces), "total_tokens": 123 + len(pieces)}
                return [*(_chunk(p, chat=chat) for p in pieces), _chunk("", "stop", usage, chat), b"data: [DONE]\n\n"]

            def reply_ok(self) -> None:
                self._stream(self._events())

            def reply_whole_json(self) -> None:  # a server that ignores "stream"
                body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": self.text},
                                     "finish_reason": "stop"}], "usage": {"prompt_tokens": 50, "completion_tokens": 9}}
                self._send(200, json.dumps(body).encode(), "application/json")

            def reply_rate_limited(self) -> None:
                self._send(429, b'{"error": "slow down"}', "application/json", {"Retry-After": server.retry_after})

            def reply_server_error(self) -> None:
                self._send(503, b'{"error": "overloaded"}', "application/json")

            def reply_bad_request(self) -> None:
                self._send(400, b'{"error": {"message": "unknown field"}}', "application/json")

            def reply_error_event(self) -> None:
                self._stream([b'data: {"error": {"message": "CUDA out of memory"}}\n\n'])

            def reply_garbage(self) -> None:
                self._stream([b"data: {this is not json\n\n"])

            def reply_not_json(self) -> None:
                self._send(200, b"<html>proxy error</html>", "text/html")

            def reply_truncated(self) -> None:
                self._stream(self._events(), close_after=3)

            def reply_hang(self) -> None:
                time.sleep(5.0)

            def _drip(self, data: bytes) -> None:
                try:
                    for i in range(len(data)):
                        if server.stop.wait(server.drip_s):
                            return
                        self.wfile.write(data[i:i + 1])
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    server.disconnects += 1

            def reply_drip_head(self) -> None:  # the status line and headers, one byte at a time
                self.close_connection = True
                self._drip(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Pad: " + b"x" * 400 + b"\r\n\r\n")

            def reply_drip_stream(self) -> None:  # headers at once, then the event stream one byte at a time
                self.close_connection = True
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                self.wfile.flush()
                self._drip(b"".join(self._events()))

        self.http = LocalHTTPServer(Handler, port, name="fault_server")
        self.port = port
        self.base_url = ""

    def __enter__(self) -> FaultServer:
        self.port = self.http.start().port
        self.base_url = self.http.url("/v1")
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.http.stop()
