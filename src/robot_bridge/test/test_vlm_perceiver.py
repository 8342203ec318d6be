"""The VLM perceiver against a real HTTP server on 127.0.0.1 that speaks OpenAI's chat-completions protocol.

The server checks nothing itself: it records each request (path, headers, JSON body) and answers a scripted reply
describing the scene the test set, as a vision model on vLLM would. The tests check the requests (the model, the
frame as a PNG data URL of the frame's size, no word of the plan), the answers read into Perceptions, the failures
(PerceiverError with its reason), the verifier's verdicts with this backend, and the visual_verifier node with it
over DDS (the request runs in a worker: the node keeps sampling while it is in flight).
"""

from __future__ import annotations

import base64
import io
import json
import re
import socket
import struct
import threading
import zlib
from collections import deque
from http.server import BaseHTTPRequestHandler

import numpy as np
import pytest
from brace_msgs.msg import ExecutionOutcome, Plan, PlanStep, VerifierVerdict
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import Image
from std_msgs.msg import Header

from brace_common import names, qos
from brace_common.action_schema import Step
from brace_common.config import ConfigError
from brace_common.local_http import LocalHTTPServer, answer
from brace_common.testing import wait_for
from robot_bridge.orbbec.calibration import load_calibration
from robot_bridge.orbbec.image_msgs import IMAGE_QOS, image_msg
from robot_bridge.verifier.scene_diff import GONE, GRIPPER, HIDDEN, TABLE, Catalogue, PerceiverError, Region
from robot_bridge.verifier.verifier_config import VerifierConfig
from robot_bridge.verifier.visual_verifier import VisualVerifier
from robot_bridge.verifier.visual_verifier_node import VisualVerifierNode
from robot_bridge.verifier.vlm_perceiver import VLMPerceiver, VLMSettings, png_bytes

MODEL = "Qwen/Qwen2.5-VL-7B-Instruct"
CATALOGUE = Catalogue({"apple": (190, 30, 35), "banana": (235, 205, 45), "orange": (245, 135, 25)}, 0.095,
                      (Region("bowl", 0.25, 0.12, 0.05),))
PLAN_WORDS = re.compile(r"\b(plans?|steps?|tasks?|pick|instructions?|actions?|request(ed)?|asked|goal)\b", re.I)
"""Words of the plan or the requested step: a request to the perceiver holds none of them (OmniAct's isolation)."""
NS = "/arm"


def scene(apple: str = TABLE, banana: str = TABLE, orange: str = "bowl", gripper: str = "empty") -> dict:
    """The model's answer for a scene: each fruit's place, with evidence."""
    places = {"apple": apple, "banana": banana, "orange": orange}
    return {"objects": {k: {"place": v, "evidence": f"a {k} seen ({v})"} for k, v in places.items()},
            "gripper": gripper, "notes": []}


class ChatServer:
    """An OpenAI chat-completions server on an ephemeral port of 127.0.0.1; a context manager.

    Replies follow `script` (then 'fenced'): 'fenced' (the scene's JSON in a ```json fence between prose), 'plain',
    'no_json', 'not_chat', 'bad_objects', 'http_500', 'hold' (answers 'fenced' once `release` is set; `holding` is set
    while it waits). `scene` is the JSON the model answers with.
    """

    def __init__(self) -> None:
        self.scene: dict = scene()
        self.script: deque[str] = deque()
        self.requests: list[dict] = []
        self.holding = threading.Event()
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                return

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.requests.append({"path": self.path, "headers": dict(self.headers), "body": json.loads(raw)})
                mode = outer.script.popleft() if outer.script else "fenced"
                if mode == "hold":
                    outer.holding.set()
                    outer.release.wait(120)
                    outer.holding.clear()
                    mode = "fenced"
                answer(self, *outer.reply(mode))   # a client that gave up (its deadline, a cancel) is no error

        self.http = LocalHTTPServer(Handler, name="chat")
        self.base_url = ""

    def reply(self, mode: str) -> tuple[int, bytes]:
        """The status and body of one reply."""
        if mode == "http_500":
            return 500, b'{"error": {"message": "CUDA out of memory (simulated)"}}'
        if mode == "not_chat":
            return 200, b'{"object": "list", "data": []}'
        text = {"fenced": f"Here is the scene:\n```json\n{json.dumps(self.scene)}\n```\nThat is all.",
                "plain": json.dumps(self.scene), "no_json": "I see a table with some fruit on it.",
                "bad_objects": json.dumps({"objects": ["apple", "banana"]})}[mode]
        body = {"id": "chatcmpl-1", "object": "chat.completion", "model": MODEL,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 300, "completion_tokens": 80, "total_tokens": 380}}
        return 200, json.dumps(body).encode()

    def __enter__(self) -> ChatServer:
        self.base_url = self.http.start().url("/v1")
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.http.stop()


