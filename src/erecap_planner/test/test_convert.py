"""convert's results and readings as messages: the Replan result and feedback, the server_load reading."""

from __future__ import annotations

from brace_common.action_schema import Step
from brace_common.clock import stamp_of
from brace_common.vocabulary import CallStatus
from erecap_planner import convert
from erecap_planner.call_path import CallOutcome, CallRequest
from erecap_planner.call_queue import QueuedCall
from erecap_planner.phase_clock import PhaseRecord
from erecap_planner.server_load import ServerLoad
from erecap_planner.server_watch import LoadReport


def test_a_result_carries_the_record_stamped_at_acceptance_and_the_plan_stamped_now():
    request = CallRequest("a", 300, 1_000.0, 2_000.0, step=7, decision_id="d1", trigger_kind=2)
    call = QueuedCall("planner/4", "a", 0.0, 1_000.0, 2_000.0, request=request, stamp=stamp_of(100.0))
    outcome = CallOutcome(CallStatus.OK, [Step("pick", {"object": "cup_3"})], [PhaseRecord("parse", 1.5, 9, 1)],
                          latency_ms=12.0, slo_ms=1_000.0, compressor="recency", backend="openai")
    result = convert.replan_result(outcome, call, "scripted-model", stamp_of(101.0))
    record, plan = result.call, result.plan
    assert (record.call_id, record.model, record.backend, record.header.stamp.sec) == ("planner/4", "scripted-model",
                                                                                       "openai", 100)
    assert [p.phase for p in record.phases] == ["parse"] and record.slo_met
    assert (plan.plan_id, plan.decision_id, plan.trigger_kind, plan.header.stamp.sec) == ("planner/4/plan", "d1", 2, 101)
    assert [(s.action, s.parameters_json) for s in plan.steps] == [("pick", '{"object": "cup_3"}')]


def test_feedback_names_the_phase():
    feedback = convert.feedback_msg("prefill", 3.25, stamp_of(5.0))
    assert (feedback.phase, feedback.elapsed_ms, feedback.header.stamp.sec) == ("prefill", 3.25, 5)


def test_a_load_reading_and_a_server_without_one():
    read = convert.server_load_to_msg(LoadReport("http://h:1/v1", 2, ServerLoad(3, 1, "llama.cpp")), stamp_of(1.0))
    assert (read.reported, read.engine, read.requests_running, read.requests_waiting, read.own_requests) == \
        (True, "llama.cpp", 3, 1, 2)
    none = convert.server_load_to_msg(LoadReport("http://h:1/v1", 0), stamp_of(1.0))
    assert (none.reported, none.engine, none.server_url) == (False, "", "http://h:1/v1")


def test_a_recap_result_carries_the_answer_the_depths_and_what_the_stack_needs():
    from brace_common.action_schema import Subtask
    from brace_common.vocabulary import RecapKind, RecapNeed
    from erecap_planner.recap_call import RecapCall

    request = CallRequest("a", 300, 1_000.0, 2_000.0, step=7, decision_id="d1")
    call = QueuedCall("planner/5", "a", 0.0, 1_000.0, 2_000.0, request=request, stamp=stamp_of(100.0))
    answer = [Subtask(Step("deliver", {"object": "cup"}), composite=True), Subtask(Step("wait", {}))]
    outcome = CallOutcome(CallStatus.OK, [], latency_ms=5.0, slo_ms=1_000.0,
                          recap=RecapCall(RecapKind.DECOMPOSE, 1, "cup first", answer, RecapNeed.DECOMPOSE, 2))
    result = convert.replan_result(outcome, call, "m", stamp_of(101.0))
    assert (result.call.recap_call, result.call.depth) == (RecapKind.DECOMPOSE, 1)
    plan = result.plan
    assert (plan.thought, plan.depth, plan.recap_need, len(plan.steps)) == ("cup first", 2, RecapNeed.DECOMPOSE, 0)
    assert [(s.action, s.composite) for s in plan.subtasks] == [("deliver", True), ("wait", False)]
    flat = convert.replan_result(CallOutcome(CallStatus.OK, [Step("wait", {})]), call, "m", stamp_of(1.0))
    assert (flat.plan.recap_need, flat.call.recap_call, list(flat.plan.subtasks)) == (RecapNeed.NONE, RecapKind.NONE, [])
