"""LocalHTTPServer and answer against a real client on 127.0.0.1."""

from __future__ import annotations

import socket
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler

import pytest

from brace_common.local_http import LocalHTTPServer, answer


class Echo(BaseHTTPRequestHandler):
    """Answers GET with the server's greeting; records whether each answer reached its client."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        return

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/late":
            self.server.released.wait(30)       # the client has gone by now
            self.server.sent.append(answer(self, 200, b"x" * (1 << 22)))
            self.server.done.set()
            return
        self.server.sent.append(answer(self, 200, self.server.greeting.encode(), "text/plain", {"X-Test": "1"}))


def test_it_serves_on_a_free_port_and_stops():
    with LocalHTTPServer(Echo, greeting="hello", sent=[]) as http:
        assert http.running and http.port > 0 and http.url("/a") == f"http://127.0.0.1:{http.port}/a"
        with urllib.request.urlopen(http.url("/"), timeout=10) as reply:
            assert reply.read() == b"hello" and reply.headers["X-Test"] == "1"
        with pytest.raises(RuntimeError, match="already running"):
            http.start()
    assert not http.running
    with pytest.raises(OSError):
        urllib.request.urlopen(http.url("/"), timeout=2)


def test_an_answer_to_a_client_that_went_away_is_false_not_an_error():
    released, done, sent = threading.Event(), threading.Event(), []
    with LocalHTTPServer(Echo, greeting="", sent=sent, released=released, done=done) as http:
        with socket.create_connection(("127.0.0.1", http.port), timeout=10) as client:
            client.sendall(b"GET /late HTTP/1.1\r\nHost: x\r\n\r\n")
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST
        released.set()
        assert done.wait(30)
    assert sent == [False]
