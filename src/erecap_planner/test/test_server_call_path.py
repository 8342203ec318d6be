"""The planner-server call path and its HTTP client against a scripted OpenAI-protocol server: every failure counted."""

from __future__ import annotations

import json
import socket
import threading
import time

import jsonschema
import pytest
from test_context import buffer
from test_plan_parser import SCHEMA

from brace_common.action_schema import ActionSchema
from brace_common.backoff import Backoff
from brace_common.vocabulary import CallStatus
from erecap_planner.call_path import CallOptions, CallPath, CallRequest
from erecap_planner.compressors import make_compressor
from erecap_planner.openai_client import OpenAIClient, ServerError, parse_retry_after
from erecap_planner.openai_fault_server import PLAN, FaultServer
from erecap_planner.plan_parser import parse_plan
from erecap_planner.server_backend import ServerBackend
from erecap_planner.testing import byte_tokenizer

SERVER_PHASES = ["context_compress", "retrieve", "request", "first_token", "decode", "parse"]


def server_path(url: str, compressor: str = "recency", api_key: str = "", server_model: str = "",
                endpoint: str = "chat", structured_output: str = "none", backoff: Backoff | None = None,
                memory=None, **options) -> CallPath:
    opts = CallOptions(compressor, **options)
    backend = ServerBackend(OpenAIClient(url, api_key), byte_tokenizer(), opts, server_model, endpoint=endpoint,
                            structured_output=structured_output, backoff=backoff or Backoff(0.05, 0.2))
    return CallPath(backend, opts, make_compressor(compressor), SCHEMA, memory)


def request(budget: int = 400, deadline_ms: float = 10_000.0) -> CallRequest:
    return CallRequest("a", token_budget=budget, slo_ms=deadline_ms / 2, hard_deadline_ms=deadline_ms)


