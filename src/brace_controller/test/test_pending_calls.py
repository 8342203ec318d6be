"""PendingCalls without ROS: hard deadlines, calls waiting for a server, a call closed while the watchdog scans."""

from __future__ import annotations

from helpers import controller, trig

from brace_common.counters import Counters
from brace_common.vocabulary import CallStatus
from brace_controller.pending_calls import COUNTS, PendingCalls

CORE = controller(cooldown_steps=0, commit_steps=0)


def admitted(agent: str):
    """A fresh admitted decision (its own id) for `agent`."""
    CORE.reset()
    decision = CORE.decide(trig(1, agent=agent))
    assert decision.admitted
    return decision


def test_a_waiting_call_is_sent_once_a_server_is_up_and_closed_unavailable_at_its_deadline():
    calls, asked = PendingCalls(), []
    call = calls.add(admitted("a"), now=10.0)
    assert call.deadline == 10.0 + call.decision.hard_deadline_ms / 1000.0 and calls.waiting() == 1
    assert calls.due(10.1, lambda: asked.append(1) or False).send == [] and asked == [1]
    assert calls.due(10.2, lambda: True).send == [call]
    due = calls.due(call.deadline + 0.1, lambda: True)
    assert due.unavailable == [call] and not due.missed and len(calls) == 0
    assert call.elapsed_ms(10.5) == 500.0


def test_a_sent_call_past_its_deadline_is_missed_and_one_closed_meanwhile_is_skipped():
    calls = PendingCalls()
    sent, closed = calls.add(admitted("a"), now=0.0), calls.add(admitted("b"), now=0.0)
    sent.sent = closed.sent = True
    calls.pop(closed.decision.decision_id)  # its result came first
    due = calls.due(1e6, lambda: True)
    assert due.missed == [sent] and not due.unavailable and not due.send and calls.pop("none") is None


def test_a_new_episode_drains_every_call():
    calls = PendingCalls()
    first, second = calls.add(admitted("a"), 0.0), calls.add(admitted("b"), 0.0)
    assert calls.drain() == [first, second] and len(calls) == 0 and calls.get(first.decision.decision_id) is None


def test_each_way_a_call_ends_is_counted_audited_and_cancelled_as_the_controller_ends_it():
    counts = Counters(COUNTS)
    waiting, running = PendingCalls().add(admitted("a"), 0.0), PendingCalls().add(admitted("b"), 0.0)
    running.sent = True
    ends = [waiting.overdue(2.0), running.overdue(2.0), waiting.cancelled_by_episode(1.0),
            running.cancelled_by_episode(1.0), running.rejected(0.5)]
    assert [e.status for e in ends] == [CallStatus.UNAVAILABLE, CallStatus.DEADLINE, CallStatus.CANCELLED,
                                        CallStatus.CANCELLED, CallStatus.UNAVAILABLE]
    assert [bool(e.error) for e in ends] == [True, False, True, False, True]  # a planner that took it records it
    assert [e.cancels for e in ends] == [False, True, True, True, False]
    for end in ends:
        counts.add(end.counter)  # every counter a CallEnd names is declared
    assert ends[1].latency_ms == 2000.0 and counts["calls_cancelled_by_episode"] == 2
    record = ends[1].record(running.decision)
    assert (record.agent_id, record.decision_id, record.status) == ("b", running.decision.decision_id,
                                                                    CallStatus.DEADLINE)


def test_the_calls_health_warns_without_a_server():
    calls = PendingCalls()
    calls.add(admitted("a"), 0.0).sent = True
    calls.add(admitted("b"), 0.0)
    health = calls.health(False, "replan")
    assert health.values == {"calls_in_flight": 1, "calls_waiting_for_planner": 1, "planner_server": False}
    assert health.warnings == ("no Replan server on 'replan'",) and not calls.health(True, "replan").warnings


def test_a_goals_status_and_result_say_how_its_call_ended():
    from action_msgs.msg import GoalStatus
    from brace_msgs.action import Replan

    from brace_controller.convert import ABORTED_BY_PLANNER, call_end

    result = Replan.Result()
    result.call.status, result.call.latency_ms, result.call.tokens_after = 0, 420.0, 96
    ok = call_end(GoalStatus.STATUS_SUCCEEDED, result, 999.0)
    assert (ok.status, ok.latency_ms, ok.tokens_after, ok.counter, ok.error) == (CallStatus.OK, 420.0, 96, "", "")
    aborted = call_end(GoalStatus.STATUS_ABORTED, Replan.Result(), 50.0)
    assert aborted.status == CallStatus.PLANNER_ERROR and aborted.fault == ABORTED_BY_PLANNER
    assert aborted.error.startswith(f"{ABORTED_BY_PLANNER}:") and aborted.latency_ms == 50.0
    assert call_end(GoalStatus.STATUS_CANCELED, result, 70.0).status == CallStatus.CANCELLED
    result.call.status = 77
    malformed = call_end(GoalStatus.STATUS_SUCCEEDED, result, 1.0)
    assert malformed.status == CallStatus.PLANNER_ERROR and malformed.counter == "malformed_calls"
    counts = Counters(COUNTS)
    for end in (aborted, malformed):
        counts.add(end.counter)
