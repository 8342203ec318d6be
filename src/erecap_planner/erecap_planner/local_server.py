"""A planner server on this machine: `transformers serve` on a model folder, or llama.cpp's server on a GGUF file
(llama-cpp-python's, one request at a time, or the C++ `llama-server` with parallel slots).

`prepare_model_folder` makes the folder the server loads: the packaged
SmolLM2 (converted once, see models.py) or a local folder, with a LoRA
adapter merged and saved once into the model cache (keyed by the adapter
file's content), so the server plans like the in-process planner with the
same adapter. `LocalServer` starts the server on 127.0.0.1, waits until it
lists its model (bounded) and stops it. `brace-planner-server` is the CLI.
Nothing is downloaded (HF_HUB_OFFLINE=1).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from brace_common.cache_folder import built_once
from brace_common.local_http import free_port

from .gguf_types import WEIGHT_TYPES
from .models import cache_root, load_merged, merged_cache_path, resolve_model_path
from .openai_client import OpenAIClient, ServerError


def prepare_model_folder(model_path: str, adapter_path: str = "") -> Path:
    """The model folder to serve: `model_path` (see models.resolve_model_path) with `adapter_path` merged."""
    base = resolve_model_path(model_path)
    if not adapter_path:
        return base
    adapter, target = merged_cache_path(base.name, adapter_path)

    def write(partial: Path) -> None:
        model, tokenizer = load_merged(model_path, adapter)
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)

    # no half-written folder is ever served; concurrent first uses merge once
    return built_once(target, lambda folder: (folder / "model.safetensors").is_file(), write)


def served_model(engine: str, model_path: str, adapter_path: str = "", weights: str = "f16") -> Path:
    """What `engine` loads: a model folder (transformers) or a GGUF file (llama_cpp, llama_server) with its matrices
    in `weights` (f16, q8_0), the adapter merged."""
    if engine in ("llama_cpp", "llama_server"):
        # heavy: gguf_export imports torch; a served GGUF file needs none
        from .gguf_export import merged_gguf

        return merged_gguf(model_path, adapter_path, weights)
    return prepare_model_folder(model_path, adapter_path)


def serve_env() -> dict[str, str]:
    """The server's environment: offline, and a hub cache folder (its GET /models fails where there is none)."""
    hub = cache_root() / "hub"
    hub.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "warning",
            "HF_HUB_CACHE": os.environ.get("HF_HUB_CACHE", str(hub))}


def serve_command(folder: Path, port: int, host: str = "127.0.0.1", dtype: str = "float32") -> list[str]:
    """`transformers serve` for `folder` on host:port (CPU; the model loaded at start)."""
    exe = Path(sys.executable).with_name("transformers")
    prefix = [str(exe)] if exe.is_file() else [sys.executable, "-m", "transformers.cli.transformers"]
    return [*prefix, "serve", str(folder), "--host", host, "--port", str(port), "--device", "cpu",
            "--dtype", dtype, "--log-level", "warning"]


def llama_cpp_command(gguf: Path, port: int, host: str = "127.0.0.1", context: int = 8192,
                      threads: int = 0) -> list[str]:
    """llama-cpp-python's OpenAI-compatible server for a GGUF file (needs llama-cpp-python[server])."""
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", host, "--port", str(port),
               "--n_ctx", str(context)]
    return command + (["--n_threads", str(threads)] if threads else [])


def llama_server_binary() -> Path:
    """llama.cpp's C++ `llama-server`: $BRACE_LLAMA_SERVER, else the one scripts/build_llama_server.sh built into the
    cache, else the first on PATH; FileNotFoundError naming the script when there is none."""
    named = os.environ.get("BRACE_LLAMA_SERVER", "")
    candidates = [Path(named)] if named else [*sorted(cache_root().glob("llama-server-*/llama-server"), reverse=True),
                                              *([Path(found)] if (found := shutil.which("llama-server")) else [])]
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(f"no llama-server{f' at {named}' if named else ''}: scripts/build_llama_server.sh "
                            "builds it (make bench-setup runs it)")


def llama_server_command(gguf: Path, port: int, host: str = "127.0.0.1", context: int = 8192, threads: int = 0,
                         parallel: int = 1) -> list[str]:
    """The C++ `llama-server` for a GGUF file: `parallel` slots of `context` tokens each, decoded in one continuous
    batch, each slot reusing its previous prompt's prefix; Prometheus metrics on GET /metrics."""
    command = [str(llama_server_binary()), "--model", str(gguf), "--host", host, "--port", str(port),
               "--ctx-size", str(context * parallel), "--parallel", str(parallel), "--cont-batching", "--metrics",
               "--no-webui"]
    return command + (["--threads", str(threads), "--threads-batch", str(threads)] if threads else [])


ENGINES = ("transformers", "llama_cpp", "llama_server")
"""Local servers: `transformers serve` on a model folder; on a GGUF file llama-cpp-python's server (llama_cpp) or
llama.cpp's C++ server with parallel slots (llama_server)."""


