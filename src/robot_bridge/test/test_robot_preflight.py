"""robot_preflight: parameter files, the ip JSON parser, the verdicts, and whole runs against real peers.

The peers are real: HTTP servers on 127.0.0.1 that speak the OpenVLA deploy server's POST /act (json_numpy)
and an OpenAI-compatible GET /v1/models, the real `ip` (which does not know the test's CAN port), the real
pyorbbecsdk (no camera is attached to this computer). The ip JSON samples are what iproute2 prints for a
gs_usb adapter (USB-CAN), a vcan link and the loopback interface.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler

import json_numpy
import numpy as np
import pytest
import yaml

from brace_common.local_http import LocalHTTPServer, answer
from brace_common.testing import installed_executable
from robot_bridge.preflight import robot_preflight as pf

# ------------------------------------------------------------------ captured `ip -details -json link show` output

GS_USB_UP_1M = (
    '[{"ifindex":4,"ifname":"can0","flags":["NOARP","UP","LOWER_UP","ECHO"],"mtu":16,"qdisc":"pfifo_fast",'
    '"operstate":"UP","linkmode":"DEFAULT","group":"default","txqlen":10,"link_type":"can","promiscuity":0,'
    '"allmulti":0,"min_mtu":0,"max_mtu":0,"linkinfo":{"info_kind":"can","info_data":{"ctrlmode":[],'
    '"state":"ERROR-ACTIVE","berr_counter":{"tx":0,"rx":0},"restart_ms":0,"bittiming":{"bitrate":1000000,'
    '"sample_point":"0.750","tq":62,"prop_seg":5,"phase_seg1":6,"phase_seg2":4,"sjw":1,"brp":3},'
    '"bittiming_const":{"name":"gs_usb","tseg1":{"min":1,"max":16},"tseg2":{"min":1,"max":8},'
    '"sjw":{"min":1,"max":4},"brp":{"min":1,"max":1024},"brp_inc":1},"clock":48000000},'
    '"info_xstats":{"restarts":0,"bus_error":0,"arbitration_lost":0,"error_warning":0,"error_passive":0,'
    '"bus_off":0}},"num_tx_queues":1,"num_rx_queues":1,"gso_max_size":65536,"gso_max_segs":65535,'
    '"tso_max_size":65536,"tso_max_segs":65535,"gro_max_size":65536,"parentbus":"usb","parentdev":"1-2:1.0"}]')
GS_USB_DOWN = GS_USB_UP_1M.replace('"NOARP","UP","LOWER_UP","ECHO"', '"NOARP","ECHO"').replace(
    '"operstate":"UP"', '"operstate":"DOWN"').replace('"ERROR-ACTIVE"', '"STOPPED"')
# Plugged in, never configured: the kernel reports no bit timing at all.
GS_USB_NEW = (
    '[{"ifindex":4,"ifname":"can0","flags":["NOARP","ECHO"],"mtu":16,"qdisc":"noop","operstate":"DOWN",'
    '"linkmode":"DEFAULT","group":"default","txqlen":10,"link_type":"can","promiscuity":0,"allmulti":0,'
    '"min_mtu":0,"max_mtu":0,"linkinfo":{"info_kind":"can","info_data":{"ctrlmode":[],"state":"STOPPED",'
    '"restart_ms":0,"bittiming_const":{"name":"gs_usb","tseg1":{"min":1,"max":16},"tseg2":{"min":1,"max":8},'
    '"sjw":{"min":1,"max":4},"brp":{"min":1,"max":1024},"brp_inc":1},"clock":48000000}},"num_tx_queues":1,'
    '"num_rx_queues":1,"gso_max_size":65536,"gso_max_segs":65535,"parentbus":"usb","parentdev":"1-2:1.0"}]')
GS_USB_UP_500K = GS_USB_UP_1M.replace('"bitrate":1000000', '"bitrate":500000').replace(
    '"tq":62', '"tq":125').replace('"brp":3}', '"brp":6}')
GS_USB_BUS_OFF = GS_USB_UP_1M.replace('"ERROR-ACTIVE"', '"BUS-OFF"').replace('"tx":0', '"tx":256')
GS_USB_ERROR_PASSIVE = GS_USB_UP_1M.replace('"ERROR-ACTIVE"', '"ERROR-PASSIVE"').replace('"tx":0', '"tx":128')
VCAN_UP = (
    '[{"ifindex":5,"ifname":"vcan0","flags":["NOARP","UP","LOWER_UP"],"mtu":72,"qdisc":"noqueue",'
    '"operstate":"UNKNOWN","linkmode":"DEFAULT","group":"default","txqlen":1000,"link_type":"can",'
    '"promiscuity":0,"allmulti":0,"min_mtu":0,"max_mtu":0,"linkinfo":{"info_kind":"vcan"},"num_tx_queues":1,'
    '"num_rx_queues":1,"gso_max_size":65536,"gso_max_segs":65535,"tso_max_size":65536,"tso_max_segs":65535,'
    '"gro_max_size":65536}]')
VCAN_DOWN = VCAN_UP.replace('"NOARP","UP","LOWER_UP"', '"NOARP"').replace('"UNKNOWN"', '"DOWN"')
LOOPBACK = (  # captured on this machine
    '[{"ifindex":1,"ifname":"lo","flags":["LOOPBACK","UP","LOWER_UP"],"mtu":65536,"qdisc":"noqueue",'
    '"operstate":"UNKNOWN","linkmode":"DEFAULT","group":"default","txqlen":1000,"link_type":"loopback",'
    '"address":"00:00:00:00:00:00","broadcast":"00:00:00:00:00:00","promiscuity":0,"allmulti":0,"min_mtu":0,'
    '"max_mtu":0,"inet6_addr_gen_mode":"eui64","num_tx_queues":1,"num_rx_queues":1,"gso_max_size":65536,'
    '"gso_max_segs":65535,"tso_max_size":524280,"tso_max_segs":65535,"gro_max_size":65536}]')

ARM = pf.CanCheck("can0", ("piper_arm",))


def test_parse_gs_usb_up():
    link = pf.parse_ip_link(GS_USB_UP_1M, "can0")
    assert link == pf.CanLink(name="can0", link_type="can", kind="can", admin_up=True, operstate="UP",
                              bitrate=1_000_000, can_state="ERROR-ACTIVE", driver="gs_usb", parent="usb 1-2:1.0")


def test_parse_never_configured_has_no_bitrate():
    link = pf.parse_ip_link(GS_USB_NEW, "can0")
    assert link.bitrate is None and not link.admin_up and link.can_state == "STOPPED"


def test_parse_missing_and_other_interfaces():
    assert pf.parse_ip_link("", "can0") is None           # ip prints nothing (and an error) for an unknown device
    assert pf.parse_ip_link(VCAN_UP, "can0") is None       # listed, but another name
    assert pf.parse_ip_link(VCAN_UP, "vcan0").kind == "vcan"
    with_altname = json.loads(GS_USB_UP_1M)
    with_altname[0]["altnames"] = ["piper_can"]
    assert pf.parse_ip_link(json.dumps(with_altname), "piper_can").name == "can0"
    for bad in ("Device \"can0\" does not exist.", '{"ifname": "can0"}', "[1, 2]"):
        with pytest.raises(ValueError):
            pf.parse_ip_link(bad, "can0")


def judge(sample: str, port: str = "can0") -> pf.CheckResult:
    return pf.judge_can_link(pf.CanCheck(port, ("piper_arm",)), pf.parse_ip_link(sample, port))


def test_verdict_up_at_one_megabit():
    result = judge(GS_USB_UP_1M)
    assert result.status is pf.Status.OK
    assert "1000000" in result.detail and "gs_usb" in result.detail and "1-2:1.0" in result.detail
    assert "fix" not in result.line()


def test_verdict_down_gives_the_up_command():
    for sample in (GS_USB_DOWN, GS_USB_NEW):
        result = judge(sample)
        assert result.status is pf.Status.WRONG and "DOWN" in result.detail
        assert result.fix == "sudo ip link set can0 up type can bitrate 1000000"
    assert "no bitrate set" in judge(GS_USB_NEW).detail


def test_verdict_wrong_bitrate_resets_it():
    result = judge(GS_USB_UP_500K)
    assert result.status is pf.Status.WRONG and "500000" in result.detail
    assert result.fix == ("sudo ip link set can0 down && sudo ip link set can0 type can bitrate 1000000 "
                          "&& sudo ip link set can0 up")
    assert result.line().endswith("-> fix: " + result.fix)


def test_verdict_bus_off_and_error_passive():
    for sample, state in ((GS_USB_BUS_OFF, "BUS-OFF"), (GS_USB_ERROR_PASSIVE, "ERROR-PASSIVE")):
        result = judge(sample)
        assert result.status is pf.Status.WRONG and state in result.detail and "power the arm" in result.fix


def test_verdict_missing_interface():
    result = pf.judge_can_link(ARM, None)
    assert result.status is pf.Status.MISSING and "'can0'" in result.detail
    assert "modprobe gs_usb" in result.fix and result.fix.endswith("sudo ip link set can0 up type can bitrate 1000000")


def test_verdict_vcan_and_not_can():
    assert judge(VCAN_UP, "vcan0").status is pf.Status.OK
    down = judge(VCAN_DOWN, "vcan0")
    assert down.status is pf.Status.WRONG and down.fix == "sudo ip link set vcan0 up"
    loop = judge(LOOPBACK, "lo")
    assert loop.status is pf.Status.WRONG and "loopback" in loop.detail


def test_real_ip_reports_an_unknown_port_missing():
    result = pf.check_can(pf.CanCheck("brace_pf9", ("piper_arm",)), timeout=5.0)
    assert result.status is pf.Status.MISSING and "brace_pf9" in result.subject
    assert "bitrate 1000000" in result.fix or "iproute2" in result.fix


# ------------------------------------------------------------------ parameter files


def test_sections_nested_wildcards_and_flattening():
    document = yaml.safe_load("""
