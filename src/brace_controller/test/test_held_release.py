"""HeldRelease without ROS: held triggers decided again at once, after a jitter once a shared server's load fell,
and a load without news dropped."""

from __future__ import annotations

from helpers import controller, trig, warm

from brace_common.counters import Counters
from brace_controller.config import ControllerNodeConfig
from brace_controller.held_release import COUNTS, HeldRelease


def held(jitter: float = 0.25):
    """A warm core whose agent 'a' (no plan) is held behind 2 requests of other robots, and its release rule."""
    core = controller(defer_when_infeasible=True)
    warm(core, 1.0)
    release = HeldRelease(core, ControllerNodeConfig(server_release_jitter_s=0.5, server_load_stale_after_s=1.0),
                          Counters(COUNTS), uniform=lambda low, high: low + jitter * (high - low))
    assert not release.server_load(True, 2, now=10.0) and core.server_calls == 2 and release.watching
    assert not core.decide(trig(1, has_goal=False)).admitted and "a" in core.held
    return core, release


def test_without_a_shared_server_a_finished_call_releases_at_once():
    core = controller(defer_when_infeasible=True)
    release = HeldRelease(core, ControllerNodeConfig(), Counters(COUNTS))
    assert release.call_finished(now=1.0) and not release.watching
    assert release.take() == [] and release.counts["held_decided_again"] == 0


def test_a_fallen_load_releases_after_the_jitter_and_counts_each_trigger():
    core, release = held(jitter=0.25)
    assert not release.server_load(True, 0, now=11.0)  # it fell: due 0.25 x 0.5 s later, not now
    assert release.release_at == 11.125 and not release.due(11.1) and release.due(11.125)
    (again,) = release.take()
    assert again.agent_id == "a" and not core.held and release.release_at == 0.0
    assert release.counts["held_decided_again"] == 1 and release.counts["server_load_samples"] == 2


def test_a_finished_call_with_a_load_seen_waits_for_the_jitter_once():
    core, release = held(jitter=1.0)
    assert not release.call_finished(now=12.0) and release.release_at == 12.5
    assert not release.call_finished(now=12.2) and release.release_at == 12.5  # already scheduled


def test_an_unreported_or_stale_load_counts_as_none():
    core, release = held(jitter=0.0)
    assert not release.server_load(False, 5, now=10.5) and core.server_calls == 0  # 'reported' False: no load
    assert release.due(10.5)  # it fell: the held trigger is due at once (jitter 0)
    release.take()
    release.server_load(True, 3, now=20.0)
    assert not release.due(20.9) and core.server_calls == 3
    assert not release.due(21.1) and core.server_calls == 0 and release.counts["server_load_stale"] == 1
    assert not release.watching  # nothing held: no release scheduled, no load to watch
    assert release.server_load(True, -4, now=22.0) is False and core.server_calls == 0  # own requests: none ahead
