"""A small threaded msgpack-rpc server and client over TCP (the wire protocol AirSim's clients speak).

Frames are msgpack arrays: a request `[0, msgid, method, params]` gets a response
`[1, msgid, error, result]`; a notification `[2, method, params]` gets none. A handler
is called with the params as positional arguments on the connection's reader thread;
it may return a `Deferred` that is completed later from any thread, so one connection
can have a slow call (an AirSim motion command) in flight while its later calls are
answered. Errors travel as strings in the error slot, which msgpackrpc's client raises
as `RPCError(message)`. A frame that is not msgpack closes its connection; a handler
that raises gets an error reply; neither stops the server. A server with a `fallback` hands it every
method it has no handler for (a proxy forwards those). `MsgpackRpcClient` keeps many calls in flight on one
connection, each answered by its msgid.
"""

from __future__ import annotations

import inspect
import logging
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Optional

import msgpack

from brace_common.counters import Counters

REQUEST, RESPONSE, NOTIFY = 0, 1, 2
"""Message types of the msgpack-rpc specification."""
COUNTS = ("errors", "malformed", "connections")
"""The server's own counters besides one per method (a served method is declared when registered, a method no handler
serves when it is first called)."""

_READ_CHUNK = 65536
_MAX_BUFFER = 64 * 1024 * 1024

log = logging.getLogger(__name__)


class RpcError(Exception):
    """An error a handler reports to the caller: its message goes into the response's error slot."""


