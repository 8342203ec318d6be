"""HTTP/1.1 exchanges on a plain socket, every wait bounded by one total deadline (no ROS).

A socket timeout bounds each read, not the request: a server that sends a byte a second never
trips it. Here no blocking call waits longer than `poll_s`, and before each the deadline and a
cancel flag are checked, so an exchange ends by its deadline (plus one poll) whatever the peer
does: connect, TLS handshake, send, status line and headers, body. Failures are raised through
the connection's `error(reason, detail)` factory (default `HttpFailure`) with a reason of REASONS;
`Connection.phase` says where a `deadline` struck and `received` how many bytes had come back.
A host name is resolved by the system resolver before the deadline applies: use an address where
that matters.
"""

from __future__ import annotations

import select
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Optional
from urllib.parse import urlsplit

REASONS = ("connection_refused", "connect_timeout", "connection_lost", "deadline", "cancelled", "truncated",
           "malformed", "too_large")
"""Why an exchange failed (the `reason` given to the error factory)."""
PHASES = ("connect", "send", "head", "body")
"""Where an exchange is: `Connection.phase`."""
POLL_S = 0.05
"""Longest blocking socket wait: how soon a cancel or a passed deadline is seen."""


@dataclass(frozen=True)
class Endpoint:
    """Where an http(s) URL's requests go: host, port, TLS, the request target and the Host header."""

    host: str
    port: int
    tls: bool
    target: str
    netloc: str

    @classmethod
    def parse(cls, url: str, label: str = "url") -> Endpoint:
        """The endpoint of `url`; ValueError naming `label` when it is not http(s)://host[:port][/path][?query]: the
        one check of every server URL in the stack's parameters. A fragment (no request carries it) and port 0 (no
        server listens there) are refused, not dropped or replaced by the scheme's port."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.fragment or "#" in url:
            raise ValueError(f"{label} '{url}' is not an http(s)://host[:port][/path][?query] URL")
        tls = parts.scheme == "https"
        try:
            port = parts.port
        except ValueError as exc:           # a port that is not a number, or out of range
            raise ValueError(f"{label} '{url}' has a bad port: {exc}") from None
        if port == 0:
            raise ValueError(f"{label} '{url}' has a bad port: 0 is no server's")
        port = port or (443 if tls else 80)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return cls(parts.hostname, port, tls, target, parts.netloc)


def check_base_url(url: str, label: str = "base_url") -> Endpoint:
    """The endpoint of an API's base URL (the API's paths are appended to it): Endpoint.parse's URL without a query;
    ValueError naming `label` otherwise."""
    endpoint = Endpoint.parse(url, label)
    if "?" in endpoint.target:
        raise ValueError(f"{label} '{url}' has a query: a base URL takes none (the API's paths are appended to it)")
    return endpoint


class HttpFailure(Exception):
    """A failed exchange; `reason` is one of REASONS."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


ErrorFactory = Callable[[str, str], Exception]


