"""A misbehaving OpenVLA deploy server on 127.0.0.1 at the socket level: it drips, stalls, or answers raw bytes.

The executor's tests and the fuzz harness's drip attack run it where ActServer (a well-behaved /act) cannot go:
an answer that comes one byte every `drip_s` (each byte well inside any per-read timeout, the whole far beyond
any deadline), a server that takes the request and never answers, one that never reads the request, and answers
that are not real numbers (`raw` bytes, e.g. a complex json_numpy action). `mode` can change at any time; it
applies to the next request, while requests already dripping go on dripping (as a real stuck server's would)
until `close()`.
"""

from __future__ import annotations

import json
import socket
import threading
from collections import Counter

MODES = ("normal", "drip_body", "drip_head", "silent", "no_read", "raw")


class DripServer:
    """Answers POST /act per `mode`: normal (`action` at once), drip_body, drip_head, silent, no_read, raw (`raw`)."""

    def __init__(self, mode: str = "drip_body", action=(0.001, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0), drip_s: float = 0.1):
        self.mode = mode
        self.action = [float(a) for a in action]  # a plain JSON list: json_numpy reads it as the action array
        self.raw = b""
        self.drip_s = drip_s
        self.requests = 0          # requests read
        self.requests_by_mode: Counter[str] = Counter()  # requests read, by the mode that answered them
        self.answered = 0          # answers sent whole
        self.disconnects = 0       # a drip or answer the client did not wait for
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/act"
        threading.Thread(target=self._accept, daemon=True, name=f"drip_server:{self.port}").start()

    def close(self) -> None:
        """Stop every drip and the listener."""
        self.stop.set()
        self.sock.close()

    def __enter__(self) -> DripServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _read_request(self, conn: socket.socket, mode: str) -> bool:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            rest += chunk
        with self.lock:
            self.requests += 1
            self.requests_by_mode[mode] += 1
        return True

    def _serve(self, conn: socket.socket) -> None:
        mode = self.mode
        with conn:
            try:
                if mode == "no_read":
                    self.stop.wait()
                    return
                if not self._read_request(conn, mode):
                    return
                body = self.raw if mode == "raw" else json.dumps(self.action).encode()
                head = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                        "Connection: close\r\n\r\n").encode()
                if mode == "silent":
                    self.stop.wait()
                    return
                if mode in ("normal", "raw"):
                    conn.sendall(head + body)
                elif mode == "drip_body":
                    conn.sendall(head)
                    if not self._drip(conn, body):
                        return
                else:  # drip_head
                    if not self._drip(conn, head + body):
                        return
                with self.lock:
                    self.answered += 1
            except OSError:
                with self.lock:
                    self.disconnects += 1

    def _drip(self, conn: socket.socket, data: bytes) -> bool:
        for i in range(len(data)):
            if self.stop.wait(self.drip_s):
                return False
            conn.sendall(data[i:i + 1])
        return True