/**:
  ros__parameters: {use_sim_time: false, can_interface: socketcan}
brace:
  piper_arm:
    ros__parameters: {can_port: can1, limits: {speed: 0.5}}
/**/front_camera:
  ros__parameters: {serial_number: AY3A1200123}
""")
    sections = pf.parse_sections(document, "robot.yaml")
    assert [(s.key, s.node) for s in sections] == [("brace/piper_arm", "piper_arm"), ("/**/front_camera", "front_camera")]
    arm = sections[0].params
    assert arm == {"use_sim_time": False, "can_interface": "socketcan", "can_port": "can1", "limits.speed": 0.5}
    only_wildcard = pf.parse_sections({"/**": {"ros__parameters": {"can_port": "can0"}}})
    assert len(only_wildcard) == 1 and only_wildcard[0].label == "/**"


@pytest.mark.parametrize("document", [None, [], "text", {"piper_arm": {"can_port": "can0"}},
                                      {"piper_arm": {"ros__parameters": ["can0"]}}])
def test_sections_reject_what_is_not_a_parameter_file(document):
    with pytest.raises(pf.ParamFileError):
        pf.parse_sections(document)


ROBOT = {
    "/**/piper_arm": {"ros__parameters": {"can_port": "can0", "agent_id": "arm_0"}},
    "/**/piper_twin": {"ros__parameters": {"can_port": "can0", "can_interface": "udp_multicast"}},
    "/**/front_camera": {"ros__parameters": {"camera_name": "front_camera", "serial_number": "AY3A1200123"}},
    "/**/wrist_camera": {"ros__parameters": {"camera_name": "wrist_camera", "serial_number": "", "source": "device"}},
    "/**/replay_camera": {"ros__parameters": {"serial_number": "", "source": "video", "video_path": "/data/a.mp4"}},
    "/**/openvla_executor": {"ros__parameters": {"backend": "server", "unnorm_key": "bridge_orig",
                                                 "model_path": "/models/openvla-7b"}},
    "/**/erecap_planner": {"ros__parameters": {"model_path": "smollm2-135m-instruct"}},
    "/**/planner_client": {"ros__parameters": {"base_url": "http://10.0.0.5:8001/v1", "model": "qwen2.5-14b"}},
}


def test_plan_finds_checks_by_parameter_names():
    plan = pf.plan_checks(pf.parse_sections(ROBOT))
    assert plan.can == (pf.CanCheck("can0", ("piper_arm",)),)
    assert [r.status for r in plan.skipped] == [pf.Status.SKIP] and "udp_multicast" in plan.skipped[0].detail
    assert plan.cameras == (pf.CameraCheck("front_camera", "AY3A1200123"), pf.CameraCheck("wrist_camera", ""))
    assert plan.files == (pf.FileCheck("camera replay_camera video", "/data/a.mp4", "video"),
                          pf.FileCheck("model (erecap_planner)", "smollm2-135m-instruct", "model"))
    assert plan.vla == (pf.VlaCheck("VLA server (openvla_executor)", pf.DEFAULT_VLA_URL, "bridge_orig"),)
    assert plan.openai == (pf.OpenAICheck("planner server (planner_client)", "http://10.0.0.5:8001/v1", "qwen2.5-14b"),)


def test_plan_local_vla_and_server_urls_without_backend():
    plan = pf.plan_checks(pf.parse_sections({
        "/**/openvla_executor": {"ros__parameters": {"backend": "local", "model_path": "",
                                                     "server_url": "http://127.0.0.1:8000/act"}},
        "/**/other_vla": {"ros__parameters": {"server_url": "http://gpu:8000/act/"}},
        "/**/llm": {"ros__parameters": {"server_url": "http://gpu:8001", "model_name": "qwen"}},
    }))
    assert plan.files == (pf.FileCheck("model (openvla_executor)", "", "model"),)
    assert plan.vla == (pf.VlaCheck("VLA server (other_vla)", "http://gpu:8000/act/", ""),)
    assert plan.openai == (pf.OpenAICheck("planner server (llm)", "http://gpu:8001", "qwen"),)


def test_plan_checks_the_verifiers_vlm_server_only_with_the_vlm_backend(monkeypatch):
    monkeypatch.setenv("VLM_KEY", "sk-vlm")
    plan = pf.plan_checks(pf.parse_sections({
        "/**/visual_verifier": {"ros__parameters": {"backend": "vlm", "vlm_base_url": "http://gpu:8002/v1",
                                                    "vlm_model": "Qwen/Qwen2.5-VL-7B-Instruct",
                                                    "vlm_api_key_env": "VLM_KEY"}},
        "/**/geometric_verifier": {"ros__parameters": {"backend": "geometric", "vlm_base_url": "http://gpu:9/v1"}},
    }))
    (check,) = plan.openai
    assert check == pf.OpenAICheck("VLM server (visual_verifier)", "http://gpu:8002/v1",
                                   "Qwen/Qwen2.5-VL-7B-Instruct", "sk-vlm", "VLM")
    wrong = pf.judge_models_answer(check, "http://gpu:8002/v1/models",
                                   pf.HttpAnswer(200, b'{"data": [{"id": "llava"}]}'))
    assert wrong.status is pf.Status.WRONG and "set vlm_model to one of them" in wrong.fix
    missing = pf.judge_models_answer(check, "http://gpu:8002/v1/models", pf.HttpAnswer(error="connection refused"))
    assert missing.status is pf.Status.MISSING and "vllm serve" in missing.fix
    with pytest.raises(pf.ParamFileError, match="vlm_base_url"):
        pf.plan_checks(pf.parse_sections({"/**/v": {"ros__parameters": {"backend": "vlm", "vlm_base_url": "gpu"}}}))


@pytest.mark.parametrize("params, words", [
    ({"can_port": 0}, "can_port"),
    ({"serial_number": 123456}, "quote it"),
    ({"serial_number": "", "source": "usb"}, "'source'"),
    ({"backend": "server", "server_url": "localhost:8000/act"}, "is not an http(s)"),
    ({"backend": "server", "server_url": "http://127.0.0.1:80x/act"}, "bad port"),
    ({"backend": "openai"}, "needs a base_url"),
])
def test_plan_rejects_values_of_the_wrong_kind(params, words):
    with pytest.raises(pf.ParamFileError, match="'/\\*\\*/node'") as raised:
        pf.plan_checks(pf.parse_sections({"/**/node": {"ros__parameters": params}}, "f.yaml"))
    assert words in str(raised.value)


def test_models_url_forms():
    assert pf.models_url("http://h:8001") == "http://h:8001/v1/models"
    assert pf.models_url("http://h:8001/v1/") == "http://h:8001/v1/models"
    assert pf.models_url("https://h/v1/chat/completions") == "https://h/v1/models"
    assert pf.models_url("http://h:8001/llm/v1/models") == "http://h:8001/llm/v1/models"


# ------------------------------------------------------------------ cameras


def cams(*pairs):
    return [pf.CameraCheck(name, serial) for name, serial in pairs]


FRONT, WRIST = pf.AttachedCamera("AY3A1200123", "Orbbec Gemini 335"), pf.AttachedCamera("CP0E5300456", "Orbbec Gemini 2")


def test_cameras_by_serial():
    results = pf.judge_cameras(cams(("front_camera", "AY3A1200123"), ("wrist_camera", "XX")), [FRONT, WRIST])
    assert [r.status for r in results] == [pf.Status.OK, pf.Status.MISSING]
    assert "Gemini 335" in results[0].detail
    assert "XX" in results[1].detail and "CP0E5300456" in results[1].detail and "99-brace-robot.rules" in results[1].fix


def test_cameras_first_device_rules():
    ok = pf.judge_cameras(cams(("wrist_camera", "")), [WRIST, FRONT])
    assert ok[0].status is pf.Status.OK and "CP0E5300456" in ok[0].detail
    twice = pf.judge_cameras(cams(("a", ""), ("b", "")), [FRONT, WRIST])
    assert [r.status for r in twice] == [pf.Status.OK, pf.Status.WRONG]
    taken = pf.judge_cameras(cams(("front_camera", "AY3A1200123"), ("wrist_camera", "")), [FRONT, WRIST])
    assert taken[1].status is pf.Status.WRONG and "front_camera's" in taken[1].detail
    duplicate = pf.judge_cameras(cams(("a", "AY3A1200123"), ("b", "AY3A1200123")), [FRONT])
    assert [r.status for r in duplicate] == [pf.Status.OK, pf.Status.WRONG]
    assert [r.status for r in pf.judge_cameras(cams(("a", "")), [])] == [pf.Status.MISSING]


def test_real_sdk_without_a_camera(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    results = pf.check_cameras(cams(("front_camera", "AY3A1200123"), ("wrist_camera", "")))
    assert [r.status for r in results] == [pf.Status.MISSING, pf.Status.MISSING]
    assert "attached: none" in results[0].detail
    assert not (tmp_path / "Log").exists()  # the SDK's file log is off


# ------------------------------------------------------------------ files


def test_model_and_video_files(tmp_path):
    folder = tmp_path / "openvla-7b"
    folder.mkdir()
    check = pf.FileCheck("model (x)", str(folder), "model")
    assert pf.check_file(check).status is pf.Status.WRONG           # no config.json
    (folder / "config.json").write_text("{}")
    assert pf.check_file(check).status is pf.Status.OK
    assert pf.check_file(pf.FileCheck("model (x)", str(tmp_path / "none"), "model")).status is pf.Status.MISSING
    assert pf.check_file(pf.FileCheck("model (x)", "", "model")).status is pf.Status.WRONG
    assert pf.check_file(pf.FileCheck("v", str(folder), "video")).status is pf.Status.WRONG
    assert pf.check_file(pf.FileCheck("v", str(folder / "config.json"), "video")).status is pf.Status.OK


# ------------------------------------------------------------------ servers on 127.0.0.1


class Peer:
    """A real HTTP server on 127.0.0.1 in a thread: the VLA deploy server's /act and an OpenAI /v1/models."""

    def __init__(self, mode: str = "action", models: tuple[str, ...] = ("qwen2.5-14b-instruct",)):
        self.mode, self.models, self.requests = mode, models, []
        peer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def answer(self, status: int, body: str):
                answer(self, status, body.encode())

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path != "/act":
                    return self.answer(404, '{"detail":"Not Found"}')
                try:  # the deploy server: parse, run the model, or answer "error"
                    payload = json_numpy.loads(body)
                    image, instruction = payload["image"], payload["instruction"]
                    assert isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.shape[2] == 3
                    assert isinstance(instruction, str)
                    peer.requests.append(payload)
                    if peer.mode == "error" or payload.get("unnorm_key", "bridge_orig") != "bridge_orig":
                        raise KeyError(payload.get("unnorm_key"))
                except Exception:  # noqa: BLE001 - what the deploy server does with any failure
                    return self.answer(200, json.dumps("error"))
                action = np.array([0.01, -0.02, 0.0, 0.0, 0.0, 0.1, 1.0]) if peer.mode == "action" else np.zeros(3)
                self.answer(200, json_numpy.dumps(action))

            def do_GET(self):
                if self.path != "/v1/models":
                    return self.answer(404, '{"detail":"Not Found"}')
                self.answer(200, json.dumps({"object": "list", "data": [
                    {"id": m, "object": "model", "created": 0, "owned_by": "vllm"} for m in peer.models]}))

        self.http = LocalHTTPServer(Handler, name="peer").start()
        self.port = self.http.port

    def close(self):
        self.http.stop()


