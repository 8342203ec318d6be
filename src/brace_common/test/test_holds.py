"""CallHolds: a world holds while an admitted call of this episode is out, until it returns or times out."""

from __future__ import annotations

from brace_common.holds import CallHolds


class FakeClock:
    """A clock the test moves by hand (the holds' deadlines are checked against it)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_call_holds_until_it_returns():
    holds = CallHolds(5.0, FakeClock())
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
    clock = FakeClock()
    holds = CallHolds(5.0, clock)
    holds.admit("d1")
    clock.now = 4.9
    assert holds.expired() == [] and holds.held()
    clock.now = 5.0
    assert holds.expired() == ["d1"]
    assert not holds.held() and holds.timeouts == 1
    assert holds.expired() == [] and holds.timeouts == 1


def test_a_plan_of_an_earlier_episode_is_not_of_this_one():
    holds = CallHolds(5.0, FakeClock())
    holds.admit("d1")
    holds.release("d1")
    assert holds.of_this_episode("d1") and not holds.of_this_episode("d2")
    holds.new_episode()
    assert not holds.of_this_episode("d1")
