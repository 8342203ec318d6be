"""The VLM perceiver: where each catalogued object is, asked of a vision-language model, ROS-free.

One frame is one request to an OpenAI-compatible vision chat API (the frame as a PNG data URL, the catalogue in
the system prompt, strict JSON back), built without the plan or the step. The protocol, how answers are read, the
failures (REASONS) and the confidence a sighting carries: docs/visual_verifier.md, "The VLM backend".
"""

from __future__ import annotations

import base64
import json
import math
import struct
import threading
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from brace_common.http_deadline import Connection, Endpoint, HttpFailure

from .scene_diff import (
    GONE,
    GRIPPER,
    GRIPPER_EMPTY,
    GRIPPER_HOLDING,
    GRIPPER_UNKNOWN,
    HIDDEN,
    TABLE,
    Catalogue,
    Perceiver,
    PerceiverError,
    Perception,
    Sighting,
)

BACKEND_VLM = "vlm"
"""VerifierVerdict.backend of this perceiver's verdicts."""
DEFAULT_BASE_URL = "http://127.0.0.1:8002/v1"  # 8000: OpenVLA, 8001: the planner LLM (docs/robot.md)
"""The server the perceiver asks unless told otherwise (vLLM's default port on this host)."""
REASONS = ("unreachable", "timeout", "cancelled", "http_status", "bad_reply")
"""Why a request gave no perception (PerceiverError.reason)."""
GRIPPER_TEXT = "the two-finger gripper at the end of the robot arm"
"""What the gripper is, as the prompt says it."""
USER_TEXT = "This is the camera's current frame. Where is each catalogued object now?"
MAX_RESPONSE_BYTES = 1 << 20
MAX_TEXT_CHARS = 200
"""The longest evidence or note kept from an answer."""
MAX_NOTES = 8
_HTTP_REASONS = {"connection_refused": "unreachable", "connect_timeout": "unreachable",
                 "connection_lost": "unreachable", "deadline": "timeout", "cancelled": "cancelled"}
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_bytes(rgb: np.ndarray) -> bytes:
    """A PNG (8-bit RGB, no filter) of an (H, W, 3) uint8 frame; ValueError for anything else."""
    if not isinstance(rgb, np.ndarray) or rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3 \
            or rgb.shape[0] == 0 or rgb.shape[1] == 0:
        raise ValueError(f"expected an RGB frame (H, W, 3) uint8, got {getattr(rgb, 'dtype', type(rgb).__name__)} "
                         f"{getattr(rgb, 'shape', None)}")
    height, width = rgb.shape[:2]
    rows = np.zeros((height, 1 + 3 * width), dtype=np.uint8)   # each row: filter type 0, then its pixels
    rows[:, 1:] = rgb.reshape(height, -1)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return _PNG_SIGNATURE + _png_chunk(b"IHDR", header) + _png_chunk(b"IDAT", zlib.compress(rows.tobytes(), 6)) + \
        _png_chunk(b"IEND", b"")


def _png_chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)


def png_data_url(rgb: np.ndarray) -> str:
    """The frame as a `data:image/png;base64,...` URL (an OpenAI image_url)."""
    return "data:image/png;base64," + base64.b64encode(png_bytes(rgb)).decode("ascii")


def system_prompt(catalogue: Catalogue, gripper: str = GRIPPER_TEXT) -> str:
    """The instructions: the catalogue and the answer's JSON; nothing about what the robot was asked to do."""
    objects = "\n".join(f"- {name} (about RGB {r}, {g}, {b})" for name, (r, g, b) in catalogue.colors.items())
    regions = "".join(f"\n- \"{r.name}\": in or on the {r.name}" for r in catalogue.regions)
    places = "|".join([TABLE, GRIPPER, *(r.name for r in catalogue.regions), HIDDEN, GONE])
    return (
        "You look at one colour frame from a fixed camera over a robot's table and say where each catalogued "
        "object is. Report only what the frame shows.\n"
        f"Catalogued objects:\n{objects}\n"
        f"The gripper is {gripper}.\n"
        "Places:\n"
        f"- \"{TABLE}\": lying on the table, outside every region below\n"
        f"- \"{GRIPPER}\": held between the gripper's fingers{regions}\n"
        f"- \"{HIDDEN}\": not visible, but something (the arm, a hand) covers where it would be\n"
        f"- \"{GONE}\": not in the frame at all\n"
        "Answer with one JSON object and nothing else:\n"
        f'{{"objects": {{"<name>": {{"place": "{places}", "evidence": "<a few words on what you see>", '
        f'"confidence": <0 to 1>}}}}, "gripper": "{GRIPPER_EMPTY}|{GRIPPER_HOLDING}|{GRIPPER_UNKNOWN}", '
        f'"notes": ["<occlusions, doubts>"]}}\n'
        "Give every catalogued object one entry under its name above; its confidence is how sure you are of "
        "its place (1: certain)."
    )