@pytest.fixture
def peers():
    made = []

    def make(*args, **kwargs):
        made.append(Peer(*args, **kwargs))
        return made[-1]

    yield make
    for peer in made:
        peer.close()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def vla(url, key="bridge_orig"):
    return pf.VlaCheck("VLA server (openvla_executor)", url, key)


def test_vla_server_answers_an_action(peers):
    peer = peers("action")
    result = pf.check_vla_server(vla(f"http://127.0.0.1:{peer.port}/act"), timeout=5.0)
    assert result.status is pf.Status.OK and "7-D action" in result.detail
    assert peer.requests[0]["unnorm_key"] == "bridge_orig" and peer.requests[0]["image"].shape == (32, 32, 3)


def test_vla_server_error_answer_names_the_unnorm_key(peers):
    peer = peers("action")
    result = pf.check_vla_server(vla(f"http://127.0.0.1:{peer.port}/act", "libero_spatial"), timeout=5.0)
    assert result.status is pf.Status.WRONG and '"error"' in result.detail and "libero_spatial" in result.detail
    assert "logs openvla" in result.fix


def test_vla_server_wrong_answers(peers):
    peer = peers("short")
    assert "not a finite 7-D action" in pf.check_vla_server(vla(f"http://127.0.0.1:{peer.port}/act"), 5.0).detail
    wrong_path = pf.check_vla_server(vla(f"http://127.0.0.1:{peer.port}/predict"), 5.0)
    assert wrong_path.status is pf.Status.WRONG and "HTTP 404" in wrong_path.detail
    nan = pf.judge_vla_answer(vla("http://x/act"), pf.HttpAnswer(200, json_numpy.dumps(np.full(7, np.nan)).encode()))
    assert nan.status is pf.Status.WRONG
    text = pf.judge_vla_answer(vla("http://x/act"), pf.HttpAnswer(200, b"<html>"))
    assert text.status is pf.Status.WRONG and "not json_numpy" in text.detail