class Connection:
    """One HTTP/1.1 exchange with host:port whose every wait checks `deadline` (time.monotonic) and `cancelled`."""

    def __init__(self, host: str, port: int, deadline: float, tls: bool = False,
                 cancelled: Callable[[], bool] = lambda: False, connect_timeout_s: float = 3600.0,
                 error: ErrorFactory = HttpFailure, poll_s: float = POLL_S):
        self.deadline, self.cancelled, self.error, self.poll_s = deadline, cancelled, error, poll_s
        self.phase = "connect"
        self.received = 0
        self.buffer = b""
        timeout = max(0.001, min(connect_timeout_s, deadline - time.monotonic()))
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except ConnectionRefusedError as exc:
            raise error("connection_refused", f"{host}:{port} ({exc.strerror})") from None
        except TimeoutError:
            raise error("deadline" if time.monotonic() >= deadline else "connect_timeout",
                        f"no connection to {host}:{port} within {timeout:.2f} s") from None
        except OSError as exc:
            raise error("connection_refused", f"{host}:{port}: {exc}") from None
        self.sock = sock
        if tls:
            self._handshake(host, port)
        self.sock.settimeout(poll_s)

    def _handshake(self, host: str, port: int) -> None:
        """TLS on the connected socket, the handshake bounded by the deadline (a socket timeout bounds one read)."""
        try:
            self.sock = ssl.create_default_context().wrap_socket(self.sock, server_hostname=host,
                                                                 do_handshake_on_connect=False)
            self.sock.setblocking(False)
            while True:
                self.check()
                try:
                    self.sock.do_handshake()
                    return
                except ssl.SSLWantReadError:
                    select.select([self.sock], [], [], self.poll_s)
                except ssl.SSLWantWriteError:
                    select.select([], [self.sock], [], self.poll_s)
        except (OSError, ssl.SSLError) as exc:
            self.close()
            raise self.error("connection_lost", f"TLS to {host}:{port}: {exc}") from None
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Close the socket (the server sees the client go)."""
        try:
            self.sock.close()
        except OSError:
            pass

    def check(self) -> None:
        """Raise `cancelled` or `deadline` when the exchange must stop now."""
        if self.cancelled():
            raise self.error("cancelled", "the request was cancelled")
        if time.monotonic() >= self.deadline:
            raise self.error("deadline", f"the deadline passed during {self.phase} ({self.received} bytes received)")

    def send(self, data: bytes) -> None:
        """Write all of `data` before the deadline."""
        self.phase = "send"
        view = memoryview(data)
        while view:
            self.check()
            try:
                sent = self.sock.send(view)
            except TimeoutError:
                continue
            except OSError as exc:
                raise self.error("connection_lost", f"while sending: {exc}") from None
            view = view[sent:]

    def _fill(self) -> bool:
        """Read more bytes into the buffer; False at end of stream."""
        while True:
            self.check()
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError as exc:
                raise self.error("connection_lost", f"while reading: {exc}") from None
            if not data:
                return False
            self.received += len(data)
            self.buffer += data
            return True

    def read_until(self, marker: bytes, limit: int) -> Optional[bytes]:
        """Bytes up to and including `marker`; None if the stream ends first; `too_large` past `limit` bytes."""
        while marker not in self.buffer:
            if len(self.buffer) > limit:
                raise self.error("too_large", f"more than {limit} bytes without {marker!r}")
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
        """Whatever arrives next (a body without a length); None at end of stream."""
        if not self.buffer and not self._fill():
            return None
        data, self.buffer = self.buffer, b""
        return data

    def request(self, method: str, target: str, host_header: str, headers: dict[str, str],
                body: bytes = b"") -> None:
        """Send one request (`Connection: close`; Content-Length when there is a body)."""
        lines = [f"{method} {target} HTTP/1.1", f"Host: {host_header}", "Connection: close",
                 *(f"{k}: {v}" for k, v in headers.items())]
        if body or method in ("POST", "PUT"):
            lines.append(f"Content-Length: {len(body)}")
        self.send(("\r\n".join(lines) + "\r\n\r\n").encode() + body)

    def read_head(self, limit: int = 65536) -> tuple[int, dict[str, str]]:
        """The status code and the headers (names lower-cased) of the answer."""
        self.phase = "head"
        head = self.read_until(b"\r\n\r\n", limit)
        if head is None:
            raise self.error("connection_lost", "the server closed the connection before answering")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        try:
            status = int(status_line.split(" ", 2)[1])
        except (IndexError, ValueError):
            raise self.error("malformed", f"not an HTTP status line: {status_line[:80]!r}") from None
        headers = {}
        for line in header_lines:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        self.phase = "body"
        return status, headers

    def body(self, headers: dict[str, str], limit: int) -> Iterator[bytes]:
        """The answer's body in pieces as they arrive (chunked, Content-Length or until close), at most `limit` bytes."""
        if "chunked" in headers.get("transfer-encoding", "").lower():
            total = 0
            while True:
                size_line = self.read_until(b"\r\n", 1024)
                if size_line is None:
                    raise self.error("truncated", "the stream ended inside a chunk header")
                try:
                    size = int(size_line.split(b";")[0].strip(), 16)
                except ValueError:
                    raise self.error("truncated", f"bad chunk size {size_line[:20]!r}") from None
                if size == 0:
                    return
                total += size
                if total > limit:
                    raise self.error("too_large", f"a chunked body of more than {limit} bytes")
                data = self.read_exactly(size + 2)
                if data is None:
                    raise self.error("truncated", "the stream ended inside a chunk")
                yield data[:-2]
        elif "content-length" in headers:
            try:
                length = int(headers["content-length"])
            except ValueError:
                raise self.error("malformed", "bad Content-Length") from None
            if length < 0 or length > limit:
                raise self.error("too_large", f"a {length}-byte body (at most {limit})")
            data = self.read_exactly(length)
            if data is None:
                raise self.error("truncated", f"the body ended before its {length} bytes")
            yield data
        else:
            total = 0
            while (data := self.read_available()) is not None:
                total += len(data)
                if total > limit:
                    raise self.error("too_large", f"a body of more than {limit} bytes")
                yield data
