"""Where the executor's actions come from: an OpenVLA REST server, or the model loaded in this process.

Both backends answer `predict(image, instruction, cancelled) -> np.ndarray (7,)`, the un-normalized action of
`unnorm_key`; every failure is a `VlaError` whose `reason` is a counter key. `ServerBackend` speaks
vla-scripts/deploy.py's protocol, each request bounded as a whole by `timeout_s`; `LocalBackend` loads a local
checkpoint only. Protocol, reasons and versions: docs/openvla_executor.md, "Backends".
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Optional, Protocol, runtime_checkable

import json_numpy
import numpy as np

from brace_common.http_deadline import Connection, Endpoint, HttpFailure

from .vla_action import ACTION_DIM, ActionError, check_action

PROMPT = "In: What action should the robot take to {instruction}?\nOut:"
"""OpenVLA's prompt (the deploy server lower-cases the instruction; so do we)."""
MAX_RESPONSE_BYTES = 1 << 20
"""An action answer is a few hundred bytes; anything this large is not one."""
SERVER_REASONS = ("unreachable", "connect_timeout", "slow_send", "deadline", "slow_headers", "slow_body",
                  "cancelled", "http_status", "server_error", "bad_response")
"""Why a server request failed: refused or lost connection; no connection within the deadline; the request not
taken within it; no answer within it; an answer whose head or body did not finish within it (a dripping server);
given up because the step changed; an HTTP error status; the upstream "error" body; a body that is no action."""
_DEADLINE_REASON = {"connect": "connect_timeout", "send": "slow_send", "body": "slow_body"}


class VlaError(RuntimeError):
    """The VLA gave no usable action; `reason` is a short counter key, the message says what happened."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@runtime_checkable
class VlaBackend(Protocol):
    """Something that predicts OpenVLA's 7-D action for an image and an instruction."""

    def predict(self, image: np.ndarray, instruction: str,
                cancelled: Callable[[], bool] = lambda: False) -> np.ndarray:
        """The un-normalized action (7,) for an RGB image (H, W, 3) uint8; VlaError when there is none.

        `cancelled` true gives up (VlaError 'cancelled') where the backend can: the caller no longer wants the answer.
        """
        ...

    def close(self) -> None:
        """Release what the backend holds (a model, connections)."""
        ...


def openvla_prompt(instruction: str) -> str:
    """The prompt OpenVLA was trained on, with `instruction` lower-cased as the deploy server does."""
    text = " ".join(instruction.split())
    if not text:
        raise VlaError("bad_instruction", "the instruction is empty")
    return PROMPT.format(instruction=text.lower())


def check_image(image) -> np.ndarray:
    """The image as a C-contiguous (H, W, 3) uint8 array; VlaError('bad_image') otherwise."""
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3 \
            or image.shape[0] == 0 or image.shape[1] == 0:
        shape = getattr(image, "shape", None)
        raise VlaError("bad_image", f"expected an RGB image (H, W, 3) uint8, got {type(image).__name__} {shape}")
    return np.ascontiguousarray(image)


def resize_image(image: np.ndarray, size: int) -> np.ndarray:
    """`image` resized to size x size (Lanczos, as OpenVLA's evaluation resizes; aspect not kept, as its processor does).

    `size` 0 leaves the image as it is.
    """
    image = check_image(image)
    if size <= 0 or image.shape[:2] == (size, size):
        return image
    # optional: Pillow is needed only to decode or resize images (MJPG, PNG, VLA input)
    from PIL import Image

    return np.asarray(Image.fromarray(image).resize((size, size), Image.Resampling.LANCZOS))


def _action(value, where: str) -> np.ndarray:
    try:
        return check_action(value, ACTION_DIM)
    except ActionError as exc:
        raise VlaError(exc.reason, f"{where}: {exc}") from None