def test_vla_server_refused_and_silent():
    refused = pf.check_vla_server(vla(f"http://127.0.0.1:{closed_port()}/act"), timeout=5.0)
    assert refused.status is pf.Status.MISSING and "connection refused" in refused.detail
    assert "--profile gpu up -d openvla" in refused.fix
    with socket.socket() as listener:  # accepts connections (the kernel's backlog) but never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        silent = pf.check_vla_server(vla(f"http://127.0.0.1:{listener.getsockname()[1]}/act"), timeout=0.3)
    assert silent.status is pf.Status.MISSING and "no answer within 0.3 s" in silent.detail


def test_a_server_that_drips_its_answer_cannot_hold_the_check():
    """The timeout bounds the whole exchange: a per-read timeout never fired for a byte every 0.1 s."""
    stop = threading.Event()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)

        def drip() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.sendall(b"HTTP/1.1 200 OK\r\nX-Pad: ")
                while not stop.wait(0.1):  # the header never ends
                    with contextlib.suppress(OSError):
                        conn.sendall(b"a")

        server = threading.Thread(target=drip, daemon=True)
        server.start()
        try:
            answer = pf.check_vla_server(vla(f"http://127.0.0.1:{listener.getsockname()[1]}/act"), timeout=0.5)
        finally:
            stop.set()
            server.join(timeout=5)
    assert answer.status is pf.Status.MISSING and "no answer within 0.5 s" in answer.detail


