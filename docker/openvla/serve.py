"""Start OpenVLA's deploy server (its vla-scripts/deploy.py, unchanged) on a model that is already on disk.

    python serve.py            serve POST /act on OPENVLA_HOST:OPENVLA_PORT
    python serve.py --check    health check: exit 0 when the server answers on 127.0.0.1:OPENVLA_PORT

Environment (the image sets the defaults):
  OPENVLA_MODEL   a checkpoint folder (config.json and dataset_statistics.json, as deploy.py reads a local
                  fine-tune), or a model id held by the mounted hub cache (HF_HUB_CACHE), e.g. openvla/openvla-7b
  OPENVLA_ATTN    auto | flash_attention_2 | sdpa | eager (auto: flash_attention_2 when flash-attn is
                  installed, else sdpa; deploy.py itself always asks for flash_attention_2)
  OPENVLA_HOST, OPENVLA_PORT   where to listen (0.0.0.0, 8000)
  OPENVLA_DEPLOY  the upstream deploy.py (/opt/openvla/deploy.py)

Nothing is downloaded: HF_HUB_OFFLINE=1. A model that is not there stops the service with exit status 2 and a
message saying what to mount, instead of a 15 GB download or a stack trace.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import urllib.request
from pathlib import Path
from types import ModuleType

ATTENTION = ("flash_attention_2", "sdpa", "eager")


class ModelNotFound(RuntimeError):
    """The model OPENVLA_MODEL names is not on this machine."""


def resolve_model(name: str) -> str:
    """What deploy.py loads for `name`: a complete checkpoint folder, or an id the hub cache holds offline."""
    path = Path(name)
    if path.is_dir():
        missing = [f for f in ("config.json", "dataset_statistics.json") if not (path / f).is_file()]
        if missing:
            raise ModelNotFound(f"{path} lacks {', '.join(missing)} (deploy.py reads dataset_statistics.json from "
                                "a local checkpoint; for the released openvla-7b mount a hub cache and use its id)")
        return str(path)
    if name.startswith(("/", ".", "~")) or name.count("/") != 1:
        raise ModelNotFound(f"{name} is not a folder in this container (mount it, see docs/robot.md)")
    from huggingface_hub import snapshot_download

    try:
        snapshot_download(name, local_files_only=True, cache_dir=os.environ.get("HF_HUB_CACHE") or None)
    except Exception as exc:  # noqa: BLE001 - the hub raises several kinds for 'not in the cache'
        cache = os.environ.get("HF_HUB_CACHE", "the hub cache")
        raise ModelNotFound(f"{name} is not in {cache} ({type(exc).__name__}); on a machine with internet run "
                            f"`huggingface-cli download {name}` and mount that hub cache at {cache}") from None
    return name


def attention(choice: str) -> str:
    """The attn_implementation to load with: `choice`, or for 'auto' flash_attention_2 if flash-attn is installed."""
    if choice == "auto":
        return "flash_attention_2" if importlib.util.find_spec("flash_attn") is not None else "sdpa"
    if choice not in ATTENTION:
        raise ValueError(f"OPENVLA_ATTN must be auto or one of {', '.join(ATTENTION)}, not {choice!r}")
    return choice


def load_deploy(path: Path) -> ModuleType:
    """The upstream deploy.py as a module (it patches json with json_numpy on import, as when run as a script)."""
    spec = importlib.util.spec_from_file_location("openvla_deploy", path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check(port: int, timeout: float = 5.0) -> int:
    """0 when the server answers its OpenAPI page on 127.0.0.1 (it listens only after the model loaded), else 1."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://127.0.0.1:{port}/openapi.json", timeout=timeout) as response:
            return 0 if response.status == 200 else 1
    except OSError:
        return 1


def mode(argv: list[str]) -> str:
    """'serve' (no argument) or 'check' (--check); ValueError for any other argument (a typo must not start a server)."""
    if argv[1:] in ([], ["--check"]):
        return "check" if argv[1:] else "serve"
    raise ValueError(f"usage: serve.py [--check], not {' '.join(argv[1:])!r}")


def main(argv: list[str]) -> int:
    """Serve (or, with --check, probe) the OpenVLA deploy server; 2 when the model or a setting is wrong."""
    port = int(os.environ.get("OPENVLA_PORT", "8000"))
    try:
        if mode(argv) == "check":
            return check(port)
    except ValueError as exc:
        print(f"openvla: {exc}", file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        model = resolve_model(os.environ.get("OPENVLA_MODEL", "openvla/openvla-7b"))
        attn = attention(os.environ.get("OPENVLA_ATTN", "auto"))
    except (ModelNotFound, ValueError) as exc:
        print(f"openvla: {exc}", file=sys.stderr)
        return 2
    deploy = load_deploy(Path(os.environ.get("OPENVLA_DEPLOY", "/opt/openvla/deploy.py")))
    print(f"openvla: loading {model} (attention {attn}); POST /act on port {port} once it is loaded", flush=True)
    server = deploy.OpenVLAServer(model, attn_implementation=attn)
    server.run(os.environ.get("OPENVLA_HOST", "0.0.0.0"), port=port)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
