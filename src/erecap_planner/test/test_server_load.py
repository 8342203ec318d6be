"""A planner server's load from its Prometheus /metrics: the gauges of llama.cpp, vLLM and SGLang, read over HTTP."""

from __future__ import annotations

import pytest

from brace_common.local_http import free_port
from erecap_planner.openai_client import OpenAIClient
from erecap_planner.openai_fault_server import FaultServer
from erecap_planner.server_load import LOAD_GAUGES, ServerLoad, ServerLoadProbe, parse_load

LLAMA_CPP = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1834
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 3
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 2
"""

VLLM = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="planner"} 4.0
vllm:num_requests_running{engine="1",model_name="planner"} 1.0
vllm:num_requests_waiting{engine="0",model_name="planner"} 7.0
vllm:gpu_cache_usage_perc{model_name="a b"} 0.5 1700000000000
"""

SGLANG = """sglang:num_running_reqs{model_name="planner"} 6
sglang:num_queue_reqs{model_name="planner"} 0
"""


@pytest.mark.parametrize("text,load", [
    (LLAMA_CPP, ServerLoad(3, 2, "llama.cpp")),
    (VLLM, ServerLoad(5, 7, "vLLM")),  # one gauge per engine core: summed
    (SGLANG, ServerLoad(6, 0, "SGLang")),
    ("llamacpp:requests_processing 1\n", ServerLoad(1, 0, "llama.cpp")),  # no waiting gauge: none waiting
])
def test_each_engines_gauges(text, load):
    assert parse_load(text) == load and load.requests == load.running + load.waiting


@pytest.mark.parametrize("text", [
    "", "# only comments\n", "llamacpp:prompt_tokens_total 12\n",  # no gauge of a known engine
    "llamacpp:requests_processing many\n", "llamacpp:requests_processing\n", "{} 3\n",  # not samples
    "llamacpp:requests_processing NaN\n", "llamacpp:requests_processing -1\n",  # not a count
])
def test_text_without_a_load(text):
    assert parse_load(text) is None


def test_every_engine_names_a_running_and_a_waiting_gauge():
    assert all(len(set(pair)) == 2 for pair in LOAD_GAUGES.values())


def test_the_probe_reads_the_servers_root_not_the_api_prefix():
    with FaultServer() as server:
        server.metrics = LLAMA_CPP
        probe = ServerLoadProbe(OpenAIClient(server.base_url), 2.0)
        assert probe.read() == ServerLoad(3, 2, "llama.cpp") and probe.reports is True
        server.metrics = "llamacpp:requests_processing 0\n"
        assert probe.read() == ServerLoad(0, 0, "llama.cpp")
        assert probe.counts["server_load.readings"] == 2


def test_a_server_without_load_gauges_is_known_as_one():
    with FaultServer() as server:  # GET /metrics: 404
        probe = ServerLoadProbe(OpenAIClient(server.base_url), 2.0)
        assert probe.read() is None and probe.reports is False and probe.counts["server_load.http_error"] == 1
        server.metrics = "process_cpu_seconds_total 1.5\n"  # metrics, but no engine's load
        assert probe.read() is None and probe.reports is False and probe.counts["server_load.no_gauges"] == 1


def test_a_server_that_does_not_answer_gives_no_load_and_no_verdict():
    probe = ServerLoadProbe(OpenAIClient(f"http://127.0.0.1:{free_port()}/v1"), 0.5)
    assert probe.read() is None and probe.reports is None
    assert probe.counts["server_load.connection_refused"] == 1
