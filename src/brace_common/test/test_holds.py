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
