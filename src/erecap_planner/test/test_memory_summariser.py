"""OmniAct's episodic summariser over the chat API, at the protocol level: a scripted OpenAI-protocol server answers
with a valid summary, prose, a truncated or misshapen JSON, 5xx, garbage events or nothing within the timeout."""

from __future__ import annotations

import json

import pytest

from brace_common.config import ConfigError
from brace_memory.episodic import RECORD_KEYS
from brace_memory.system import MemorySystem, MemorySystemConfig
from erecap_planner.config import PlannerConfig
from erecap_planner.factory import build_memory, build_summariser
from erecap_planner.memory_summariser import SUMMARY_MAX_TOKENS, ChatSummariser, summary_written
from erecap_planner.openai_client import OpenAIClient
from erecap_planner.openai_fault_server import FaultServer

WAIT_S = 15.0  # bound of every wait on the summary worker
SUMMARY = {"topic": "box_7 delivery blocked", "request": "deliver box_7 to dock_2",
           "actions": ["pick(object=box_7) succeeded"], "outcome": "place(object=box_7) failed: dock_2 closed",
           "observations": ["dock_2 closed at t=7"], "open_questions": ["when does dock_2 reopen?"],
           "evidence": ["place(object=box_7) failed: dock_2 closed"]}


def fold(system: MemorySystem, agent: str = "agent_0", step: int = 7) -> None:
    system.on_entry(agent, 0, "task", "agent_0 must deliver box_7 to dock_2.")
    system.on_entry(agent, step - 1, "action_outcome", "pick(object=box_7) succeeded")
    system.on_entry(agent, step, "failure_trace", "place(object=box_7) failed: dock_2 closed")


def summarised(server: FaultServer, timeout_s: float = 10.0, model: str = "") -> MemorySystem:
    """A memory system whose summariser is the chat model at `server`, after one segment folded and its summary
    settled."""
    summariser = ChatSummariser(OpenAIClient(server.base_url), model, timeout_s)
    system = MemorySystem(MemorySystemConfig(["episodic"]), summariser=summariser)
    fold(system)
    assert system.summaries.wait_idle(WAIT_S)
    return system


def test_a_valid_summary_from_the_chat_api_replaces_the_template():
    with FaultServer(text="```json\n" + json.dumps(SUMMARY) + "\n```") as server:
        system = summarised(server, model="summariser-model")
    (record,) = system.episodic.records("agent_0")
    assert record.fields == {**SUMMARY, "boundary": "failure"} and (record.first_step, record.last_step) == (6, 7)
    assert system.summaries.counts["applied"] == 1
    (request,) = server.requests
    body = request["body"]
    assert request["path"] == "/v1/chat/completions" and body["stream"] and body["model"] == "summariser-model"
    assert body["max_tokens"] == SUMMARY_MAX_TOKENS and body["temperature"] == 0.0
    system_msg, user_msg = body["messages"]
    assert "episodic interaction log writer" in system_msg["content"]
    assert all(key in system_msg["content"] for key in RECORD_KEYS)
    assert "Agent: agent_0\nTrigger: failure" in user_msg["content"]
    assert "t=6 action_outcome: pick(object=box_7) succeeded\nt=7 failure_trace:" in user_msg["content"]
    system.close()


def test_without_a_model_name_the_server_s_own_answers():
    with FaultServer(text=json.dumps(SUMMARY)) as server:
        system = summarised(server)
    assert "model" not in server.requests[0]["body"] and system.summaries.counts["applied"] == 1
    system.close()


