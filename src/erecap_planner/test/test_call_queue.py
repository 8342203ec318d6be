"""CallQueue: earliest SLO deadline first, supersession per agent, expiry, one call at a time."""

from __future__ import annotations

import threading

from erecap_planner.call_queue import CallQueue, QueuedCall


def call(cid: str, agent: str, at: float = 0.0, slo_ms: float = 1000.0, hard_ms: float = 3000.0) -> QueuedCall:
    return QueuedCall(cid, agent, at, slo_ms, hard_ms)


def test_earliest_deadline_first_and_one_at_a_time():
    q = CallQueue()
    q.submit(call("p", "a", at=0.0, slo_ms=4000.0))    # periodic, loose SLO
    q.submit(call("h", "b", at=0.5, slo_ms=1000.0))    # hazard arriving later, tighter deadline
    q.submit(call("d", "c", at=0.2, slo_ms=2000.0))
    first = q.start_next()
    assert first.call_id == "h" and first.outcome == "running"
    assert q.start_next() is None  # one model: nothing else starts while h runs
    q.finish(first)
    assert [q.start_next().call_id] == ["d"]


def test_a_newer_call_supersedes_the_agents_waiting_call():
    q = CallQueue()
    old = call("old", "a", at=0.0, slo_ms=100.0)
    assert q.submit(old) is None
    superseded = q.submit(call("new", "a", at=1.0, slo_ms=5000.0))
    assert superseded is old and old.outcome == "superseded" and old.superseded_by == "new"
    assert len(q) == 1 and q.start_next().call_id == "new"  # the stale heap entry of `old` is skipped
    assert q.counts["superseded"] == 1


def test_the_running_call_is_not_superseded():
    q = CallQueue()
    q.submit(call("run", "a"))
    running = q.start_next()
    assert q.submit(call("next", "a")) is None and running.outcome == "running"


def test_expired_and_cancelled_calls_leave_unserved():
    q = CallQueue()
    q.submit(call("x", "a", at=0.0, hard_ms=1000.0))
    q.submit(call("y", "b", at=0.0, hard_ms=5000.0))
    q.submit(call("z", "c", at=0.0, hard_ms=5000.0))
    assert [c.call_id for c in q.expired(now=2.0)] == ["x"]
    assert q.remove("y", "cancelled").outcome == "cancelled"
    assert q.remove("y", "cancelled") is None
    assert [c.call_id for c in q.waiting()] == ["z"]
    assert q.start_next().call_id == "z" and q.start_next() is None
    assert q.counts == {"superseded": 0, "expired_waiting": 1, "cancelled_waiting": 1}


def test_concurrent_submissions_lose_nothing():
    q = CallQueue()

    def submit(i):
        for j in range(100):
            q.submit(call(f"{i}/{j}", f"agent_{i}_{j}", at=float(j)))

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    served = []
    while (c := q.start_next()) is not None:
        served.append(c)
        q.finish(c)
    assert len(served) == 400
    assert [c.slo_deadline for c in served] == sorted(c.slo_deadline for c in served)