def stated_confidence(entry: Any) -> float:
    """The confidence an object's entry states, clamped to 0..1; 1 when it states none, or no finite number."""
    value = entry.get("confidence") if isinstance(entry, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return 1.0
    return min(1.0, max(0.0, float(value)))


def first_json_object(text: str) -> dict[str, Any]:
    """The first JSON object in `text` that has "objects" (prose or a ``` fence around it is skipped); PerceiverError
    when there is none."""
    decoder = json.JSONDecoder()
    for i, ch in enumerate(text):
        if ch != "{":
            continue
        try:
            value, _ = decoder.raw_decode(text, i)
        except (json.JSONDecodeError, RecursionError):
            continue
        if isinstance(value, dict) and "objects" in value:
            return value
    raise PerceiverError("bad_reply", f"no JSON object with \"objects\" in the reply: {_short(text, 120)!r}")


def reply_text(raw: bytes) -> str:
    """The assistant's text in a chat completion body; PerceiverError when the body is not one."""
    try:
        body = json.loads(raw)
        choice = body["choices"][0]
        content = choice["message"]["content"]
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, KeyError, IndexError, TypeError) as exc:
        raise PerceiverError("bad_reply", f"the body is not a chat completion ({type(exc).__name__}): "
                             f"{_short(raw.decode('utf-8', 'replace'), 120)!r}") from None
    if isinstance(content, list):   # content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    if not isinstance(content, str) or not content.strip():
        cut = " (cut at max_tokens)" if isinstance(choice, dict) and choice.get("finish_reason") == "length" else ""
        raise PerceiverError("bad_reply", f"the reply has no text{cut}")
    return content


