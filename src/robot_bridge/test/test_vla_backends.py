"""vla_backends against a real ActServer on 127.0.0.1 (the deploy server's protocol), against a DripServer (the
same protocol, misbehaving at the socket level), and LocalBackend's error path."""

import http.client
import json
import socket
import threading

import json_numpy
import numpy as np
import pytest

from brace_common.act_drip_server import DripServer
from robot_bridge.openvla.vla_backends import (
    LocalBackend,
    ServerBackend,
    VlaBackend,
    VlaError,
    check_image,
    openvla_prompt,
    resize_image,
)

IMAGE = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
ACTION = np.array([0.01, -0.02, 0.003, 0.1, -0.2, 0.05, 1.0])


class Recorder:
    """A policy that records what it was asked and answers a fixed action (or what `answer` says)."""

    def __init__(self, answer=None):
        self.calls = []
        self.answer = answer if answer is not None else (lambda image, instruction, key: ACTION)

    def __call__(self, image, instruction, unnorm_key):
        self.calls.append((image.copy(), instruction, unnorm_key))
        return self.answer(image, instruction, unnorm_key)


def test_good_action_round_trip(act):
    policy = Recorder()
    server = act(policy)
    assert server.url.startswith("http://127.0.0.1:") and server.port > 0
    backend = ServerBackend(server.url, unnorm_key="bridge_orig", timeout_s=5.0)
    assert isinstance(backend, VlaBackend)
    action = backend.predict(IMAGE, "pick up the cup")
    assert action.dtype == np.float64 and action.tolist() == ACTION.tolist()
    image, instruction, key = policy.calls[0]
    assert np.array_equal(image, IMAGE) and image.dtype == np.uint8
    assert instruction == "pick up the cup" and key == "bridge_orig"
    # no unnorm_key: the field is left out (the server picks its only statistics)
    ServerBackend(server.url, unnorm_key="").predict(IMAGE, "x")
    assert policy.calls[1][2] is None
    assert server.requests == 2 and server.errors == 0


def test_error_body_is_a_vla_error(act):
    def fail(image, instruction, key):
        raise KeyError(f"no statistics '{key}'")

    server = act(Recorder(fail))
    with pytest.raises(VlaError) as err:
        ServerBackend(server.url, "nope").predict(IMAGE, "pick")
    assert err.value.reason == "server_error" and '"error"' in str(err.value)
    assert server.errors == 1 and "no statistics 'nope'" in server.last_failure


@pytest.mark.parametrize("answer, reason", [
    (lambda *a: np.array([0.0] * 6 + [np.nan]), "server_error"),   # the server refuses non-finite policy output
    (lambda *a: np.zeros(6), "server_error"),
])
def test_bad_policy_output_is_answered_error(act, answer, reason):
    server = act(Recorder(answer))
    with pytest.raises(VlaError) as err:
        ServerBackend(server.url).predict(IMAGE, "pick")
    assert err.value.reason == reason