@pytest.fixture
def server():
    with ChatServer() as s:
        yield s


def frame(height: int = 37, width: int = 53, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A colour frame (noise: every pixel checked on the way) and its depth (unused by the VLM)."""
    rgb = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return rgb, np.zeros((height, width), dtype=np.uint16)


def perceiver(server: ChatServer, **kwargs) -> VLMPerceiver:
    return VLMPerceiver(CATALOGUE, VLMSettings(server.base_url, MODEL, **{"timeout_s": 60.0, **kwargs}))


def png_of(url: str) -> bytes:
    prefix = "data:image/png;base64,"
    assert url.startswith(prefix), url[:40]
    return base64.b64decode(url[len(prefix):])


def image_url(request: dict) -> str:
    (user,) = [m for m in request["body"]["messages"] if m["role"] == "user"]
    (part,) = [p for p in user["content"] if p["type"] == "image_url"]
    return part["image_url"]["url"]


def texts(request: dict) -> str:
    """Every text the model is given."""
    out = []
    for message in request["body"]["messages"]:
        content = message["content"]
        out += [content] if isinstance(content, str) else [p["text"] for p in content if p["type"] == "text"]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------------- the request

def test_the_request_carries_the_model_the_frame_and_the_catalogue_only(server):
    rgb, depth = frame()
    perceiver(server, max_tokens=300).perceive(rgb, depth)
    (request,) = server.requests
    body = request["body"]
    assert request["path"] == "/v1/chat/completions"
    assert body["model"] == MODEL and body["temperature"] == 0 and body["max_tokens"] == 300
    assert body["response_format"] == {"type": "json_object"}
    assert "Authorization" not in request["headers"], "no key configured: no Authorization header"
    png = png_of(image_url(request))
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (53, 37), "IHDR: width, height"
    prompt = texts(request)
    assert all(name in prompt for name in ("apple", "banana", "orange", "bowl", "gripper", "hidden", "gone"))
    assert not PLAN_WORDS.search(prompt), PLAN_WORDS.search(prompt)


def test_the_png_decodes_to_the_frame():
    rgb, _ = frame(24, 31, seed=4)
    png = png_bytes(rgb)
    try:
        from PIL import Image as PilImage
    except ImportError:   # no imaging library: inflate the one IDAT chunk (filter type 0 on every row)
        length = struct.unpack(">I", png[33:37])[0]
        rows = np.frombuffer(zlib.decompress(png[41:41 + length]), dtype=np.uint8).reshape(24, 1 + 3 * 31)
        assert not rows[:, 0].any()
        decoded = rows[:, 1:].reshape(24, 31, 3)
    else:
        decoded = np.asarray(PilImage.open(io.BytesIO(png)).convert("RGB"))
    assert np.array_equal(decoded, rgb)
    with pytest.raises(ValueError):
        png_bytes(rgb.astype(np.float32))


def test_an_api_key_from_the_environment_is_sent_as_a_bearer_token(server, monkeypatch):
    monkeypatch.setenv("VLM_TEST_KEY", "sk-test-123")
    cfg = VerifierConfig(backend="vlm", vlm_base_url=server.base_url, vlm_api_key_env="VLM_TEST_KEY",
                         vlm_json_mode=False)
    cfg.perceiver(load_calibration(cfg.camera_calibration)).perceive(*frame())
    (request,) = server.requests
    assert request["headers"]["Authorization"] == "Bearer sk-test-123"
    assert "response_format" not in request["body"]


# ----------------------------------------------------------------------------------------------------- the answer

def test_the_answer_is_read_into_a_perception(server):
    server.scene = {"objects": {"Apple": {"place": "Gripper", "evidence": "between the fingers"},
                                "banana": "table",                                  # a bare place
                                "ghost": {"place": "table", "evidence": "?"},       # not catalogued: ignored
                                "orange": {"place": "on the shelf"}},               # no such place: unknown
                    "gripper": "Holding", "notes": ["the wrist covers the bowl's rim", 7]}
    seen = perceiver(server).perceive(*frame())
    assert set(seen.sightings) == {"apple", "banana", "orange"}
    apple, banana, orange = (seen.sightings[n] for n in ("apple", "banana", "orange"))
    assert (apple.place, apple.evidence, apple.support, apple.position) == (GRIPPER, "between the fingers", 1.0, None)
    assert apple.seen and banana.seen and banana.place == TABLE and banana.evidence == "no evidence given"
    assert orange.place == HIDDEN and not orange.seen and orange.support == 0.0 and "on the shelf" in orange.evidence
    assert seen.gripper == "holding" and seen.notes == ("the wrist covers the bowl's rim",)
    assert seen.compare_ms > 0


def test_the_stated_confidence_is_the_support_of_a_sighting(server):
    server.scene = {"objects": {"apple": {"place": "table", "confidence": 0.3}, "banana": {"place": "gone",
                                                                                         "confidence": 7},
                                "orange": {"place": "bowl", "confidence": "high"}}}
    seen = perceiver(server).perceive(*frame())
    assert [seen.sightings[n].support for n in ("apple", "banana", "orange")] == [0.3, 1.0, 1.0]
    server.scene = {"objects": {"apple": {"place": "hidden", "confidence": 0.9}, "banana": {"place": "table",
                                                                                          "confidence": -2}}}
    seen = perceiver(server).perceive(*frame())
    assert [seen.sightings[n].support for n in ("apple", "banana")] == [0.0, 0.0]   # hidden is no evidence


def test_an_object_the_answer_leaves_out_is_hidden_and_plain_json_reads_too(server):
    server.scene = {"objects": {"apple": {"place": "bowl", "evidence": "in the bowl"}}}
    server.script.append("plain")
    seen = perceiver(server).perceive(*frame())
    assert seen.place("apple") == "bowl" and seen.gripper is None
    assert seen.sightings["banana"].place == HIDDEN and seen.sightings["banana"].evidence == "not in the model's answer"


@pytest.mark.parametrize("mode, reason", [("no_json", "bad_reply"), ("not_chat", "bad_reply"),
                                          ("bad_objects", "bad_reply"), ("http_500", "http_status")])
def test_an_answer_without_a_perception_is_a_perceiver_error(server, mode, reason):
    server.script.append(mode)
    with pytest.raises(PerceiverError) as err:
        perceiver(server).perceive(*frame())
    assert err.value.reason == reason
    if mode == "http_500":
        assert "HTTP 500" in str(err.value) and "out of memory" in str(err.value)


def test_no_answer_within_the_deadline_is_a_timeout(server):
    server.script.append("hold")
    with pytest.raises(PerceiverError) as err:
        perceiver(server, timeout_s=0.3).perceive(*frame())
    assert err.value.reason == "timeout" and "within 0.3 s" in str(err.value)


def test_no_server_is_unreachable():
    with socket.socket() as probe:   # a port nothing listens on once the probe closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(PerceiverError) as err:
        VLMPerceiver(CATALOGUE, VLMSettings(f"http://127.0.0.1:{port}/v1", MODEL, timeout_s=30.0)).perceive(*frame())
    assert err.value.reason == "unreachable"


def test_close_gives_up_the_request_in_flight(server):
    server.script.append("hold")
    vlm = perceiver(server, timeout_s=120.0)
    errors: list[PerceiverError] = []

    def ask() -> None:
        try:
            vlm.perceive(*frame())
        except PerceiverError as exc:
            errors.append(exc)

    asker = threading.Thread(target=ask)
    asker.start()
    wait_for(server.holding.is_set, what="the request held at the server")
    vlm.close()
    asker.join(timeout=60)
    assert not asker.is_alive() and [e.reason for e in errors] == ["cancelled"]


# ---------------------------------------------------------------------------------------------------- the verdicts

def vlm_verifier(server: ChatServer, plan: list[Step]) -> VisualVerifier:
    cfg = VerifierConfig(backend="vlm", vlm_base_url=server.base_url, vlm_timeout_s=60.0)
    verifier = VisualVerifier(cfg.perceiver(load_calibration(cfg.camera_calibration)), cfg.confirm_frames)
    verifier.on_plan(plan)
    return verifier


def test_a_pick_the_model_still_sees_on_the_table_is_a_contradicted_success(server):
    verifier = vlm_verifier(server, [Step("pick", {"object": "apple"}), Step("place", {"object": "apple",
                                                                                       "target": "bowl"})])
    rgb, depth = frame()
    assert verifier.on_frame(rgb, depth) == [] and verifier.on_frame(rgb, depth) == []   # the pick runs
    verifier.on_outcome(True)                                                           # the executor: it worked
    (verdict,) = verifier.on_frame(rgb, depth)
    assert verdict.violation and verdict.step_ended and not verdict.expected_state_achieved
    assert verdict.backend == "vlm" and verdict.action == "pick(object=apple)" and verdict.confidence == 1.0
    assert "reported success but apple is at table (unchanged at its source), not gripper" in verdict.detail
    assert "apple at table" in verdict.diff.objects_remaining and verdict.diff.gripper_or_arm_state == "empty"
    assert len(server.requests) == 3
    for request in server.requests:
        assert not PLAN_WORDS.search(texts(request)), "the perceiver is never told the plan"


def test_a_contradiction_the_model_doubts_carries_its_confidence(server):
    verifier = vlm_verifier(server, [Step("pick", {"object": "apple"})])
    rgb, depth = frame()
    verifier.on_frame(rgb, depth)
    server.scene["objects"]["apple"]["confidence"] = 0.2      # "on the table, I think"
    verifier.on_outcome(True)
    (verdict,) = verifier.on_frame(rgb, depth)
    assert verdict.violation and verdict.confidence == 0.2   # under halt_min_confidence / preempt_min_confidence


def test_a_pick_the_model_sees_in_the_gripper_is_achieved(server):
    verifier = vlm_verifier(server, [Step("pick", {"object": "apple"})])
    rgb, depth = frame()
    verifier.on_frame(rgb, depth)
    server.scene = scene(apple=GRIPPER, gripper="holding")
    verifier.on_outcome(True)
    (verdict,) = verifier.on_frame(rgb, depth)
    assert not verdict.violation and verdict.expected_state_achieved and verdict.confidence == 1.0
    assert verdict.diff.moved == {"apple": (TABLE, GRIPPER)} and verdict.diff.gripper_or_arm_state == "holding"
    assert verdict.diff.objects_moved_or_removed == ("apple: from table to gripper; evidence: a apple seen (gripper)",)


def test_an_object_the_model_sees_gone_during_the_step_contradicts_it(server):
    verifier = vlm_verifier(server, [Step("pick", {"object": "apple"})])
    rgb, depth = frame()
    verifier.on_frame(rgb, depth)
    server.scene = scene(apple=HIDDEN)
    assert verifier.on_frame(rgb, depth) == [] and verifier.on_frame(rgb, depth) == [], "hidden is not gone"
    server.scene = scene(apple=GONE)
    assert verifier.on_frame(rgb, depth) == []   # confirm_frames: two in a row
    (verdict,) = verifier.on_frame(rgb, depth)
    assert verdict.violation and not verdict.step_ended and "apple removed" in verdict.detail
    assert verdict.diff.removed == ("apple",)
    assert verdict.diff.objects_moved_or_removed == ("apple: from table to unknown; evidence: a apple seen (gone)",)


# ------------------------------------------------------------------------------------------------------ the config

@pytest.mark.parametrize("name, value", [("vlm_base_url", "ftp://127.0.0.1/v1"), ("vlm_base_url", "127.0.0.1:8000"),
                                         ("vlm_base_url", "http:///v1"), ("vlm_base_url", "http://gpu:99999/v1"),
                                         ("vlm_base_url", "http://gpu:0/v1"), ("vlm_base_url", "http://gpu/v1?x=1"),
                                         ("vlm_base_url", "http://gpu/v1#chat"),
                                         ("vlm_model", " "),
                                         ("vlm_api_key_env", "NOT-A-NAME"), ("vlm_timeout_s", 0.0),
                                         ("vlm_max_tokens", 4), ("backend", "clip")])
def test_bad_vlm_parameters_fail_naming_them(name, value):
    with pytest.raises(ConfigError) as err:
        VerifierConfig(**{"backend": "vlm", name: value}).validate()
    assert err.value.parameter == name


def test_a_key_variable_that_is_not_set_fails_naming_the_parameter(monkeypatch):
    monkeypatch.delenv("VLM_TEST_KEY", raising=False)
    cfg = VerifierConfig(backend="vlm", vlm_api_key_env="VLM_TEST_KEY")
    with pytest.raises(ConfigError) as err:
        cfg.perceiver(load_calibration(cfg.camera_calibration))
    assert err.value.parameter == "vlm_api_key_env"


def test_the_vlm_backend_takes_grey_objects_the_geometric_one_refuses():
    VerifierConfig(backend="vlm", object_colors=["mug=120,120,110"]).validate()
    with pytest.raises(ConfigError):
        VerifierConfig(object_colors=["mug=120,120,110"]).validate()


# -------------------------------------------------------------------------------------------------------- the node

class Rig(Node):
    """The camera (frame pairs every 50 ms), the planner and the executor at the topic level; verdicts and the
    verifier's diagnostics collected."""

    def __init__(self, width: int, height: int) -> None:
        super().__init__("rig", namespace=NS)
        ramp = np.arange(width * height * 3, dtype=np.uint32).reshape(height, width, 3)
        self.rgb, self.depth = (ramp % 251).astype(np.uint8), np.zeros((height, width), dtype=np.uint16)
        self.verdicts: list[VerifierVerdict] = []
        self.diagnostics: list[DiagnosticStatus] = []
        self.color_pub = self.create_publisher(Image, f"front_camera/{names.COLOR_IMAGE}", IMAGE_QOS)
        self.depth_pub = self.create_publisher(Image, f"front_camera/{names.DEPTH_IMAGE}", IMAGE_QOS)
        self.plan_pub = self.create_publisher(Plan, names.PLAN, qos.PLANS)
        self.outcome_pub = self.create_publisher(ExecutionOutcome, names.OUTCOMES, qos.EVENTS)
        self.create_subscription(VerifierVerdict, names.VERDICTS, self.verdicts.append, qos.EVENTS)
        self.create_subscription(DiagnosticArray, names.DIAGNOSTICS,
                                 lambda m: self.diagnostics.extend(s for s in m.status if "visual verifier" in s.name),
                                 qos.DIAGNOSTICS)
        self.create_timer(0.05, self.publish_frames)

    def publish_frames(self) -> None:
        header = Header(stamp=self.get_clock().now().to_msg(), frame_id="front_camera_color_optical_frame")
        self.color_pub.publish(image_msg(self.rgb, "rgb8", header))
        self.depth_pub.publish(image_msg(self.depth, "16UC1", header))


def test_the_node_perceives_in_a_worker_and_publishes_the_vlm_verdict(ros, server):
    server.script.append("hold")   # the first request waits at the server until the test releases it
    params = {"backend": "vlm", "vlm_base_url": server.base_url, "vlm_timeout_s": 300.0, "sample_period_s": 0.05,
              "diagnostics_period_s": 0.1, "stale_after_s": 60.0}
    verifier = ros.add(VisualVerifierNode(namespace=NS, parameter_overrides=[Parameter(k, value=v)
                                                                             for k, v in params.items()]))
    intrinsics = verifier.camera.intrinsics
    rig = ros.add(Rig(intrinsics.width, intrinsics.height))
    wait_for(server.holding.is_set, timeout=60, what="the first request held at the server")
    wait_for(lambda: verifier.counts["skipped_frames"] >= 3, timeout=60,
             what="frame pairs sampled (and skipped) while the request is in flight")
    wait_for(lambda: rig.plan_pub.get_subscription_count() >= 1 and rig.outcome_pub.get_subscription_count() >= 1,
             what="the verifier's plan and outcome subscriptions")
    rig.plan_pub.publish(Plan(plan_id="p1", agent_id="arm_0", steps=[
        PlanStep(index=0, action="pick", parameters_json=json.dumps({"object": "apple"}))]))
    wait_for(lambda: verifier.counts["plans"] == 1, what="the plan taken")
    assert verifier.verifier.current is None, "the plan waits for the perception in flight (its frame came first)"
    server.release.set()
    wait_for(lambda: verifier.verifier.check is not None, timeout=60, what="the pick's first frame perceived")
    rig.outcome_pub.publish(ExecutionOutcome(agent_id="arm_0", action="pick", success=True))
    wait_for(lambda: rig.verdicts, timeout=60, what="the verdict on the ended pick")
    (verdict,) = rig.verdicts
    assert verdict.violation and verdict.step_ended and verdict.backend == "vlm" and not verdict.action_context_used
    assert verdict.action == "pick(object=apple)" and "reported success" in verdict.detail

    server.script.append("http_500")
    wait_for(lambda: any(s.level == DiagnosticStatus.WARN and "perceiver failed" in s.message
                         for s in rig.diagnostics), timeout=60, what="diagnostics WARN on the failed request")
    assert verifier.counts["perceiver_errors"] >= 1 and verifier.counts["perceiver_error.http_status"] >= 1
    assert all("apple" in texts(r) and not PLAN_WORDS.search(texts(r)) for r in server.requests)
    assert struct.unpack(">II", png_of(image_url(server.requests[0]))[16:24]) == (intrinsics.width, intrinsics.height)
