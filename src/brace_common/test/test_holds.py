"""CallHolds: a world holds while an admitted call of this episode is out, until it returns or times out."""

from __future__ import annotations

from brace_common.holds import CallHolds
from brace_common.testing import ManualClock


def test_a_call_holds_until_it_returns():
    holds = CallHolds(5.0, ManualClock())
    assert not holds.held()
    holds.admit("d1")
    holds.admit("d2")
    assert holds.held()
    holds.release("d1")
    assert holds.held()
    holds.release("d2")
    holds.release("d2")  # a second answer (a plan after a failed-call record) changes nothing
    assert not holds.held() and holds.timeouts == 0


def test_a_call_that_never_returns_stops_holding_after_its_timeout():
    clock = ManualClock()
    holds = CallHolds(5.0, clock)
    holds.admit("d1")
    clock.now = 4.9
    assert holds.expired() == [] and holds.held()
    clock.now = 5.0
    assert holds.expired() == ["d1"]
    assert not holds.held() and holds.timeouts == 1
    assert holds.expired() == [] and holds.timeouts == 1


def test_a_plan_of_an_earlier_episode_is_not_of_this_one():
    holds = CallHolds(5.0, ManualClock())
    holds.admit("d1")
    holds.release("d1")
    assert holds.of_this_episode("d1") and not holds.of_this_episode("d2")
    holds.new_episode()
    assert not holds.of_this_episode("d1")


def test_an_answer_before_its_decision_is_kept_and_holds_nothing():
    holds = CallHolds(5.0, ManualClock())
    assert holds.early("d1") and not holds.early("")
    holds.release("d1", "plan of d1")             # the plan came first
    holds.release("d2")                           # a failed call's record came first
    assert not holds.held()
    assert holds.admit("d1") == "plan of d1" and not holds.held() and holds.of_this_episode("d1")
    assert holds.admit("d2") is None and not holds.held()
    assert holds.admit("d3") is None and holds.held()   # not answered yet: it holds
    assert not holds.early("d1")


def test_a_late_answer_of_an_earlier_episode_is_not_early_and_unclaimed_answers_are_dropped():
    holds = CallHolds(5.0, ManualClock())
    holds.admit("d1")
    holds.release("d9", "plan of d9")             # its decision never comes
    holds.new_episode()
    assert not holds.early("d1") and not holds.of_this_episode("d1")   # stale, not early
    assert holds.admit("d9") is None and holds.held()


def test_answers_kept_early_are_bounded():
    from brace_common.holds import MAX_EARLY

    holds = CallHolds(5.0, ManualClock())
    for i in range(MAX_EARLY + 10):
        holds.release(f"d{i}", i)
    assert len(holds.answered) == MAX_EARLY and "d0" not in holds.answered
    assert holds.admit(f"d{MAX_EARLY + 9}") == MAX_EARLY + 9
