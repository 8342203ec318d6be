"""Counters: names declared once, an undeclared one fails at once; health from the marked ones; one Backoff."""

import threading

import pytest

from brace_common.backoff import Backoff
from brace_common.counters import Counters, Health
from brace_common.validation import InvalidInput, Rejections


def test_an_undeclared_counter_fails_at_once_in_every_spelling():
    counts = Counters(["calls", "errors"])
    counts.add("calls")
    counts["errors"] += 2
    assert dict(counts) == {"calls": 1, "errors": 2} and counts.total() == 3
    for misspelt in (lambda: counts.add("call"), lambda: counts["respelled_values"],
                     lambda: counts.__setitem__("respelled_values", 1)):
        with pytest.raises(KeyError, match="undeclared counter"):
            misspelt()
    with pytest.raises(KeyError):
        Counters(["a"], warn=["b"])
    with pytest.raises(ValueError):
        Counters([""])


def test_health_warns_and_errs_on_the_marked_counters_that_are_not_zero():
    counts = Counters(["ok_calls", "malformed", "faults"], warn=["malformed"], error=["faults"])
    assert counts.health() == Health({"ok_calls": 0, "malformed": 0, "faults": 0})
    counts.add("ok_calls", 5)
    assert counts.health().warnings == () and counts.health().errors == ()
    counts.add("malformed")
    counts.add("faults")
    health = counts.health("arm.")
    assert health.warnings == ("arm.malformed",) and health.errors == ("arm.faults",)
    counts.declare("lost.x", warn=True)
    counts.add("lost.x")
    merged = counts.health() + Rejections().health()
    assert merged.warnings == ("malformed", "lost.x") and merged.values["lost.x"] == 1


def test_rejections_report_each_reason_as_a_warning():
    rejections = Rejections()
    rejections.reject("state", InvalidInput("too_many_entities", "too big"))
    health = rejections.health()
    assert health.values == {"rejected.state.too_many_entities": 1}
    assert health.warnings == ("rejected.state.too_many_entities",)


def test_counting_from_many_threads_loses_nothing():
    counts = Counters(["n"])

    def count():
        for _ in range(2000):
            counts.add("n")

    threads = [threading.Thread(target=count) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counts["n"] == 8000


def test_backoff_doubles_up_to_its_cap_honours_retry_after_and_starts_again():
    backoff = Backoff(0.5, 3.0)
    now, waits = 0.0, []
    for _ in range(6):
        assert backoff.due(now)
        wait = backoff.failed(now)
        waits.append(wait)
        assert not backoff.due(now + wait - 1e-6) and backoff.not_before == now + wait
        now += wait
    assert waits == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0] and backoff.attempts == 6
    backoff.succeeded()
    assert backoff.due(now) and backoff.not_before == 0.0 and backoff.failed(now) == 0.5
    assert backoff.failed(now, retry_after_s=10.0) == 10.0 and backoff.not_before == now + 10.0
    with pytest.raises(ValueError):
        Backoff(2.0, 1.0)
