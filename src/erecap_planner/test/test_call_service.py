"""CallService without ROS: calls queued, run one at a time, superseded, cancelled, expired and counted."""

from __future__ import annotations

import pytest
from test_context import buffer
from test_world_schema import GO, Log, path

from brace_common.action_schema import ActionSchema
from brace_common.vocabulary import CallStatus
from erecap_planner.call_path import CallRequest
from erecap_planner.call_service import CallService, waited_ms
from erecap_planner.openai_fault_server import FaultServer
from erecap_planner.planner_inputs import PlannerInputs
from erecap_planner.world_schema import WorldSchema


@pytest.mark.parametrize("sent_ns, now_ns, waited", [(0, 5_000_000_000, 0.0),              # unstamped
                                                     (3_000_000_000, 2_000_000_000, 0.0),  # a clock ahead of ours
                                                     (1_000_000_000, 1_250_000_000, 250.0),
                                                     (1_000_000_000, 9_000_000_000, 2_000.0)])  # the deadline's
def test_the_wait_before_acceptance_runs_from_the_goals_stamp_within_its_deadline(sent_ns, now_ns, waited):
    assert waited_ms(sent_ns, now_ns, 2_000.0) == waited


class Answers:
    """The goals' answer callbacks: which were called, in order."""

    def __init__(self) -> None:
        self.called: list[bytes] = []

    def of(self, key: bytes):
        return lambda: self.called.append(key)


def service(url: str) -> CallService:
    """The calls of a call path on the planner server at `url`, over a small context."""
    inputs, world = PlannerInputs(), WorldSchema(Log())
    inputs.buffer = buffer(5)
    calls = CallService(inputs, world, "planner", Log())
    planner = path(ActionSchema.from_json(GO), url)
    world.use(planner, lambda schema: schema)
    calls.use(planner)
    return calls


def request(agent: str, slo_ms: float = 5_000.0, deadline_ms: float = 10_000.0) -> CallRequest:
    """`agent`'s call of 400 tokens."""
    return CallRequest(agent, 400, slo_ms, deadline_ms)


def test_calls_run_one_at_a_time_a_newer_call_supersedes_and_each_is_counted_by_status():
    answers = Answers()
    with FaultServer(text='{"plan": [{"action": "go_to", "parameters": {"target": "dock_2"}}]}') as server:
        calls = service(server.base_url)
        assert calls.model_name == ""  # the server's own until its listing names one (None: no call path)
        for key, agent in ((b"1", "a"), (b"2", "b"), (b"3", "b")):
            calls.accept(key, request(agent), 0.0, answers.of(key), stamp=None)
        assert answers.called == [b"1", b"2"]  # 1 runs at once; 3 supersedes 2, answered at once
        outcomes = {key: calls.outcome(calls.take(key), lambda: False, lambda phase, ms: None) for key in (b"1", b"2")}
        assert answers.called == [b"1", b"2", b"3"]  # 1 finished: 3 starts
        outcomes[b"3"] = calls.outcome(calls.take(b"3"), lambda: False, lambda phase, ms: None)
    assert outcomes[b"1"].status == CallStatus.OK and [s.action for s in outcomes[b"1"].steps] == ["go_to"]
    assert outcomes[b"2"].status == CallStatus.CANCELLED and "superseded" in outcomes[b"2"].error
    assert outcomes[b"3"].status == CallStatus.OK
    values = calls.health().values
    assert (values["calls"], values["status.ok"], values["status.cancelled"], values["queue.superseded"]) == (3, 2, 1, 1)


def test_a_waiting_call_is_cancelled_or_expires_and_expire_says_whether_calls_still_wait():
    answers = Answers()
    calls = service("http://127.0.0.1:9/v1")
    calls.accept(b"runs", request("z"), 0.0, answers.of(b"runs"), stamp=None)  # answered: it runs, the rest wait
    calls.accept(b"late", request("a", slo_ms=10.0, deadline_ms=20.0), 20.0, answers.of(b"late"), stamp=None)
    calls.accept(b"gone", request("b"), 0.0, answers.of(b"gone"), stamp=None)
    calls.accept(b"kept", request("c"), 0.0, answers.of(b"kept"), stamp=None)
    assert calls.cancel(b"gone") and not calls.cancel(b"unknown")
    assert calls.expire() and answers.called == [b"runs", b"late"]  # past its deadline at once; "kept" still waits
    outcome = calls.outcome(calls.take(b"late"), lambda: False, lambda phase, ms: None)
    assert outcome.status == CallStatus.DEADLINE and [p.phase for p in outcome.phases] == ["queue"]
    calls.cancel(b"kept")
    assert not calls.expire()
    assert calls.health().values["queue.cancelled_waiting"] == 2


def test_a_rejected_goal_is_counted_and_warned_and_release_forgets_the_path():
    calls = service("http://127.0.0.1:9/v1")
    calls.rejected()
    assert calls.health().values["goals_rejected"] == 1 and calls.health().warnings
    calls.release()
    assert calls.path is None and calls.model_name is None
