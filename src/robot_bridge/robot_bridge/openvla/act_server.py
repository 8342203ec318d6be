"""ActServer: an HTTP server on 127.0.0.1 that speaks the protocol of OpenVLA's deploy server.

It stands in for the 7B model at the protocol level (tests, the closed loop without a GPU): the
executor's ServerBackend talks to it exactly as to `vla-scripts/deploy.py`. The actions come from
a policy callable `(image, instruction, unnorm_key) -> np.ndarray (7,)`.

Protocol (as upstream): POST /act with a json_numpy body {"image": uint8 (H, W, 3),
"instruction": str, "unnorm_key": str (optional)}, or {"encoded": "<the same as a JSON string>"};
the answer is the action as json_numpy (HTTP 200). When anything fails (a malformed body, the
policy raising, a policy answer that is not 7 finite numbers) the answer is the JSON string
"error" with HTTP 200, as the upstream server answers. Another path is 404, another method 405.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Optional

import json_numpy
import numpy as np

from brace_common.local_http import LocalHTTPServer, answer

from .vla_action import ACTION_DIM, check_action

Policy = Callable[[np.ndarray, str, Optional[str]], np.ndarray]
"""(image (H, W, 3) uint8, instruction, unnorm_key or None) -> action (7,)."""
MAX_BODY_BYTES = 64 << 20
"""A 1080p image in json_numpy is about 8 MB."""
ACT_PATH = "/act"

log = logging.getLogger(__name__)


def _parse_request(raw: bytes) -> tuple[np.ndarray, str, Optional[str]]:
    payload = json_numpy.loads(raw.decode())
    if isinstance(payload, dict) and "encoded" in payload:
        if len(payload) != 1:
            raise ValueError("an 'encoded' payload has no other keys")
        payload = json_numpy.loads(payload["encoded"])
    if not isinstance(payload, dict):
        raise ValueError("the body is not a JSON object")
    image, instruction = payload["image"], payload["instruction"]
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"image must be uint8 (H, W, 3), got {getattr(image, 'dtype', type(image).__name__)} "
                         f"{getattr(image, 'shape', '')}")
    if not isinstance(instruction, str):
        raise ValueError("instruction must be a string")
    unnorm_key = payload.get("unnorm_key")
    if unnorm_key is not None and not isinstance(unnorm_key, str):
        raise ValueError("unnorm_key must be a string")
    return image, instruction, unnorm_key


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _answer(self, status: int, body: bytes) -> None:
        answer(self, status, body)

    def _body(self) -> bytes | None:
        """The request body (b'' without one); None, and the connection closes after the answer, when it is too large."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY_BYTES:
            self.close_connection = True
            return None
        return self.rfile.read(length) if length else b""

    def do_POST(self) -> None:  # noqa: N802 - the name http.server dispatches to
        raw = self._body()
        if self.path.split("?", 1)[0] != ACT_PATH:
            self._answer(404, b'{"detail":"Not Found"}')
            return
        owner: ActServer = self.server.owner  # type: ignore[attr-defined] - LocalHTTPServer's attribute
        try:
            if raw is None:
                raise ValueError(f"the body's length is invalid or above {MAX_BODY_BYTES} bytes")
            image, instruction, unnorm_key = _parse_request(raw)
            action = check_action(owner.policy(image, instruction, unnorm_key), ACTION_DIM)
        except Exception as exc:  # noqa: BLE001 - like upstream: every failure is answered "error"
            log.warning("act request failed: %s: %s", type(exc).__name__, exc)
            owner.count(error=True, failure=f"{type(exc).__name__}: {exc}")
            self._answer(200, b'"error"')
            return
        owner.count(error=False)
        self._answer(200, json_numpy.dumps(action).encode())

    def _not_allowed(self) -> None:
        self._body()
        self._answer(405, b'{"detail":"Method Not Allowed"}')

    do_GET = do_PUT = do_DELETE = _not_allowed  # noqa: N815

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
        log.debug("%s %s", self.address_string(), format % args)


class ActServer:
    """A threaded /act server on 127.0.0.1 around a policy; port 0 takes a free port (see `url`)."""

    def __init__(self, policy: Policy, port: int = 0, host: str = "127.0.0.1"):
        self.policy = policy
        self.host = host
        self._http = LocalHTTPServer(_Handler, port, host, name="act_server", owner=self)
        self._lock = threading.Lock()
        self.requests = 0
        self.errors = 0
        self.last_failure = ""

    @property
    def port(self) -> int:
        """The port (the one taken, once started on port 0)."""
        return self._http.port

    def count(self, error: bool, failure: str = "") -> None:
        """Count one answered request (called by the request handler threads)."""
        with self._lock:
            self.requests += 1
            if error:
                self.errors += 1
                self.last_failure = failure or self.last_failure

    def start(self) -> ActServer:
        """Bind and serve in a background thread (returns self)."""
        self._http.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (requests in progress finish in their daemon threads)."""
        self._http.stop()

    @property
    def running(self) -> bool:
        """Whether the server is serving (started and not stopped)."""
        return self._http.running

    @property
    def url(self) -> str:
        """The /act URL to give a ServerBackend (server_url)."""
        if not self._http.running:
            raise RuntimeError("the server is not running")
        return self._http.url(ACT_PATH)

    def __enter__(self) -> ActServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