class Deferred:
    """A reply that is not ready when the handler returns; `resolve` or `fail` sends it (once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._outcome: Optional[tuple[Any, Any]] = None
        self._sink: Optional[Callable[[Any, Any], None]] = None

    @property
    def done(self) -> bool:
        """Whether the reply has been decided."""
        with self._lock:
            return self._outcome is not None

    @property
    def outcome(self) -> Optional[tuple[Any, Any]]:
        """(error, result) once decided, else None."""
        with self._lock:
            return self._outcome

    def resolve(self, result: Any = None) -> bool:
        """Reply with `result`; False when the reply was already decided."""
        return self._complete(None, result)

    def fail(self, message: str) -> bool:
        """Reply with an error message; False when the reply was already decided."""
        return self._complete(str(message), None)

    def result(self, timeout_s: float, what: str = "the reply") -> Any:
        """Wait for the outcome: the result; RpcError with the error, TimeoutError after `timeout_s`."""
        done, outcome = threading.Event(), []
        self.attach(lambda error, result: (outcome.extend((error, result)), done.set()))
        if not done.wait(timeout_s):
            raise TimeoutError(f"{what} not answered within {timeout_s:g} s")
        error, result = outcome
        if error is not None:
            raise RpcError(str(error))
        return result

    def attach(self, sink: Callable[[Any, Any], None]) -> None:
        """Deliver the outcome to `sink(error, result)`: now if decided, else when it is."""
        with self._lock:
            if self._outcome is None:
                self._sink = sink
                return
            outcome = self._outcome
        sink(*outcome)

    def _complete(self, error: Any, result: Any) -> bool:
        with self._lock:
            if self._outcome is not None:
                return False
            self._outcome = (error, result)
            sink, self._sink = self._sink, None
        if sink is not None:
            sink(error, result)
        return True


class _Connection:
    """One accepted socket: its reader thread and a lock that keeps replies from interleaving."""

    def __init__(self, sock: socket.socket, peer: tuple, server: MsgpackRpcServer) -> None:
        self.sock = sock
        self.peer = peer
        self.server = server
        self.write_lock = threading.Lock()
        self._close_lock = threading.Lock()
        self.closed = False
        self.thread = threading.Thread(target=self._serve, name=f"{server.name}-conn-{peer[1]}", daemon=True)

    def send(self, message: list) -> bool:
        """Pack and send one frame; False when it could not be sent (connection gone, unpackable result)."""
        try:
            data = msgpack.packb(message, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as exc:
            log.error("%s: cannot pack reply %r: %s", self.server.name, message[:2], exc)
            self.server.count("errors")
            if message[0] != RESPONSE:
                return False
            data = msgpack.packb([RESPONSE, message[1], f"server could not pack the result: {exc}", None],
                                 use_bin_type=True)
        with self.write_lock:
            if self.closed:
                return False
            try:
                self.sock.sendall(data)
                return True
            except OSError as exc:
                log.debug("%s: send to %s failed: %s", self.server.name, self.peer, exc)
                return False

    def reply(self, msgid: int, error: Any, result: Any) -> None:
        """Send the response to request `msgid`."""
        if error is not None:
            self.server.count("errors")
            result = None
        self.send([RESPONSE, msgid, error, result])

    def close(self) -> None:
        """Shut the socket down (wakes the reader thread and a send blocked on a client that does not read)."""
        with self._close_lock:
            if self.closed:
                return
            self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def _serve(self) -> None:
        try:
            for frame in _frames(self.sock):
                if not self.server.dispatch(self, frame):
                    return
        except (ValueError, msgpack.UnpackException) as exc:
            # The byte stream cannot be resynchronised after a bad frame: drop the connection.
            log.warning("%s: malformed msgpack from %s: %s; closing the connection", self.server.name, self.peer, exc)
            self.server.count("malformed")
        except Exception:
            log.exception("%s: connection %s failed", self.server.name, self.peer)
            self.server.count("errors")
        finally:
            self.close()
            self.server.forget(self)


def _frames(sock: socket.socket) -> Iterator[Any]:
    """The msgpack frames arriving on `sock` until it closes; ValueError / UnpackException at a malformed one."""
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=_MAX_BUFFER)
    while True:
        try:
            data = sock.recv(_READ_CHUNK)
        except OSError:
            return
        if not data:
            return
        unpacker.feed(data)
        yield from unpacker


class MsgpackRpcServer:
    """Serves `handlers` (method name -> callable) to msgpack-rpc clients, one thread per connection."""

    def __init__(self, handlers: Mapping[str, Callable[..., Any]], host: str = "127.0.0.1", port: int = 0,
                 name: str = "msgpack-rpc", log_size: int = 10000,
                 fallback: Optional[Callable[[str, list], Any]] = None) -> None:
        self.host = host
        self.fallback = fallback  # fallback(method, params) serves a method without a handler
        self.name = name
        self._requested_port = port
        self._handlers: dict[str, tuple[Callable[..., Any], Optional[inspect.Signature]]] = {}
        self._counts = Counters(COUNTS)
        for method, handler in handlers.items():
            self.register(method, handler)
        self._lock = threading.Lock()
        self._received: deque = deque(maxlen=log_size)
        self._connections: set[_Connection] = set()
        self._listener: Optional[socket.socket] = None
        self._accept_thread: Optional[threading.Thread] = None
        self._stopping = threading.Event()

    # ------------------------------------------------------------------ lifecycle

    def register(self, method: str, handler: Callable[..., Any]) -> None:
        """Serve `method` with `handler` (called with the request's params as positional arguments)."""
        try:
            signature: Optional[inspect.Signature] = inspect.signature(handler)
        except (TypeError, ValueError):
            signature = None
        self._handlers[method] = (handler, signature)
        self._counts.declare(method)

    def start(self) -> None:
        """Bind and start accepting connections (port 0 binds a free port)."""
        if self._listener is not None:
            raise RuntimeError(f"{self.name} is already started")
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((self.host, self._requested_port))
            listener.listen(16)
        except OSError:
            listener.close()
            raise
        # accept() polls so stop() does not depend on closing a socket from another thread waking it.
        listener.settimeout(0.1)
        self._stopping.clear()
        self._listener = listener
        self._accept_thread = threading.Thread(target=self._accept_loop, name=f"{self.name}-accept", daemon=True)
        self._accept_thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop accepting, close every connection and join the threads."""
        if self._listener is None:
            return
        self._stopping.set()
        if self._accept_thread is not None:
            self._accept_thread.join(timeout)
        self._listener.close()
        self._listener = None
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            conn.close()
        for conn in connections:
            if conn.thread is not threading.current_thread():
                conn.thread.join(timeout)

    @property
    def port(self) -> int:
        """The bound port (after start)."""
        if self._listener is None:
            raise RuntimeError(f"{self.name} is not started")
        return self._listener.getsockname()[1]

    @property
    def running(self) -> bool:
        """Whether the server is accepting connections."""
        return self._listener is not None

    @property
    def connections(self) -> int:
        """Currently open connections."""
        with self._lock:
            return len(self._connections)

    # ------------------------------------------------------------------ bookkeeping

    def count(self, key: str, n: int = 1) -> None:
        """Add to a declared counter (COUNTS, or a method's)."""
        self._counts.add(key, n)

    @property
    def counts(self) -> Counters:
        """The counters: calls per method, 'errors' (error replies), 'malformed', 'connections'."""
        return self._counts

    @property
    def received(self) -> list[tuple[str, list]]:
        """The latest (method, params) received, oldest first (bounded by log_size)."""
        with self._lock:
            return list(self._received)

    def forget(self, conn: _Connection) -> None:
        """Drop a closed connection from the open set."""
        with self._lock:
            self._connections.discard(conn)

    # ------------------------------------------------------------------ serving

    def _accept_loop(self) -> None:
        assert self._listener is not None
        listener = self._listener
        while not self._stopping.is_set():
            try:
                sock, peer = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stopping.is_set():
                    return
                log.exception("%s: accept failed", self.name)
                continue
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Connection(sock, peer, self)
            with self._lock:
                if self._stopping.is_set():
                    sock.close()
                    return
                self._connections.add(conn)
            self._counts.add("connections")
            conn.thread.start()

    def dispatch(self, conn: _Connection, frame: Any) -> bool:
        """Handle one decoded frame; False when the connection must be closed."""
        if not isinstance(frame, (list, tuple)) or not frame or frame[0] not in (REQUEST, NOTIFY):
            return self._malformed(conn, frame, "not a request or notification")
        if frame[0] == NOTIFY:
            if len(frame) != 3:
                return self._malformed(conn, frame, "a notification has 3 elements")
            _, method, params = frame
            try:
                result = self._call(method, params)
            except RpcError as exc:
                log.warning("%s: notification %.100r failed: %s", self.name, method, exc)
                self.count("errors")
            else:
                if isinstance(result, Deferred):
                    result.attach(lambda error, value: None)
            return True
        if len(frame) != 4 or not isinstance(frame[1], int) or isinstance(frame[1], bool):
            return self._malformed(conn, frame, "a request has 4 elements and an integer msgid")
        _, msgid, method, params = frame
        try:
            result = self._call(method, params)
        except RpcError as exc:
            conn.reply(msgid, str(exc), None)
            return True
        if isinstance(result, Deferred):
            result.attach(lambda error, value: conn.reply(msgid, error, value))
        else:
            conn.reply(msgid, None, result)
        return True

    def _malformed(self, conn: _Connection, frame: Any, why: str) -> bool:
        log.warning("%s: malformed frame from %s (%s): %.200r; closing the connection", self.name, conn.peer, why,
                    frame)
        self.count("malformed")
        return False

    def _call(self, method: Any, params: Any) -> Any:
        """Run a handler; RpcError for anything the caller did wrong or the handler raised."""
        if not isinstance(method, str):
            self.count("malformed")
            raise RpcError(f"method name must be a string, got {method!r}")
        if not isinstance(params, (list, tuple)):
            self.count("malformed")
            raise RpcError(f"params of '{method}' must be an array, got {type(params).__name__}")
        entry = self._handlers.get(method)
        if entry is None:
            self._counts.declare(method)  # a client's unknown method: counted by its name, as a served one
        self._counts.add(method)
        with self._lock:
            self._received.append((method, list(params)))
        if entry is None and self.fallback is not None:
            return self.fallback(method, list(params))
        if entry is None:
            raise RpcError(f"unknown method '{method}' (with {len(params)} arguments)")
        handler, signature = entry
        if signature is not None:
            try:
                signature.bind(*params)
            except TypeError as exc:
                raise RpcError(f"'{method}' called with {len(params)} arguments: {exc}") from None
        try:
            return handler(*params)
        except RpcError:
            raise
        except Exception as exc:
            log.exception("%s: handler of '%s' failed", self.name, method)
            raise RpcError(f"'{method}' failed: {type(exc).__name__}: {exc}") from exc


class MsgpackRpcClient:
    """One connection to a msgpack-rpc server with any number of calls in flight (`call` returns a Deferred that the
    response decides); `call_sync` waits for one. A lost connection fails every call in flight."""

    def __init__(self, host: str, port: int, timeout_s: float = 5.0, name: str = "msgpack-rpc-client") -> None:
        self.name = name
        self._sock = socket.create_connection((host, port), timeout=timeout_s)
        self._sock.settimeout(None)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._lock = threading.Lock()
        self._pending: dict[int, Deferred] = {}
        self._next = 0
        self.closed = False
        self._reader = threading.Thread(target=self._read, name=f"{name}-reader", daemon=True)
        self._reader.start()

    def call(self, method: str, *params: Any) -> Deferred:
        """Send a request; its Deferred is resolved with the result or failed with the server's error."""
        deferred = Deferred()
        with self._lock:
            if self.closed:
                deferred.fail(f"{self.name}: not connected")
                return deferred
            msgid, self._next = self._next, (self._next + 1) % (1 << 31)
            self._pending[msgid] = deferred
            try:
                self._sock.sendall(msgpack.packb([REQUEST, msgid, method, list(params)], use_bin_type=True))
            except OSError as exc:
                self._pending.pop(msgid, None)
                deferred.fail(f"{self.name}: send failed: {exc}")
        return deferred

    def call_sync(self, method: str, *params: Any, timeout_s: float = 5.0) -> Any:
        """The result of one call; RpcError with the server's error, TimeoutError after `timeout_s`."""
        return self.call(method, *params).result(timeout_s, f"{self.name}: {method}")

    def close(self) -> None:
        """Close the connection; calls in flight fail."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()

    def _read(self) -> None:
        try:
            for frame in _frames(self._sock):
                if isinstance(frame, (list, tuple)) and len(frame) == 4 and frame[0] == RESPONSE:
                    with self._lock:
                        deferred = self._pending.pop(frame[1], None)
                    if deferred is not None:
                        deferred._complete(frame[2], frame[3] if frame[2] is None else None)
        except (ValueError, msgpack.UnpackException) as exc:
            log.warning("%s: malformed msgpack from the server: %s; closing", self.name, exc)
        finally:
            self.close()
            with self._lock:
                pending, self._pending = list(self._pending.values()), {}
            for deferred in pending:
                deferred.fail(f"{self.name}: connection lost")
