"""ServerWatch against the scripted OpenAI-protocol server: the probe that starts serving, the load it reports."""

from __future__ import annotations

from test_world_schema import Log

from brace_common.backoff import Backoff
from brace_common.local_http import free_port
from erecap_planner.call_path import CallOptions
from erecap_planner.openai_client import OpenAIClient
from erecap_planner.openai_fault_server import FaultServer
from erecap_planner.server_backend import ServerBackend
from erecap_planner.server_watch import ServerWatch
from erecap_planner.testing import byte_tokenizer


def watch(url: str, load: bool = True, server_model: str = "") -> tuple[ServerWatch, Log]:
    backend = ServerBackend(OpenAIClient(url), byte_tokenizer(), CallOptions("recency"), server_model,
                            backoff=Backoff(0.05, 0.2))
    log = Log()
    return ServerWatch(backend, 2.0, 0.5, load, log), log


def test_the_first_answer_names_the_model_and_is_said_once_then_probes_are_spaced():
    with FaultServer() as server:
        w, log = watch(server.base_url)
        assert w.check() and w.backend.model_name == "scripted-model"
        assert log.said("info", "answers, serving model 'scripted-model'")
        assert w.check() and len(log.lines) == 1  # not due again yet: no request, nothing new to say
    assert w.health(active=True).values["server.answers"] is True and not w.health(active=True).errors


def test_a_configured_model_is_kept():
    with FaultServer() as server:
        w, _ = watch(server.base_url, server_model="mine")
        assert w.check() and w.backend.model_name == "mine"


def test_a_server_that_does_not_answer_is_warned_and_an_error_while_active():
    w, log = watch(f"http://127.0.0.1:{free_port()}/v1")
    assert not w.check() and log.said("warning", "connection_refused")
    assert w.health(active=True).errors and not w.health(active=False).errors


def test_the_load_report_carries_the_gauges_and_this_planners_own_requests():
    with FaultServer() as server:
        server.metrics = "vllm:num_requests_running 3\nvllm:num_requests_waiting 2\n"
        w, log = watch(server.base_url)
        report = w.report()
    assert (report.server_url, report.own_requests) == (w.backend.client.base_url, 0)
    assert (report.load.engine, report.load.running, report.load.waiting) == ("vLLM", 3, 2)
    assert w.reports_load() and not log.lines


def test_a_server_without_metrics_is_said_once_and_not_asked_again():
    with FaultServer() as server:  # GET /metrics: 404
        w, log = watch(server.base_url)
        report = w.report()
    assert report.load is None and not w.reports_load()
    assert log.said("info", "publishes no load")
    assert watch("http://127.0.0.1:9/v1", load=False)[0].reports_load() is False  # server_load_period_s 0