def test_plan_json_schema_accepts_exactly_what_the_parser_accepts():
    schema = SCHEMA.json_schema(max_steps=2)
    valid = json.loads(PLAN)
    jsonschema.validate(valid, schema)
    assert parse_plan(PLAN, SCHEMA)
    for bad in ({"plan": []}, {"plan": [{"action": "fly", "parameters": {}}]},
                {"plan": [{"action": "pick", "parameters": {"object": "cup_3", "extra": 1}}]},
                {"plan": [{"action": "pick", "parameters": {}}]}, {"plan": [valid["plan"][0]] * 3}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_a_call_sends_the_compressed_prompt_and_records_the_server_phases_and_usage():
    with FaultServer() as server:
        seen = []
        out = server_path(server.base_url).run(buffer(30), request(400), on_phase=lambda p, ms: seen.append(p))
    assert out.status == CallStatus.OK, out.error
    assert [s.action for s in out.steps] == ["pick"]
    assert [p.phase for p in out.phases] == SERVER_PHASES == seen
    assert out.tokens_before > 400 >= out.tokens_after
    assert (out.server_prompt_tokens, out.server_completion_tokens, out.backend) == (123, 9, "openai")
    body = server.requests[0]["body"]
    assert server.requests[0]["path"] == "/v1/chat/completions" and body["stream"] is True
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    # B_t is enforced before the request: the user message holds at most the kept tokens (byte tokenizer: 1 per char)
    assert len(body["messages"][1]["content"]) <= out.tokens_after
    assert "REQUEST:" in body["messages"][1]["content"] and "model" not in body


def test_completions_endpoint_sends_the_templated_prompt_and_structured_output_the_schema():
    with FaultServer() as server:
        out = server_path(server.base_url, endpoint="completions", structured_output="json_schema",
                          server_model="m", plan_steps={0: 2}).run(buffer(30), request(600))
    assert out.status == CallStatus.OK, out.error
    body = server.requests[0]["body"]
    assert server.requests[0]["path"] == "/v1/completions" and body["model"] == "m"
    assert body["prompt"].startswith("<|im_start|>system") and body["prompt"].endswith("<|im_start|>assistant\n")
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == SCHEMA.json_schema(2)


def test_an_agents_request_leaves_its_own_id_out_and_a_reply_naming_it_is_a_planner_error():
    yielding = ActionSchema.from_dict({"entities": {"agent": ["a", "b"]}, "actions": {
        "yield_to": {"agent": {"type": "string", "entity": "agent", "not_self": True}}}})
    with FaultServer(text='{"plan": [{"action": "yield_to", "parameters": {"agent": "a"}}]}') as server:
        path = server_path(server.base_url, structured_output="json_schema")
        path.set_schema(yielding)
        out = path.run(buffer(30), request(600))   # for agent a
    sent = server.requests[0]["body"]["response_format"]["json_schema"]["schema"]
    assert sent == yielding.json_schema(agent="a")
    assert sent["properties"]["plan"]["items"]["anyOf"][0]["properties"]["parameters"]["properties"]["agent"][
        "enum"] == ["b"]
    assert out.status == CallStatus.PLANNER_ERROR and out.error.startswith("names_self") and out.steps == []


def test_the_api_key_is_a_bearer_token_and_never_shown():
    with FaultServer(default="bad_request") as server:
        path = server_path(server.base_url, api_key="sk-secret-123")
        out = path.run(buffer(5), request())
    assert server.requests[0]["headers"]["Authorization"] == "Bearer sk-secret-123"
    assert out.status == CallStatus.UNAVAILABLE and "HTTP 400" in out.error
    assert "sk-secret" not in out.error and "sk-secret" not in repr(path.backend.client)


@pytest.mark.parametrize("fault, reason", [("garbage", "not_json"), ("not_json", "not_json"),
                                           ("truncated", "truncated"), ("error_event", "server_error"),
                                           ("bad_request", "http_error")])
def test_broken_replies_end_unavailable_and_counted(fault, reason):
    with FaultServer(default=fault) as server:
        path = server_path(server.base_url)
        out = path.run(buffer(5), request(deadline_ms=30_000))   # every fault ends its reply at once
    assert out.status == CallStatus.UNAVAILABLE and out.steps == [] and reason in out.error
    assert path.backend.counts[f"server.{reason}"] >= 1
    assert [p.phase for p in out.phases][-1] == "request"


def test_a_server_that_ignores_stream_is_read_whole():
    with FaultServer(default="whole_json") as server:
        out = server_path(server.base_url).run(buffer(5), request())
    assert out.status == CallStatus.OK and out.server_prompt_tokens == 50


def test_malformed_plan_text_is_a_planner_error():
    with FaultServer(text='{"plan": [{"action": "teleport", "parameters": {}}]}') as server:
        out = server_path(server.base_url).run(buffer(5), request())
    assert out.status == CallStatus.PLANNER_ERROR and "unknown_action" in out.error


def test_rate_limiting_honours_retry_after_then_succeeds():
    with FaultServer() as server:
        server.script.extend(["rate_limited", "server_error"])
        server.retry_after = "0.3"
        path = server_path(server.base_url)
        started = time.monotonic()
        out = path.run(buffer(5), request(deadline_ms=10_000))
        took = time.monotonic() - started
    assert out.status == CallStatus.OK, out.error
    assert len(server.requests) == 3 and took >= 0.3
    assert path.backend.counts["server.rate_limited"] == 1 and path.backend.counts["server.server_error"] == 1
    assert path.backend.counts["server.retries"] == 2
    assert out.phases[2].phase == "request" and out.phases[2].duration_ms >= 300


def test_a_retry_after_beyond_the_deadline_fails_at_once():
    with FaultServer(default="rate_limited") as server:
        server.retry_after = "30"
        started = time.monotonic()
        out = server_path(server.base_url).run(buffer(5), request(deadline_ms=5_000))
    assert out.status == CallStatus.UNAVAILABLE and "no time left" in out.error
    assert time.monotonic() - started < 4.0 and len(server.requests) == 1


def test_connection_refused_backs_off_until_the_deadline_then_unavailable():
    with FaultServer() as server:
        url = server.base_url
    path = server_path(url)  # nothing listens there any more
    out = path.run(buffer(5), request(deadline_ms=600))
    assert out.status in (CallStatus.UNAVAILABLE, CallStatus.DEADLINE) and out.steps == []
    assert path.backend.counts["server.connection_refused"] >= 2  # retried with backoff
    # the next call waits for the shared backoff instead of hammering a dead server
    assert path.backend.backoff.not_before > 0


def test_a_slow_server_is_cut_at_the_hard_deadline():
    with FaultServer(chunk_delay_s=0.3) as server:
        started = time.monotonic()
        out = server_path(server.base_url).run(buffer(5), request(deadline_ms=700))
        took = time.monotonic() - started
    assert out.status == CallStatus.DEADLINE and not out.slo_met
    assert took < 0.7 + 0.3  # within one poll of the deadline, not after the stream


def test_a_server_that_never_answers_is_cut_at_the_hard_deadline():
    with FaultServer(default="hang") as server:
        out = server_path(server.base_url).run(buffer(5), request(deadline_ms=400))
    assert out.status == CallStatus.DEADLINE and "deadline" in out.error


@pytest.mark.parametrize("fault", ["drip_head", "drip_stream"])
def test_a_server_that_drips_is_cut_at_the_hard_deadline(fault):
    # a byte every 0.1 s never trips a per-read timeout; the hard deadline still ends the call
    with FaultServer(default=fault) as server:
        path = server_path(server.base_url)
        out = path.run(buffer(5), request(deadline_ms=600))
        wait_deadline = time.monotonic() + 5
        while server.disconnects == 0 and time.monotonic() < wait_deadline:
            time.sleep(0.05)
    assert out.status == CallStatus.DEADLINE and "deadline" in out.error and out.steps == []
    # the client went mid-drip (the drip takes 40+ s), and a deadline is not retried
    assert server.disconnects == 1 and len(server.requests) == 1


def test_a_tls_server_that_drips_its_handshake_is_cut_at_the_deadline():
    # a TLS record header announcing a 16 KB handshake message, then one byte every 0.1 s: a socket timeout never fires
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve():
        conn, _ = listener.accept()
        with conn:
            conn.sendall(b"\x16\x03\x03\x40\x00\x02")
            while not stop.wait(0.1):
                try:
                    conn.sendall(b"\x00")
                except OSError:
                    return

    threading.Thread(target=serve, daemon=True).start()
    client = OpenAIClient(f"https://127.0.0.1:{listener.getsockname()[1]}/v1", connect_timeout_s=30.0)
    try:
        with pytest.raises(ServerError) as err:
            client.get_json("/models", time.monotonic() + 0.6)
        assert err.value.reason == "deadline", err.value
    finally:
        stop.set()
        listener.close()


def test_cancel_closes_the_stream():
    with FaultServer(chunk_delay_s=0.1) as server:
        cancel = threading.Event()
        threading.Timer(0.35, cancel.set).start()
        out = server_path(server.base_url).run(buffer(5), request(deadline_ms=20_000), cancelled=cancel.is_set)
        deadline = time.monotonic() + 5
        while server.disconnects == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert out.status == CallStatus.CANCELLED
    assert server.disconnects == 1  # the server saw the client go before its stream ended


def test_retry_after_parsing():
    assert parse_retry_after("2") == 2.0 and parse_retry_after("0.5") == 0.5
    assert parse_retry_after("Wed, 21 Oct 2026 07:28:00 GMT") is None and parse_retry_after(None) is None
    assert parse_retry_after("-1") is None


def test_client_rejects_a_bad_url_and_lists_models():
    with pytest.raises(ValueError):
        OpenAIClient("ftp://host/v1")
    with FaultServer() as server:
        listing = OpenAIClient(server.base_url).get_json("/models", time.monotonic() + 2)
    assert listing["data"][0]["id"] == "scripted-model"
    with pytest.raises(ServerError) as err:
        OpenAIClient(server.base_url).get_json("/models", time.monotonic() + 2)
    assert err.value.reason == "connection_refused"