@pytest.mark.parametrize("server_kw, counted", [
    ({"text": "The robot tried to deliver the box but the dock was closed."}, "invalid.no_json"),
    ({"text": '{"topic": "delivery", "request": "deliver box_7", "actions": ['}, "invalid.truncated"),
    ({"text": json.dumps({"summary": "dock closed"})}, "invalid.missing_key"),
    ({"text": json.dumps({**SUMMARY, "actions": {"pick": "ok"}})}, "invalid.wrong_type"),
    ({"default": "server_error"}, "failed.server_error"),
    ({"default": "garbage"}, "failed.not_json"),
    ({"default": "truncated"}, "failed.truncated"),
    ({"default": "hang"}, "failed.deadline"),
])
def test_garbage_errors_and_timeouts_keep_the_template_and_are_counted(server_kw, counted):
    with FaultServer(**server_kw) as server:
        system = summarised(server, timeout_s=0.5)
    (record,) = system.episodic.records("agent_0")
    assert record.fields["topic"] == "failure" and record.fields["outcome"].startswith("place(object=box_7) failed")
    counts = system.summaries.counts
    assert counts[counted] == 1 and counts[counted.split(".")[0]] == 1 and counts["applied"] == 0
    system.close()


def test_a_refused_connection_fails_the_summary_not_the_fold():
    with FaultServer() as server:
        url = server.base_url  # closed when the block ends: nothing listens there any more
    system = MemorySystem(MemorySystemConfig(["episodic"]), summariser=ChatSummariser(OpenAIClient(url), timeout_s=2.0))
    fold(system)
    assert system.folded_through("agent_0") == 7  # the template record is there at once
    assert system.summaries.wait_idle(WAIT_S)
    assert system.summaries.counts["failed.connection_refused"] == 1
    system.close()


def test_the_stream_closes_once_the_summary_s_json_is_complete():
    assert summary_written('sure: {"topic": "x"}') and not summary_written('{"topic": "x", "actions": [')
    assert not summary_written("no json yet")


def test_parameters_are_validated_naming_the_parameter():
    PlannerConfig(memory_modules=["episodic"], memory_summariser_url="http://127.0.0.1:8001/v1").validate()
    PlannerConfig(memory_modules=["rag_memory"], memory_summariser_url="https://gpu-host/v1").validate()
    for cfg, parameter in [
        (PlannerConfig(memory_modules=["episodic"], memory_summariser_url="ftp://host/v1"), "memory_summariser_url"),
        (PlannerConfig(memory_modules=["reflective"], memory_summariser_url="http://h:1/v1"), "memory_summariser_url"),
        (PlannerConfig(memory_modules=["episodic"], memory_summariser_timeout_s=0.0), "memory_summariser_timeout_s"),
        (PlannerConfig(memory_modules=["episodic"], memory_summariser_timeout_s=601.0),
         "memory_summariser_timeout_s"),
    ]:
        with pytest.raises(ConfigError) as err:
            cfg.validate()
        assert err.value.parameter == parameter
    with pytest.raises(ConfigError) as err:  # a URL without a host passes the scheme check, not the client's
        build_summariser(PlannerConfig(memory_modules=["episodic"], memory_summariser_url="http://"))
    assert err.value.parameter == "memory_summariser_url"


def test_the_factory_builds_the_summariser_and_sends_the_key_only_to_the_planner_server(monkeypatch):
    assert build_memory(PlannerConfig(memory_modules=["episodic"])).system.summaries is None  # templates only
    monkeypatch.setenv("PLANNER_KEY", "sk-secret")
    cfg = PlannerConfig(memory_modules=["episodic"], server_url="http://127.0.0.1:8001/v1", api_key_env="PLANNER_KEY",
                        memory_summariser_url="http://127.0.0.1:8001/v1", memory_summariser_model="m",
                        memory_summariser_timeout_s=3.0)
    summariser = build_summariser(cfg)
    assert (summariser.model, summariser.timeout_s, summariser.client._api_key) == ("m", 3.0, "sk-secret")
    cfg.memory_summariser_url = "http://127.0.0.1:9001/v1"  # another server: no key
    assert build_summariser(cfg).client._api_key == ""
    memory = build_memory(cfg)
    assert memory.system.summaries is not None and memory.system.summaries.summarise.timeout_s == 3.0
    memory.system.close()