class RawServer:
    """A socket server answering every request with one fixed HTTP response (a misbehaving deploy server)."""

    def __init__(self, status: int, body: bytes):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.response = (f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                         "Connection: close\r\n\r\n").encode() + body
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/act"

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                head, _, rest = data.partition(b"\r\n\r\n")
                length = int([h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")][0].split(b":")[1])
                while len(rest) < length:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    rest += chunk
                conn.sendall(self.response)

    def close(self):
        self.sock.close()


@pytest.mark.parametrize("status, body, reason", [
    (500, b'{"detail": "Internal Server Error"}', "http_status"),
    (200, json_numpy.dumps(np.array([0.0] * 6 + [np.inf])).encode(), "non_finite"),
    (200, json_numpy.dumps(np.zeros(3)).encode(), "bad_shape"),
    (200, b"[0, 0, 0, 0, 0, 0, 1]", None),
    (200, b"[0, 0, 0, 0, 0, 0, true]", "not_numeric"),
    (200, b'["0", 0, 0, 0, 0, 0, 1]', "not_numeric"),
    (200, b"[0, 0, 0, 0, 0, 0, 1e999]", "non_finite"),
    (200, json_numpy.dumps(np.array([0.0] * 6 + [1j])).encode(), "not_real"),
    (200, json_numpy.dumps(np.ones(7, dtype=bool)).encode(), "not_numeric"),
    (200, json_numpy.dumps(np.array([0.0] * 6 + [np.nan])).encode(), "non_finite"),
    (200, json.dumps(json_numpy.dumps(np.ones(7, dtype=np.complex64))).encode(), "not_real"),  # double-encoded
    (200, json.dumps(json_numpy.dumps(ACTION)).encode(), None),   # the double-encoded form
    (200, b"<html>", "bad_response"),
    (200, b'"something"', "bad_response"),
    (200, b'{"__numpy__": "AAAA"}', "bad_response"),
])
def test_http_errors_and_bad_answers(status, body, reason):
    raw = RawServer(status, body)
    try:
        backend = ServerBackend(raw.url, timeout_s=5.0)
        if reason is None:
            assert backend.predict(IMAGE, "pick").shape == (7,)
        else:
            with pytest.raises(VlaError) as err:
                backend.predict(IMAGE, "pick")
            assert err.value.reason == reason, err.value
    finally:
        raw.close()


def test_timeout(act):
    release = threading.Event()

    def slow(image, instruction, key):
        release.wait(10.0)  # longer than the client's deadline; released at the end of the test
        return ACTION

    server = act(Recorder(slow))
    try:
        with pytest.raises(VlaError) as err:
            ServerBackend(server.url, timeout_s=0.2).predict(IMAGE, "pick")
        assert err.value.reason == "deadline" and "0.2 s" in str(err.value)
    finally:
        release.set()


@pytest.mark.parametrize("mode, reason", [("drip_body", "slow_body"), ("drip_head", "slow_headers"),
                                          ("silent", "deadline")])
def test_a_dripping_server_is_cut_at_the_deadline(mode, reason):
    # a byte every 0.5 s never trips a per-read timeout: only a total deadline ends the request (the drip takes 18+ s);
    # the deadline leaves a busy machine time for the normal answer afterwards, through the same backend
    with DripServer(mode, drip_s=0.5) as server:
        backend = ServerBackend(server.url, timeout_s=2.0)
        with pytest.raises(VlaError) as err:
            backend.predict(IMAGE, "pick")
        assert err.value.reason == reason, err.value
        assert "2 s" in str(err.value) and server.answered == 0
        # the server answers normally again: the next request gets its action
        server.mode = "normal"
        assert backend.predict(IMAGE, "pick").tolist() == server.action


def test_a_server_that_does_not_read_the_request_is_cut_at_the_deadline():
    big = np.zeros((2048, 2048, 3), np.uint8)  # ~17 MB of json_numpy: more than the socket buffers take
    with DripServer("no_read") as server:
        with pytest.raises(VlaError) as err:
            ServerBackend(server.url, timeout_s=0.5).predict(big, "pick")
    assert err.value.reason == "slow_send", err.value


def test_a_cancel_ends_the_request_at_once():
    cancel = threading.Event()
    with DripServer("drip_body", drip_s=0.1) as server:
        threading.Timer(0.3, cancel.set).start()
        with pytest.raises(VlaError) as err:
            ServerBackend(server.url, timeout_s=60.0).predict(IMAGE, "pick", cancelled=cancel.is_set)
    assert err.value.reason == "cancelled"


def test_server_down():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens on this port now
    with pytest.raises(VlaError) as err:
        ServerBackend(f"http://127.0.0.1:{port}/act", timeout_s=2.0).predict(IMAGE, "pick")
    assert err.value.reason == "unreachable"


def test_act_server_protocol_edges(act):
    server = act(Recorder())
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        conn.request("POST", "/other", body=b"{}")
        response = conn.getresponse()
        assert response.status == 404
        response.read()
        conn.request("GET", "/act")
        response = conn.getresponse()
        assert response.status == 405
        response.read()
        conn.request("POST", "/act", body=b'{"instruction": "no image"}')
        response = conn.getresponse()
        assert (response.status, response.read()) == (200, b'"error"')
        encoded = json_numpy.dumps({"image": IMAGE, "instruction": "pick"})
        conn.request("POST", "/act", body=json.dumps({"encoded": encoded}).encode())
        response = conn.getresponse()
        assert response.status == 200 and json_numpy.loads(response.read()).tolist() == ACTION.tolist()
    finally:
        conn.close()
    with pytest.raises(RuntimeError):
        server.start()


def test_backend_input_checks(act):
    backend = ServerBackend("http://127.0.0.1:1/act")
    for bad in (np.zeros((4, 4), np.uint8), np.zeros((4, 4, 3), np.float32), np.zeros((0, 4, 3), np.uint8), [1, 2]):
        with pytest.raises(VlaError) as err:
            backend.predict(bad, "pick")
        assert err.value.reason == "bad_image"
    with pytest.raises(ValueError):
        ServerBackend("ftp://x/act")
    with pytest.raises(ValueError):
        ServerBackend("http://127.0.0.1:1/act", timeout_s=0.0)
    with pytest.raises(ValueError):
        ServerBackend("http:///act")


def test_prompt_and_image_preparation():
    assert openvla_prompt("Pick up the  Cup") == "In: What action should the robot take to pick up the cup?\nOut:"
    with pytest.raises(VlaError):
        openvla_prompt("  ")
    big = np.zeros((480, 640, 3), np.uint8)
    big[:, 320:] = 200
    small = resize_image(big, 224)
    assert small.shape == (224, 224, 3) and small.dtype == np.uint8
    assert small[:, :100].max() == 0 and small[:, 124:].min() == 200  # left half dark, right half bright
    assert resize_image(big, 0) is not None and resize_image(big, 0).shape == big.shape
    assert check_image(big[:, ::2]).flags["C_CONTIGUOUS"]


def test_local_backend_refuses_a_missing_model(tmp_path):
    for path in ("", str(tmp_path / "absent"), str(tmp_path)):
        with pytest.raises(VlaError) as err:
            LocalBackend(path)
        assert err.value.reason == "model_path", path
    assert "never downloads" in str(pytest.raises(VlaError, LocalBackend, "openvla/openvla-7b").value)


def test_local_backend_refuses_a_directory_that_is_not_openvla(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    backend = LocalBackend(str(tmp_path), device="cpu")
    with pytest.raises(VlaError) as err:
        backend.load()
    assert err.value.reason == "model" and str(tmp_path) in str(err.value)
    with pytest.raises(VlaError) as err:
        backend.predict(IMAGE, "pick")
    assert err.value.reason == "model"