class ServerBackend:
    """A client of an OpenVLA REST server (vla-scripts/deploy.py's POST /act), each request bounded by `timeout_s`."""

    def __init__(self, server_url: str, unnorm_key: str = "bridge_orig", timeout_s: float = 5.0):
        endpoint = Endpoint.parse(server_url, "server_url")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s {timeout_s} must be positive")
        self.server_url = server_url
        self.host, self.port, self.tls, self.target = endpoint.host, endpoint.port, endpoint.tls, endpoint.target
        self.unnorm_key = unnorm_key
        self.timeout_s = timeout_s

    def body(self, image: np.ndarray, instruction: str) -> bytes:
        """The request body: json_numpy of {image, instruction, unnorm_key} (no unnorm_key when it is '')."""
        payload = {"image": check_image(image), "instruction": instruction}
        if self.unnorm_key:
            payload["unnorm_key"] = self.unnorm_key
        return json_numpy.dumps(payload).encode()

    def predict(self, image: np.ndarray, instruction: str,
                cancelled: Callable[[], bool] = lambda: False) -> np.ndarray:
        """POST one request and check the answer, all within `timeout_s` (VlaError with the reason on any failure)."""
        body = self.body(image, instruction)
        deadline = time.monotonic() + self.timeout_s
        conn = None
        try:
            conn = Connection(self.host, self.port, deadline, self.tls, cancelled)
            conn.request("POST", self.target, f"{self.host}:{self.port}", {"Content-Type": "application/json"}, body)
            status, headers = conn.read_head()
            raw = b"".join(conn.body(headers, MAX_RESPONSE_BYTES))
        except HttpFailure as exc:
            raise self._failure(exc, conn) from None
        finally:
            if conn is not None:
                conn.close()
        if status != 200:
            raise VlaError("http_status", f"{self.server_url} answered HTTP {status}: {raw[:80]!r}")
        return self.parse(raw)

    def _failure(self, exc: HttpFailure, conn: Optional[Connection]) -> VlaError:
        """The VlaError of a failed exchange: a deadline is named after the phase it struck in."""
        if exc.reason == "deadline":
            phase = conn.phase if conn is not None else "connect"
            reason = _DEADLINE_REASON.get(phase) or ("slow_headers" if conn.received else "deadline")
            received = f", {conn.received} bytes received" if conn is not None else ""
            return VlaError(reason, f"{self.server_url}: no complete answer within {self.timeout_s:g} s "
                            f"({reason}: the deadline struck during {phase}{received})")
        if exc.reason in ("cancelled", "connect_timeout"):
            return VlaError(exc.reason, f"{self.server_url}: {exc}")
        if exc.reason in ("too_large", "malformed", "truncated"):
            return VlaError("bad_response", f"{self.server_url}: {exc}")
        return VlaError("unreachable", f"{self.server_url}: {exc}")

    def parse(self, raw: bytes) -> np.ndarray:
        """The action in an answer body: json_numpy (or a plain list); 'error' and anything else -> VlaError."""
        if len(raw) > MAX_RESPONSE_BYTES:
            raise VlaError("bad_response", f"the answer is larger than {MAX_RESPONSE_BYTES} bytes")
        try:
            value = json_numpy.loads(raw.decode())
            if isinstance(value, str) and value != "error":
                value = json_numpy.loads(value)  # the deploy server's "double-encoded" form
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, KeyError, TypeError, ValueError) as exc:
            raise VlaError("bad_response", f"the answer is not json_numpy: {str(exc)[:120]}") from None
        if isinstance(value, str):
            raise VlaError("server_error", f"{self.server_url} answered \"error\" (see the server's log)")
        return _action(value, f"the answer of {self.server_url}")

    def close(self) -> None:
        """Nothing to release: one connection per request."""
        return None

    def describe(self) -> str:
        """One line for logs and diagnostics."""
        return f"server {self.server_url} (deadline {self.timeout_s:g} s per request, unnorm_key '{self.unnorm_key}')"


def _check_model_dir(model_path: str) -> Path:
    if not model_path:
        raise VlaError("model_path", "model_path is empty: the local backend needs a directory with an OpenVLA "
                       "checkpoint (config.json, weights, the remote code)")
    path = Path(model_path).expanduser()
    if not path.is_dir():
        raise VlaError("model_path", f"model_path '{model_path}' is not a directory (the local backend never downloads)")
    if not (path / "config.json").is_file():
        raise VlaError("model_path", f"model_path '{model_path}' has no config.json: not a checkpoint directory")
    return path