def _short(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


@dataclass(frozen=True)
class VLMSettings:
    """Where and how the VLM perceiver asks (VerifierConfig's vlm_* parameters, the key read from the environment)."""

    base_url: str              # the OpenAI-compatible server; requests go to <base_url>/chat/completions
    model: str                 # the model name every request carries
    timeout_s: float = 10.0    # a request's whole deadline, connect to last byte (> 0)
    max_tokens: int = 512      # the answer's token limit
    api_key: str = ""          # sent as 'Authorization: Bearer <key>'; '' = no Authorization header
    json_mode: bool = True     # ask for a JSON object (response_format json_object)


class VLMPerceiver(Perceiver):
    """Colour frames -> Perception, asked of a vision-language model on an OpenAI-compatible server."""

    backend = BACKEND_VLM

    def __init__(self, catalogue: Catalogue, settings: VLMSettings, gripper: str = GRIPPER_TEXT) -> None:
        super().__init__(catalogue)
        url = settings.base_url.rstrip("/") + "/chat/completions"
        endpoint = Endpoint.parse(url, "base_url")
        if not settings.timeout_s > 0:
            raise ValueError(f"timeout_s {settings.timeout_s} must be positive")
        self.url = url
        self.host, self.port, self.tls = endpoint.host, endpoint.port, endpoint.tls
        self.netloc, self.target = endpoint.netloc, endpoint.target
        self.model, self.timeout_s, self.max_tokens = settings.model, settings.timeout_s, settings.max_tokens
        self.api_key, self.json_mode = settings.api_key, settings.json_mode
        self.prompt = system_prompt(catalogue, gripper)
        self.places = {p.lower(): p for p in (TABLE, GRIPPER, HIDDEN, GONE, *(r.name for r in catalogue.regions))}
        self.names = {name.lower(): name for name in catalogue.colors}
        self.cancelled = threading.Event()

    def perceive(self, rgb: np.ndarray, depth_mm: np.ndarray, last: Optional[Perception] = None) -> Perception:
        """Where each object is in the colour frame, by the model (depth and `last` unused); ValueError for a frame
        that is not RGB uint8, PerceiverError when the model gave no readable answer in time."""
        started = time.perf_counter()
        body = json.dumps(self.request(rgb)).encode()
        text = reply_text(self.post(body))
        sightings, gripper, notes = self.read(first_json_object(text))
        return Perception(sightings, (time.perf_counter() - started) * 1000.0, gripper, notes)

    def request(self, rgb: np.ndarray) -> dict[str, Any]:
        """The chat completion request for one frame: the catalogue's prompt and the frame, nothing else."""
        request: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "system", "content": self.prompt},
                         {"role": "user", "content": [{"type": "image_url", "image_url": {"url": png_data_url(rgb)}},
                                                      {"type": "text", "text": USER_TEXT}]}],
            "temperature": 0,
            "max_tokens": self.max_tokens,
        }
        if self.json_mode:
            request["response_format"] = {"type": "json_object"}
        return request

    def headers(self) -> dict[str, str]:
        """The request's headers: JSON, and the API key only when one is configured."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def post(self, body: bytes) -> bytes:
        """POST `body` and return the answer's body, the whole exchange within `timeout_s`; PerceiverError else."""
        deadline = time.monotonic() + self.timeout_s
        conn = None
        try:
            conn = Connection(self.host, self.port, deadline, self.tls, self.cancelled.is_set)
            conn.request("POST", self.target, self.netloc, self.headers(), body)
            status, headers = conn.read_head()
            raw = b"".join(conn.body(headers, MAX_RESPONSE_BYTES))
        except HttpFailure as exc:
            reason = _HTTP_REASONS.get(exc.reason, "bad_reply")
            within = f" within {self.timeout_s:g} s" if reason == "timeout" else ""
            raise PerceiverError(reason, f"{self.url}: no answer{within} ({exc})") from None
        finally:
            if conn is not None:
                conn.close()
        if status != 200:
            raise PerceiverError("http_status", f"{self.url} answered HTTP {status}: "
                                 f"{_short(raw.decode('utf-8', 'replace'), 160)!r}")
        return raw

    def read(self, answer: Mapping[str, Any]) -> tuple[dict[str, Sighting], Optional[str], tuple[str, ...]]:
        """The sightings, the gripper's state and the notes of the model's JSON answer; PerceiverError when its
        "objects" is not an object."""
        objects = answer.get("objects")
        if not isinstance(objects, dict):
            raise PerceiverError("bad_reply", f"\"objects\" is {type(objects).__name__}, not an object")
        entries: dict[str, Any] = {}
        for key, entry in objects.items():
            name = self.names.get(str(key).strip().lower())
            if name is not None:
                entries.setdefault(name, entry)   # names the catalogue does not hold are ignored
        sightings = {name: self._sighting(name, entries.get(name), name in entries)
                     for name in self.catalogue.colors}
        gripper = answer.get("gripper")
        gripper = gripper.strip().lower() if isinstance(gripper, str) else None
        notes = answer.get("notes")
        notes = [n for n in notes if isinstance(n, str) and n.strip()] if isinstance(notes, list) else []
        state = gripper if gripper in (GRIPPER_EMPTY, GRIPPER_HOLDING, GRIPPER_UNKNOWN) else None
        return sightings, state, tuple(_short(n) for n in notes[:MAX_NOTES])

    def _sighting(self, name: str, entry: Any, answered: bool) -> Sighting:
        if not answered:
            return Sighting(name, HIDDEN, 0, evidence="not in the model's answer", support=0.0)
        place, evidence = (entry.get("place"), entry.get("evidence")) if isinstance(entry, dict) else (entry, "")
        known = self.places.get(place.strip().lower()) if isinstance(place, str) else None
        if known is None:
            return Sighting(name, HIDDEN, 0, evidence=f"the model's place {_short(str(place), 40)!r} is none of "
                            f"{', '.join(self.places.values())}", support=0.0)
        text = _short(evidence) if isinstance(evidence, str) and evidence.strip() else "no evidence given"
        return Sighting(name, known, 0, evidence=text, support=0.0 if known == HIDDEN else stated_confidence(entry))

    def close(self) -> None:
        """Give up the request in progress (it ends within a poll, PerceiverError 'cancelled') and every later one."""
        self.cancelled.set()

    def describe(self) -> str:
        """One line for logs: the backend, the model, the server and the deadline."""
        return f"{self.backend} ({self.model} at {self.url}, deadline {self.timeout_s:g} s per frame)"