def engine_command(engine: str, model: Path, port: int, host: str = "127.0.0.1", dtype: str = "float32",
                   threads: int = 0, parallel: int = 1) -> list[str]:
    """The command line of `engine` serving `model` (a folder or a GGUF file, see `served_model`); `parallel` is
    llama_server's slot count (the other engines answer one request at a time)."""
    if engine == "llama_cpp":
        return llama_cpp_command(model, port, host, threads=threads)
    if engine == "llama_server":
        return llama_server_command(model, port, host, threads=threads, parallel=parallel)
    return serve_command(model, port, host, dtype)


class LocalServer:
    """A local OpenAI-compatible server as a child process; a context manager that waits for it and stops it.

    `engine` transformers: `transformers serve` on the model folder `folder`; llama_cpp: llama-cpp-python's server
    on the GGUF file `folder`; llama_server: llama.cpp's C++ server on it with `parallel` slots.
    """

    def __init__(self, folder: Path, port: Optional[int] = None, dtype: str = "float32", threads: int = 0,
                 log_path: Optional[Path] = None, engine: str = "transformers", parallel: int = 1):
        if engine not in ENGINES:
            raise ValueError(f"engine '{engine}' is not one of {', '.join(ENGINES)}")
        if parallel < 1:
            raise ValueError(f"parallel must be at least 1, not {parallel}")
        self.parallel = parallel
        self.folder = Path(folder)
        self.port = port or free_port()
        self.dtype = dtype
        self.threads = threads
        self.log_path = log_path
        self.engine = engine
        self.process: Optional[subprocess.Popen] = None
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        """The server's command line."""
        return engine_command(self.engine, self.folder, self.port, dtype=self.dtype, threads=self.threads,
                              parallel=self.parallel)

    def start(self, timeout_s: float = 120.0) -> LocalServer:
        """Start the server and wait until it lists a model; RuntimeError (with its log) otherwise."""
        env = serve_env()
        if self.threads:
            env["OMP_NUM_THREADS"] = str(self.threads)
        log = open(self.log_path, "wb") if self.log_path else subprocess.DEVNULL  # noqa: SIM115 - closed in stop()
        self._log = log
        self.process = subprocess.Popen(self.command(), env=env,
                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        client = OpenAIClient(self.base_url)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop()
                raise RuntimeError(f"{self.engine} server exited with {self.process.returncode}{self._log_tail()}")
            try:
                if client.get_json("/models", time.monotonic() + 1.0).get("data") is not None:
                    return self
            except ServerError:
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"{self.engine} server did not answer within {timeout_s:.0f} s{self._log_tail()}")

    def _log_tail(self) -> str:
        if self.log_path and Path(self.log_path).is_file():
            return ":\n" + Path(self.log_path).read_text(errors="replace")[-2000:]
        return ""

    def kill(self) -> None:
        """Kill the server at once (SIGKILL; a test of a server that dies mid-call)."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `timeout_s`."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        if getattr(self, "_log", None) not in (None, subprocess.DEVNULL):
            self._log.close()
            self._log = None

    def __enter__(self) -> LocalServer:
        return self.start() if self.process is None else self

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: Optional[list[str]] = None) -> int:
    """`brace-planner-server`: serve the planner model (adapter merged) with `transformers serve` or llama.cpp."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", default="transformers", choices=ENGINES)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="model_path as the planner takes it")
    parser.add_argument("--adapter", default="", help="LoRA adapter to merge (adapter_path as the planner takes it)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001, help="8001: 8000 is OpenVLA's deploy server")
    parser.add_argument("--dtype", default="float32", help="float32 (any CPU) or bfloat16 (native bf16 CPUs, GPUs)")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads of the engine (0 = its default)")
    parser.add_argument("--parallel", type=int, default=1, help="llama_server's slots (requests decoded at once)")
    parser.add_argument("--weights", default="f16", choices=tuple(WEIGHT_TYPES), help="a GGUF's matrices (llama.cpp)")
    args = parser.parse_args(argv)
    if args.parallel < 1:
        parser.error("--parallel must be at least 1")
    try:
        folder = served_model(args.engine, args.model, args.adapter, args.weights)
        command = engine_command(args.engine, folder, args.port, args.host, args.dtype, args.threads, args.parallel)
    except (FileNotFoundError, OSError, ValueError) as exc:
        print(f"brace-planner-server: {exc}", file=sys.stderr)
        return 2
    env = serve_env()
    if args.threads:  # as LocalServer: torch's threads for transformers serve
        env["OMP_NUM_THREADS"] = str(args.threads)
    print(f"serving {folder} at http://{args.host}:{args.port}/v1", flush=True)
    os.execve(command[0], command, env)
    return 0  # not reached: execv replaces the process


if __name__ == "__main__":
    sys.exit(main())