class LocalBackend:
    """OpenVLA loaded in this process from a local checkpoint directory."""

    def __init__(self, model_path: str, unnorm_key: str = "bridge_orig", device: str = "auto"):
        self.path = _check_model_dir(model_path)
        self.unnorm_key = unnorm_key
        self.device_request = device
        self.model = None
        self.processor = None
        self.device: Optional[str] = None
        self.dtype = None

    def load(self) -> None:
        """Load processor and model (VlaError 'model' when they cannot be; 'unnorm_key' when its statistics are absent)."""
        try:
            # heavy: torch / transformers load only when a model is built or run
            import torch
            import transformers
            from transformers import AutoConfig, AutoProcessor
            from transformers.dynamic_module_utils import get_class_from_dynamic_module
        except ImportError as exc:
            raise VlaError("model", f"the local backend needs torch and transformers: {exc}") from None
        if self.device_request == "auto":
            self.device = "cuda:0" if torch.cuda.is_available() else "cpu"
        else:
            self.device = self.device_request
        self.dtype = torch.bfloat16 if self.device.startswith("cuda") else torch.float32
        try:
            config = AutoConfig.from_pretrained(self.path, trust_remote_code=True, local_files_only=True)
            auto_map = getattr(config, "auto_map", None) or {}
            reference = auto_map.get("AutoModelForVision2Seq") or auto_map.get("AutoModelForImageTextToText")
            if reference is None:
                raise ValueError(f"config.json of {self.path} maps no AutoModelForVision2Seq class (not an OpenVLA "
                                 "checkpoint?)")
            model_cls = get_class_from_dynamic_module(reference, str(self.path), local_files_only=True)
            dtype_kw = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
            self.processor = AutoProcessor.from_pretrained(self.path, trust_remote_code=True, local_files_only=True)
            model = model_cls.from_pretrained(self.path, trust_remote_code=True, local_files_only=True,
                                              low_cpu_mem_usage=True, **{dtype_kw: self.dtype})
            statistics = self.path / "dataset_statistics.json"
            if statistics.is_file():  # a fine-tuned checkpoint carries its own statistics (as deploy.py loads them)
                model.norm_stats = json.loads(statistics.read_text())
            self.model = model.to(self.device).eval()
        except (OSError, ValueError, TypeError, AttributeError, ImportError, RuntimeError) as exc:
            self.model = self.processor = None
            raise VlaError("model", f"cannot load OpenVLA from {self.path}: {type(exc).__name__}: {exc}") from None
        known = getattr(self.model, "norm_stats", None) or {}
        if self.unnorm_key and self.unnorm_key not in known:
            raise VlaError("unnorm_key", f"the checkpoint has no statistics '{self.unnorm_key}' (it has: {sorted(known)})")

    def predict(self, image: np.ndarray, instruction: str,
                cancelled: Callable[[], bool] = lambda: False) -> np.ndarray:
        """One forward pass: greedy action tokens, decoded and un-normalized by the model's `predict_action`.

        A forward pass cannot be interrupted: `cancelled` is checked before it starts.
        """
        if self.model is None:
            raise VlaError("model", "the model is not loaded")
        if cancelled():
            raise VlaError("cancelled", "the request was cancelled before the forward pass")
        # heavy: torch / transformers load only when a model is built or run
        import torch
        from PIL import Image

        prompt = openvla_prompt(instruction)
        try:
            inputs = self.processor(prompt, Image.fromarray(check_image(image))).to(self.device, dtype=self.dtype)
            with torch.inference_mode():
                action = self.model.predict_action(**inputs, unnorm_key=self.unnorm_key or None, do_sample=False)
        except (RuntimeError, ValueError, TypeError, KeyError, AssertionError) as exc:
            raise VlaError("model", f"predict_action failed: {type(exc).__name__}: {str(exc)[:200]}") from None
        return _action(action, "predict_action")

    def close(self) -> None:
        """Free the model (and the GPU memory it holds)."""
        self.model = self.processor = None
        try:
            # heavy: torch / transformers load only when a model is built or run
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:
            pass

    def describe(self) -> str:
        """One line for logs and diagnostics."""
        return f"local {self.path} on {self.device or self.device_request} (unnorm_key '{self.unnorm_key}')"