def test_openai_models(peers):
    peer = peers(models=("qwen2.5-14b-instruct", "qwen2.5-7b-instruct"))
    base = f"http://127.0.0.1:{peer.port}/v1"
    ok = pf.check_openai_server(pf.OpenAICheck("planner", base, "qwen2.5-14b-instruct"), 5.0)
    assert ok.status is pf.Status.OK and "qwen2.5-7b-instruct" in ok.detail
    other = pf.check_openai_server(pf.OpenAICheck("planner", base, "llama"), 5.0)
    assert other.status is pf.Status.WRONG and "not 'llama'" in other.detail and "--served-model-name llama" in other.fix
    empty = peers(models=())
    assert "serves no model" in pf.check_openai_server(pf.OpenAICheck("p", f"http://127.0.0.1:{empty.port}", ""), 5.0).detail
    refused = pf.check_openai_server(pf.OpenAICheck("p", f"http://127.0.0.1:{closed_port()}/v1", ""), 5.0)
    assert refused.status is pf.Status.MISSING and "up -d planner" in refused.fix
    locked = pf.judge_models_answer(pf.OpenAICheck("p", "http://x/v1", ""), "http://x/v1/models", pf.HttpAnswer(401))
    assert locked.status is pf.Status.WRONG and "api_key" in locked.fix


