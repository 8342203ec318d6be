"""Serving HTTP on this host: the stack's own small servers (the twin's /act) and the protocol-level peers of tests.

`LocalHTTPServer` runs a `BaseHTTPRequestHandler` class on a threaded server (daemon request threads) in a
background thread; `answer` sends one complete response and survives a client that went away before it.
"""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

POLL_INTERVAL_S = 0.05
"""How often the serving thread looks for a stop request (and how long `stop` waits for it at most, about)."""


def free_port() -> int:
    """A TCP port nothing listens on at 127.0.0.1 right now (for a server whose port must be named up front)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def answer(handler: BaseHTTPRequestHandler, status: int, body: bytes, content_type: str = "application/json",
           headers: Optional[dict[str, str]] = None) -> bool:
    """Send one response with its Content-Length; False (and the connection closes) when the client has gone."""
    try:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        handler.end_headers()
        handler.wfile.write(body)
        return True
    except OSError:  # the client gave up (its timeout, a cancel) before the answer
        handler.close_connection = True
        return False


class _Server(ThreadingHTTPServer):
    daemon_threads = True


class LocalHTTPServer:
    """`handler` served on `host`:`port` (0: a free port, see `port` once started) in a background thread; a context
    manager. `attributes` are set on the server object, where handlers reach them as `self.server.<name>`."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], port: int = 0, host: str = "127.0.0.1",
                 name: str = "http", **attributes: Any) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self.name = name
        self.attributes = attributes
        self._server: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None

    def start(self) -> LocalHTTPServer:
        """Bind and serve (returns self); OSError when the port is taken."""
        if self._server is not None:
            raise RuntimeError("the server is already running")
        server = _Server((self.host, self.port), self.handler)
        for key, value in self.attributes.items():
            setattr(server, key, value)
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": POLL_INTERVAL_S},
                                        name=f"{self.name}:{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (requests in progress finish in their daemon threads)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None

    @property
    def running(self) -> bool:
        """Whether the server is serving (started and not stopped)."""
        return self._server is not None

    def url(self, path: str = "") -> str:
        """http://host:port followed by `path`."""
        return f"http://{self.host}:{self.port}{path}"

    def __enter__(self) -> LocalHTTPServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
