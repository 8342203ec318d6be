"""The quality floor: B_t stops falling where the kept context loses the entities a plan names."""

from __future__ import annotations

import pytest
from helpers import controller, trig, warm

from brace_common.replanning import CallRecord
from brace_common.vocabulary import CallStatus, Reason, TriggerKind
from brace_controller.quality_floor import QualityFloor, fault_of

LOST = "hallucinated_value"   # the planner's name for Fault.UNKNOWN_CHOICE (test_planner_errors_to_floor.py)


def test_the_floor_rises_when_calls_near_it_lose_entities_and_never_past_the_ceiling():
    floor = QualityFloor(128, step=64, ceiling=256, window=4, max_error_rate=0.25)
    for fault in ("", "", LOST, ""):                       # 1 of 4: within the rate
        assert not floor.observe(150, fault)
    assert not floor.observe(150, "") and floor.floor == 128   # the window slides: 1 of the last 4
    assert floor.observe(150, LOST) and floor.floor == 192 and floor.raised == 1   # 2 of the last 4
    assert not floor.observe(600, LOST)                     # far above the floor: says nothing about it
    for _ in range(3):
        floor.observe(200, LOST)
    assert floor.observe(200, LOST) and floor.floor == 256
    for _ in range(8):
        assert not floor.observe(100, LOST)                  # at the ceiling it stays
    assert floor.floor == 256 and floor.raised == 2


def test_other_planner_errors_do_not_raise_it():
    floor = QualityFloor(128, step=64, ceiling=1024, window=2)
    for fault in ("truncated", "no_json", "unknown_action", "missing_parameter"):
        floor.observe(100, fault)
    assert floor.floor == 128
    assert fault_of("hallucinated_value: step 0: 'dock_9' is not one of dock_1, dock_2") == LOST
    assert fault_of("") == ""


@pytest.mark.parametrize("bad", [dict(step=0), dict(window=0), dict(max_error_rate=1.0)])
def test_bad_settings_are_refused(bad):
    with pytest.raises(ValueError):
        QualityFloor(**{"floor": 128, "step": 64, "ceiling": 512, **bad})


def lost_entities(c, n: int, tokens_after: int) -> None:
    for step in range(n):
        c.record_call(CallRecord("z", step, CallStatus.PLANNER_ERROR, False, 10.0, tokens_after, fault=LOST))


def test_the_adaptive_budget_stops_at_the_floor_and_a_call_it_makes_miss_is_deferred_or_admitted_at_it():
    c = controller(adaptive_budget=True, defer_when_infeasible=True, quality_floor_step=64, quality_floor_window=4)
    warm(c, 4.0)                       # 20 + 4 B <= 0.9 x 1000 ms: a partial replan fits B <= 220
    assert c.quality.floor == 32
    assert abs(c.decide(trig(1, agent="a", severity=0.9)).token_budget - 220) <= 1
    c.record_call(CallRecord("a", 1, CallStatus.OK, False, 10.0, 220))
    lost_entities(c, 4, tokens_after=60)        # plans at the floor named unknown entities: 32 -> 96
    lost_entities(c, 4, tokens_after=120)       # and again: 96 -> 160
    lost_entities(c, 4, tokens_after=200)       # 160 -> 224: now no budget both fits SLO_t and keeps the entities
    assert c.quality.floor == 224 and c.quality.raised == 3
    c.accept_plan("b", ("plan",))
    periodic = c.decide(trig(10, agent="b", severity=0.9))
    assert periodic.reason == Reason.SLO_INFEASIBLE            # it waits rather than plan from a starved context
    failure = c.decide(trig(10, agent="c", kind=TriggerKind.FAILURE))
    assert failure.admitted and failure.token_budget == 224     # a failure is planned at the floor, late if need be
    c.reset()
    assert c.quality.floor == 224                               # a new episode keeps what the backend needs


def test_a_configured_floor_starts_above_the_profiles_minimum():
    c = controller(adaptive_budget=True, quality_floor_tokens=300)
    assert c.quality.floor == 300
    assert controller(quality_floor_tokens=10**6).quality.floor == c.profile.max_token_budget
