"""Rerun's web viewer served on one address (127.0.0.1 unless asked): the viewer's own server, run from the wheel.

The SDK's `serve_grpc` / `serve_web_viewer` bind every interface; the wheel's command line takes `--bind`, so the
server runs as a child process: `rerun --serve-web --bind HOST --port GRPC --web-viewer-port WEB [files]`. It serves
the viewer (wasm + js, from the wheel: nothing is downloaded) over HTTP and a gRPC proxy that a logging process
connects to (`grpc_url`) and that hands what it holds to every browser that opens `url`.
"""

from __future__ import annotations

import ctypes
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

import rerun_cli

LOOPBACK = "127.0.0.1"
PR_SET_PDEATHSIG = 1
"""prctl(2): the signal a process gets when its parent dies."""
START_TIMEOUT_S = 60.0
"""How long the server may take to listen (it loads the files it serves first)."""
MEMORY_LIMIT = "1GiB"
"""What the server keeps for browsers that connect late; beyond it the oldest data is dropped."""


class ViewerError(RuntimeError):
    """The viewer's server could not start."""


_PRCTL = ctypes.CDLL(None).prctl if sys.platform.startswith("linux") else None
"""libc's prctl, looked up here: the child between fork and exec only calls it (no loading there)."""


def _dies_with_parent() -> None:
    """In the server's process before it starts: on Linux, SIGTERM when the process that started it dies (a killed
    brace-run or brace-audit must not leave the server holding its ports)."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM)


def _reachable(host: str) -> str:
    return LOOPBACK if host in ("0.0.0.0", "::") else host


def grpc_url(host: str, grpc_port: int) -> str:
    """The viewer's data address on `host` (every interface: this machine's loopback)."""
    return f"rerun+http://{_reachable(host)}:{grpc_port}/proxy"


def viewer_url(host: str, grpc_port: int, web_port: int) -> str:
    """What a person opens in a browser for a viewer served on `host` (the data address percent-encoded: a literal
    '+' would read as a space)."""
    return f"http://{_reachable(host)}:{web_port}/?url={quote(grpc_url(host, grpc_port), safe='')}"


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((_reachable(host), port), timeout=0.5):
            return True
    except OSError:
        return False


def rerun_binary() -> Path:
    """The viewer binary the rerun-sdk wheel ships (run directly: `python -m rerun_cli` would leave it running when
    its wrapper is stopped); ViewerError when it is missing."""
    binary = Path(rerun_cli.__file__).parent / "rerun"
    if not binary.is_file():
        raise ViewerError(f"rerun-sdk's viewer binary is missing: {binary}")
    return binary


def _serves_page(host: str, port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{_reachable(host)}:{port}/", timeout=2.0) as page:
            return page.status == 200 and b"<canvas" in page.read()
    except (OSError, ValueError):
        return False


class ViewerServer:
    """Rerun's web viewer and gRPC proxy on `host`:`web_port` / `host`:`grpc_port`, serving `files` (.rrd) and what
    a process logs to `grpc_url`. Use as a context manager or call `stop()`."""

    def __init__(self, grpc_port: int, web_port: int, host: str = LOOPBACK, files: list[Path] | None = None,
                 memory_limit: str = MEMORY_LIMIT) -> None:
        self.host, self.grpc_port, self.web_port = host, grpc_port, web_port
        cmd = [str(rerun_binary()), "--serve-web", "--bind", host, "--port", str(grpc_port),
               "--web-viewer-port", str(web_port), "--server-memory-limit", memory_limit, "--hide-welcome-screen",
               *[str(f) for f in files or []]]
        # its log goes to a file, not a pipe: a pipe nobody reads would block a server that runs for hours
        self.log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                        text=True, preexec_fn=_dies_with_parent)

    def wait(self, timeout_s: float = START_TIMEOUT_S) -> ViewerServer:
        """Return once the viewer's page is served and the data port accepts connections; ViewerError (with the
        server's own words) when it exits or does not within `timeout_s`. The page is fetched, not only connected
        to: another program listening on the web port (a port taken) must not pass for the viewer."""
        deadline = time.monotonic() + timeout_s
        while not (_listening(self.host, self.grpc_port) and _serves_page(self.host, self.web_port)
                   and self.process.poll() is None):
            if self.process.poll() is not None:
                self.log.seek(0)
                said = self.log.read().strip()
                self.stop()
                raise ViewerError(f"rerun's web viewer exited ({self.process.returncode}): {said[-400:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise ViewerError(f"rerun's web viewer did not listen on {self.host}:{self.web_port} within "
                                  f"{timeout_s:.0f} s")
            time.sleep(0.1)
        return self

    @property
    def grpc_url(self) -> str:
        """Where a RecordingStream connects (`rr.connect_grpc` / `RecordingStream.connect_grpc`)."""
        return grpc_url(self.host, self.grpc_port)

    @property
    def url(self) -> str:
        """What a person opens in a browser."""
        return viewer_url(self.host, self.grpc_port, self.web_port)

    def stop(self) -> None:
        """Stop the server (terminate, then kill after 5 s)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()

    def __enter__(self) -> ViewerServer:
        return self.wait()

    def __exit__(self, *exc) -> None:
        self.stop()