# ------------------------------------------------------------------ whole runs and exit codes


def write(path, document) -> str:
    path.write_text(yaml.safe_dump(document))
    return str(path)


def test_run_all_pass_exits_0(tmp_path, peers, capfd):
    vla_peer, llm = peers("action"), peers()
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    params = write(tmp_path / "robot.yaml", {
        "/**/openvla_executor": {"ros__parameters": {"backend": "server", "unnorm_key": "bridge_orig",
                                                     "server_url": f"http://127.0.0.1:{vla_peer.port}/act"}},
        "/**/erecap_planner": {"ros__parameters": {"model_path": str(model)}},
        "/**/planner_client": {"ros__parameters": {"base_url": f"http://127.0.0.1:{llm.port}/v1",
                                                   "model": "qwen2.5-14b-instruct"}},
        "/**/piper_twin": {"ros__parameters": {"can_port": "can0", "can_interface": "virtual"}},
    })
    assert pf.main([params, "--timeout", "5"]) == 0
    out, err = capfd.readouterr()
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == ["SKIP", "OK", "OK", "OK"]
    assert "4 of 4 checks passed" in err


def test_run_with_missing_hardware_and_error_server_exits_1(tmp_path, peers, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)
    vla_peer = peers("error")
    params = write(tmp_path / "robot.yaml", {
        "/**/piper_arm": {"ros__parameters": {"can_port": "brace_pf9", "agent_id": "arm_0"}},
        "/**/front_camera": {"ros__parameters": {"camera_name": "front_camera", "serial_number": "AY3A1200123"}},
        "/**/openvla_executor": {"ros__parameters": {"backend": "server",
                                                     "server_url": f"http://127.0.0.1:{vla_peer.port}/act"}},
        "/**/other_vla": {"ros__parameters": {"backend": "server",
                                              "server_url": f"http://127.0.0.1:{closed_port()}/act"}},
    })
    assert pf.main([params, "--timeout", "5"]) == 1
    out, err = capfd.readouterr()
    lines = out.splitlines()
    assert len(lines) == 4, out
    assert lines[0].startswith("MISSING CAN brace_pf9 (piper_arm)")
    assert lines[1].startswith("MISSING camera front_camera")
    assert lines[2].startswith("WRONG   VLA server (openvla_executor)") and '"error"' in lines[2]
    assert lines[3].startswith("MISSING VLA server (other_vla)") and "connection refused" in lines[3]
    assert all("-> fix: " in line for line in lines)
    assert "0 of 4 checks passed" in err


