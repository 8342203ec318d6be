"""PendingCalls without ROS: hard deadlines, calls waiting for a server, a call closed while the watchdog scans."""

from __future__ import annotations

from helpers import controller, trig

from brace_controller.pending_calls import PendingCalls

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
