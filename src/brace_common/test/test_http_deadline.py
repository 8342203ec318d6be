"""http_deadline against scripted peers on 127.0.0.1: bodies of every framing, and every wait cut by the deadline."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from brace_common.http_deadline import Connection, Endpoint, HttpFailure, check_base_url


class Peer:
    """Reads one request head, then sends `answer` (bytes at once, or one byte per `drip_s`), then holds or closes."""

    def __init__(self, answer: bytes, drip_s: float = 0.0, hold: bool = False):
        self.answer, self.drip_s, self.hold = answer, drip_s, hold
        self.stop = threading.Event()
        self.request = b""
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn:
            try:
                while b"\r\n\r\n" not in self.request:
                    self.request += conn.recv(65536)
                if self.drip_s:
                    for i in range(len(self.answer)):
                        if self.stop.wait(self.drip_s):
                            return
                        conn.sendall(self.answer[i:i + 1])
                else:
                    conn.sendall(self.answer)
                if self.hold:
                    self.stop.wait()
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


def exchange(peer: Peer, deadline_s: float = 5.0, limit: int = 1 << 20, cancelled=lambda: False):
    conn = Connection("127.0.0.1", peer.port, time.monotonic() + deadline_s, cancelled=cancelled)
    try:
        conn.request("POST", "/act", f"127.0.0.1:{peer.port}", {"Content-Type": "application/json"}, b"{}")
        status, headers = conn.read_head()
        return status, headers, b"".join(conn.body(headers, limit)), conn
    finally:
        conn.close()


@pytest.mark.parametrize("answer, body", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", b"hello"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n", b"hello"),
    (b"HTTP/1.1 200 OK\r\n\r\nhello", b"hello"),  # until the server closes
])
def test_bodies_of_every_framing(answer, body):
    peer = Peer(answer)
    try:
        status, headers, got, conn = exchange(peer)
    finally:
        peer.close()
    assert (status, got) == (200, body) and conn.phase == "body"
    assert peer.request.startswith(b"POST /act HTTP/1.1\r\n") and b"Content-Length: 2\r\n" in peer.request


@pytest.mark.parametrize("answer, reason", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 99999\r\n\r\n", "too_large"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10000\r\n", "too_large"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhel", "truncated"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", "malformed"),
    (b"SSH-2.0-OpenSSH\r\n\r\n", "malformed"),
    (b"", "connection_lost"),
])
def test_broken_answers(answer, reason):
    peer = Peer(answer)
    try:
        with pytest.raises(HttpFailure) as err:
            exchange(peer, limit=1000)
    finally:
        peer.close()
    assert err.value.reason == reason, err.value


@pytest.mark.parametrize("answer, phase", [
    (b"HTTP/1.1 200 OK\r\nX-Pad: " + b"x" * 200 + b"\r\n\r\n", "head"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "body"),
])
def test_a_drip_is_cut_at_the_deadline_naming_the_phase(answer, phase):
    # a byte every 0.05 s: no single read waits long, the whole takes 10+ s; the head's drip stops in the head,
    # the body's waits for 5 bytes that never come after a head sent whole
    peer = Peer(answer, drip_s=0.05 if phase == "head" else 0.0, hold=True)
    try:
        with pytest.raises(HttpFailure) as err:
            exchange(peer, deadline_s=0.5)
    finally:
        peer.close()
    assert err.value.reason == "deadline" and f"during {phase}" in str(err.value)


def test_a_cancel_ends_the_wait():
    peer = Peer(b"", hold=True)
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    try:
        with pytest.raises(HttpFailure) as err:
            exchange(peer, deadline_s=60.0, cancelled=cancel.is_set)
    finally:
        peer.close()
    assert err.value.reason == "cancelled"


def test_nothing_listening_and_a_custom_error_type():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    with pytest.raises(LookupError) as err:
        Connection("127.0.0.1", port, time.monotonic() + 2.0, error=lambda reason, detail: LookupError(reason))
    assert err.value.args == ("connection_refused",)


def test_an_endpoint_is_parsed_from_its_url_and_a_bad_one_names_its_parameter():
    e = Endpoint.parse("https://gpu-host:8443/v1/chat/completions?x=1", "vlm_base_url")
    assert (e.host, e.port, e.tls, e.target, e.netloc) == ("gpu-host", 8443, True, "/v1/chat/completions?x=1",
                                                           "gpu-host:8443")
    assert Endpoint.parse("http://127.0.0.1").port == 80 and Endpoint.parse("http://127.0.0.1").target == "/"
    for bad in ("ftp://host/x", "http:///act", "http://host:99999/act", "http://host:0/act", "http://host/act#x"):
        with pytest.raises(ValueError, match="server_url"):
            Endpoint.parse(bad, "server_url")


def test_a_base_url_takes_no_query():
    assert check_base_url("http://gpu:8000/v1", "vlm_base_url").target == "/v1"
    with pytest.raises(ValueError, match="vlm_base_url .* has a query"):
        check_base_url("http://gpu:8000/v1?x=1", "vlm_base_url")
    with pytest.raises(ValueError, match="is not an http"):
        check_base_url("gpu:8000/v1", "vlm_base_url")
