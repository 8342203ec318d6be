"""AirSim's Python client on a thread of its own, every call bounded in time (ROS-free).

AirSim's client (`cosysairsim`, or `airsim` where that is what is installed) runs msgpack-rpc on a tornado /
asyncio loop that belongs to the thread that made it, and a call to a simulator that went away can block or
leave the client closed for good. `AirSimLink` makes the client on one worker thread and runs every call
there: the caller waits at most `timeout_s`, a failed or overdue call marks the link down (`LinkDown`), and
`connect()` makes a fresh client. `client()` returns a proxy with the client's own methods, so code written
against the client's API (drone_world.py) runs unchanged through the link.
"""

from __future__ import annotations

import importlib
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from types import ModuleType
from typing import Any, Optional


class LinkDown(RuntimeError):
    """The simulator did not answer: refused, lost, failed or overdue."""


def airsim_module() -> ModuleType:
    """The AirSim client package: cosysairsim (maintained), else airsim; ImportError naming both."""
    for name in ("cosysairsim", "airsim"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("neither cosysairsim nor airsim is installed (pip install cosysairsim)")


def continue_for(client: Any, seconds: float, limit_s: float, poll_s: float = 0.002) -> None:
    """Run a paused simulator for `seconds` of simulated time (simContinueForTime) and wait until it has paused
    again; LinkDown when it has not after `limit_s` of wall time."""
    client.simContinueForTime(seconds)
    deadline = time.monotonic() + limit_s
    while not client.simIsPause():
        if time.monotonic() > deadline:
            raise LinkDown(f"simContinueForTime({seconds}) did not pause again within {limit_s:.1f} s")
        time.sleep(poll_s)


class _ClientProxy:
    """The client's methods, each run on the link's thread."""

    def __init__(self, link: AirSimLink):
        self._link = link

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def call(*args, **kwargs):
            return self._link.call(lambda client: getattr(client, name)(*args, **kwargs), name)
        return call


class AirSimLink:
    """One MultirotorClient to host:port on a worker thread; calls bounded by `timeout_s`."""

    def __init__(self, host: str, port: int, timeout_s: float, module: Optional[ModuleType] = None):
        self.host, self.port, self.timeout_s = host, port, timeout_s
        self.module = module or airsim_module()
        self._jobs: queue.Queue = queue.Queue()
        self._client: Any = None
        self._busy = threading.Event()
        self.up = False
        self.last_error = ""
        self.calls = self.failures = 0
        self._thread = threading.Thread(target=self._work, name=f"airsim-link-{port}", daemon=True)
        self._thread.start()

    def vector(self, x: float, y: float, z: float) -> Any:
        """An AirSim Vector3r."""
        return self.module.Vector3r(float(x), float(y), float(z))

    def client(self) -> _ClientProxy:
        """The client's API, every method run on the link's thread."""
        return _ClientProxy(self)

    def connect(self) -> str:
        """Make a fresh client and ping the simulator; its server version, or LinkDown."""
        def make(_):
            self._close_client()
            # The client's own request timeout (its timer runs while a call waits) backs up the link's bound.
            self._client = self.module.MultirotorClient(ip=self.host, port=self.port,
                                                        timeout_value=max(1, int(self.timeout_s + 0.999)))
            if not self._client.ping():
                raise LinkDown("ping returned false")
            return self._client.getServerVersion()
        version = self._run(make, "connect", need_client=False)
        self.up = True
        return str(version)

    def call(self, fn: Callable[[Any], Any], what: str = "call") -> Any:
        """fn(client) on the link's thread; LinkDown when the link is down, the call fails or overruns."""
        if not self.up:
            raise LinkDown(f"{what}: not connected ({self.last_error or 'never connected'})")
        return self._run(fn, what)

    def flush(self) -> None:
        """Send the requests the client's async calls queued (they go out only when its loop next runs)."""
        self.call(lambda client: client.ping(), "flush")

    def close(self) -> None:
        """Close the client and stop the worker thread."""
        self.up = False
        self._jobs.put(None)
        self._thread.join(timeout=self.timeout_s + 1.0)

    # ------------------------------------------------------------------ worker

    def _run(self, fn: Callable[[Any], Any], what: str, need_client: bool = True) -> Any:
        if self._busy.is_set():
            self._down(f"{what}: an earlier call has not returned")
            raise LinkDown(self.last_error)
        done: Future = Future()
        self._jobs.put((fn, done, need_client))
        self.calls += 1
        try:
            return done.result(timeout=self.timeout_s)
        except LinkDown as exc:
            self._down(f"{what}: {exc}")
        except FutureTimeout:
            self._down(f"{what}: no answer within {self.timeout_s:.1f} s")
        except Exception as exc:  # the client raises RPCError, TransportError, OSError, ...
            self._down(f"{what}: {type(exc).__name__}: {exc}")
        raise LinkDown(self.last_error)

    def _down(self, reason: str) -> None:
        self.up = False
        self.failures += 1
        self.last_error = reason

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                self._close_client()
                return
            fn, done, need_client = job
            self._busy.set()
            try:
                if need_client and self._client is None:
                    raise LinkDown("no client")
                done.set_result(fn(self._client))
            except BaseException as exc:  # handed to the caller, never kills the worker
                done.set_exception(exc)
            finally:
                self._busy.clear()

    def _close_client(self) -> None:
        if self._client is not None:
            try:
                self._client.client.close()  # the client has no close() of its own; its msgpack-rpc session has
                self._client.client._loop.dettach_periodic_callback()  # its 1 s timeout timer stays on the loop
            except Exception as exc:  # a client whose transport already failed has nothing left to close
                self.last_error = self.last_error or f"close: {type(exc).__name__}: {exc}"
            self._client = None