def test_bad_files_exit_2(tmp_path, capfd):
    nothing = write(tmp_path / "nothing.yaml", {"/**/trigger_monitor": {"ros__parameters": {"period": 1.0}}})
    broken = tmp_path / "broken.yaml"
    broken.write_text("/**/piper_arm:\n  ros__parameters: {can_port: [\n")
    wrong_type = write(tmp_path / "wrong.yaml", {"/**/piper_arm": {"ros__parameters": {"can_port": 0}}})
    for args in ([str(tmp_path / "absent.yaml")], [str(broken)], [nothing], [wrong_type]):
        assert pf.main(args) == 2, args
        out, err = capfd.readouterr()
        assert out == "" and "bad parameter file" in err
    good = write(tmp_path / "good.yaml", {"/**/llm": {"ros__parameters": {"model_path": str(tmp_path)}}})
    (tmp_path / "config.json").write_text("{}")
    assert pf.main([nothing, good]) == 0  # a file without checks beside a robot's is fine (control settings)
    assert capfd.readouterr().out.startswith("OK      model (llm)")
    with pytest.raises(SystemExit) as usage:
        pf.main([nothing, "--timeout", "0"])
    assert usage.value.code == 2


def test_installed_command(tmp_path, peers):
    peer = peers("action")
    good = write(tmp_path / "good.yaml", {"/**/openvla_executor": {"ros__parameters": {
        "backend": "server", "server_url": f"http://127.0.0.1:{peer.port}/act"}}})
    bad = write(tmp_path / "bad.yaml", {"/**/piper_arm": {"ros__parameters": {"can_port": "brace_pf9"}}})
    command = [str(installed_executable("robot_bridge", "robot_preflight"))]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([*command, good], capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("OK      VLA server (openvla_executor)")
    done = subprocess.run([*command, good, bad], capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert done.returncode == 1 and "MISSING CAN brace_pf9" in done.stdout
    done = subprocess.run([sys.executable, "-m", "robot_bridge.preflight.robot_preflight", str(tmp_path / "none.yaml")],
                          capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert done.returncode == 2 and "cannot read" in done.stderr
