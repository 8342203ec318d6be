"""BraceController core: check order, overrides, defer guard, adaptive budget."""

from __future__ import annotations

import math

import pytest
from helpers import CONTEXT, controller, trig, warm

from brace_common.replanning import CallRecord, Trigger
from brace_common.vocabulary import CallStatus, Mode, Reason, TriggerKind


def done(c, agent="a", step=0, changed=False, tokens_before=CONTEXT):
    c.record_call(CallRecord(agent, step, CallStatus.OK, changed, 10.0, 100, tokens_before=tokens_before))


def test_in_flight_suppresses_until_result():
    c = controller(cooldown_steps=0, commit_steps=0)
    assert c.decide(trig(1)).admitted
    blocked = c.decide(trig(2))
    assert blocked.reason == Reason.IN_FLIGHT and blocked.mode == Mode.DEFER_REPLAN and blocked.token_budget == 0
    done(c, step=1)
    assert c.decide(trig(3)).admitted


def test_failure_override_bypasses_cooldown_and_raises_budget():
    c = controller(cooldown_steps=100, commit_steps=100, override_after_failures=3)
    assert c.decide(trig(1, kind=TriggerKind.FAILURE, failures=2)).admitted
    done(c, step=1, changed=True)
    assert c.decide(trig(2, kind=TriggerKind.FAILURE, failures=2)).reason == Reason.COOLDOWN
    over = c.decide(trig(3, kind=TriggerKind.FAILURE, failures=3))
    assert over.admitted and over.override and over.reason == Reason.OVERRIDE
    assert over.mode == Mode.FULL_REPLAN and over.token_budget > 1024
    assert c.tally["a"].overrides == 1


def test_override_still_respects_in_flight():
    c = controller(override_after_failures=1)
    assert c.decide(trig(1, kind=TriggerKind.FAILURE, failures=1)).admitted
    assert c.decide(trig(1, kind=TriggerKind.FAILURE, failures=2)).reason == Reason.IN_FLIGHT


def test_defer_guard_admits_agent_starved_by_team_cooldown():
    c = controller(cooldown_steps=0, commit_steps=0, team_cooldown_steps=5, max_consecutive_deferrals=2)
    assert c.decide(trig(0, agent="b")).admitted
    done(c, agent="b")
    assert c.decide(trig(1)).reason == Reason.TEAM_COOLDOWN
    assert c.decide(trig(2)).reason == Reason.TEAM_COOLDOWN
    guarded = c.decide(trig(3))
    assert guarded.admitted and guarded.reason == Reason.DEFER_GUARD and guarded.consecutive_deferrals == 2
    assert c.agents["a"].consecutive_deferrals == 0


def test_defer_guard_waits_for_the_planner_to_be_free():
    c = controller(cooldown_steps=0, commit_steps=0, defer_when_infeasible=True, max_consecutive_deferrals=1)
    warm(c, 1.0)
    c.accept_plan("a", ("plan",))
    assert c.decide(trig(1, agent="b")).admitted  # b's call is in flight
    assert c.decide(trig(1)).reason == Reason.SLO_INFEASIBLE  # a would wait for b's call
    assert c.decide(trig(2)).reason == Reason.SLO_INFEASIBLE  # guard reached, but b is still in flight
    done(c, agent="b", step=2)
    assert c.decide(trig(3)).admitted


def test_team_trigger_uses_team_counters():
    c = controller(cooldown_steps=2, commit_steps=0)
    assert c.decide(trig(0, agent="team", kind=TriggerKind.DEADLOCK)).admitted
    assert c.decide(trig(1, agent="team", kind=TriggerKind.DEADLOCK)).reason == Reason.IN_FLIGHT


def test_adaptive_budget_lowers_budget_to_meet_slo():
    c = controller(adaptive_budget=True, adaptive_guard_ratio=0.9, adaptive_window=20)
    warm(c, 1.0)  # 1 ms per kept token: full_replan SLO 2000 ms -> ~1780 tokens fit; deadlock asks 1024
    d = c.decide(trig(1, kind=TriggerKind.DEADLOCK))
    assert d.token_budget == 1024 and d.predicted_p95_ms <= 0.9 * d.slo_ms
    done(c, step=1)
    warm(c, 4.0)  # the window now holds only 4 ms per kept token: 20 + 4 B <= 1800 -> B <= 445
    d = c.decide(trig(2, agent="b", kind=TriggerKind.DEADLOCK))
    assert abs(d.token_budget - 445) <= 1  # floating-point rounding at the boundary
    assert d.predicted_p95_ms <= 0.9 * d.slo_ms + 1e-6


def test_adaptive_budget_reads_the_context_the_agents_read():
    c = controller(adaptive_budget=True, adaptive_window=40)
    warm(c, 1.0, ms_per_token=0.5, context=1000)  # a prefill that reads N before its first cut
    small = c.decide(trig(1, kind=TriggerKind.DEADLOCK))
    done(c, step=1, tokens_before=3000)  # the context grew: 0.5 ms per token more of it leaves less for B
    large = c.decide(trig(2, agent="b", kind=TriggerKind.DEADLOCK))
    assert small.token_budget == 1024 and large.token_budget < small.token_budget
    assert abs(large.token_budget - (1800 - 20 - 1500)) <= 1


def test_without_a_context_seen_this_episode_the_budget_is_the_policys():
    c = controller(adaptive_budget=True, defer_when_infeasible=True, adaptive_window=20)
    warm(c, 100.0)  # nothing fits
    c.reset()  # a new episode: no call has read its context yet
    d = c.decide(trig(1))
    assert d.admitted and d.token_budget == 512 and math.isnan(d.predicted_p95_ms)


def test_infeasible_slo_defers_periodic_but_not_hazard():
    c = controller(adaptive_budget=True, defer_when_infeasible=True)
    warm(c, 1.0, base=5000.0)  # even the minimum budget misses every SLO
    first = c.decide(trig(1, severity=0.9))
    assert first.admitted  # no plan yet in this episode: never deferred
    c.accept_plan("a", ("plan",))
    done(c, step=1)
    periodic = c.decide(trig(1 + c.config.cooldown_steps, severity=0.9))
    assert not periodic.admitted and periodic.reason == Reason.SLO_INFEASIBLE
    hazard = c.decide(trig(1, agent="b", kind=TriggerKind.HAZARD))
    assert hazard.admitted and hazard.token_budget == c.profile.min_token_budget
    loop = c.decide(trig(1, agent="c", kind=TriggerKind.LOOP))  # a loop is failure-like: never deferred
    assert loop.admitted and loop.mode == Mode.PARTIAL_REPLAN


def test_an_agent_without_an_unfinished_plan_is_never_deferred():
    c = controller(adaptive_budget=True, defer_when_infeasible=True)
    warm(c, 1.0, base=5000.0)
    c.accept_plan("a", ("plan",))
    finished = c.decide(trig(1, has_goal=False))  # its plan ran out: it idles until it gets a new one
    assert finished.admitted and finished.reason == Reason.GATE_OPEN
    assert finished.token_budget == c.profile.min_token_budget


def test_backlog_of_calls_in_flight_defers_periodic_until_the_planner_is_free():
    c = controller(defer_when_infeasible=True)  # B_t fixed (adaptive off); 20 + N ms per call
    warm(c, 1.0)
    c.accept_plan("b", ("plan",))  # b has a plan (agents without one are never deferred)
    assert c.decide(trig(1)).admitted  # partial_replan: B 512, ~532 ms, SLO 1000 x 0.9
    waiting = c.decide(trig(1, agent="b"))  # would wait ~532 ms for a's call first
    assert not waiting.admitted and waiting.reason == Reason.SLO_INFEASIBLE
    assert c.decide(trig(1, agent="c", kind=TriggerKind.HAZARD)).admitted  # critical: admitted anyway
    done(c, step=1)
    done(c, agent="c", step=1)
    again = c.decide(trig(2, agent="b"))
    assert again.admitted and again.token_budget == 512 and again.predicted_p95_ms <= 0.9 * again.slo_ms


def test_an_idle_agent_behind_a_backlog_is_held_and_called_when_the_planner_frees():
    c = controller(defer_when_infeasible=True)  # B_t fixed (adaptive off); 20 + 1.5 N ms per call
    warm(c, 1.5)
    assert c.decide(trig(1)).admitted  # a's partial replan: ~788 ms
    idle = c.decide(trig(1, agent="b", has_goal=False))  # no plan yet: a full replan, ~1,556 ms after a's ~788
    assert not idle.admitted and idle.reason == Reason.SLO_INFEASIBLE and c.held["b"].agent_id == "b"
    assert c.decide(trig(1, agent="c", kind=TriggerKind.DEADLOCK, has_goal=False)).admitted  # critical: never held
    done(c, step=1)  # a's call finished; c's still runs: b would still wait behind it
    (again,) = c.release_held()
    assert not c.decide(again).admitted and "b" in c.held
    done(c, agent="c", step=1)  # the planner is free
    (last,) = c.release_held()
    final = c.decide(last)
    assert final.admitted and final.reason == Reason.GATE_OPEN and final.trigger.step == 1 and not c.held


def test_before_the_latency_model_is_ready_one_call_at_a_time():
    c = controller(defer_when_infeasible=True)  # no call seen: nothing predicts a backlog
    assert not c.latency_model.ready
    assert c.decide(trig(1)).admitted
    second = c.decide(trig(1, agent="b", has_goal=False))  # the planner is busy with a's call
    assert not second.admitted and second.reason == Reason.SLO_INFEASIBLE and "b" in c.held
    assert c.decide(trig(1, agent="c", kind=TriggerKind.FAILURE)).admitted  # critical: never held
    done(c, step=1)
    done(c, agent="c", step=1)  # the planner is free
    (again,) = c.release_held()
    assert c.decide(again).admitted and not c.held


def test_at_an_episode_start_one_call_at_a_time_until_a_context_is_read():
    c = controller(defer_when_infeasible=True)
    warm(c, 1.0)  # the model is ready, from earlier episodes
    c.reset()  # a new episode: no call has read its context yet
    assert c.decide(trig(1)).admitted
    assert not c.decide(trig(1, agent="b", has_goal=False)).admitted and "b" in c.held
    done(c, step=1, tokens_before=600)  # a's call read 600 tokens: the backlog can be predicted from here on
    (again,) = c.release_held()
    assert c.decide(again).admitted


def test_without_slo_admission_cold_calls_are_not_held():
    c = controller()  # defer_when_infeasible off (No BRACE): every trigger is admitted
    assert c.decide(trig(1)).admitted and c.decide(trig(1, agent="b")).admitted and not c.held


def test_a_newer_trigger_supersedes_the_held_one_and_an_episode_drops_them():
    c = controller(defer_when_infeasible=True)
    warm(c, 1.5)  # b's full replan could not finish in its SLO behind a's call
    c.decide(trig(1))
    assert not c.decide(trig(1, agent="b", has_goal=False)).admitted
    assert not c.decide(trig(2, agent="b", has_goal=False)).admitted
    assert c.held["b"].step == 2
    c.reset()
    assert c.held == {} and c.release_held() == []


def test_adaptive_budget_leaves_room_for_the_backlog():
    c = controller(adaptive_budget=True, defer_when_infeasible=True)
    warm(c, 1.0)
    first = c.decide(trig(1))
    assert first.admitted and first.token_budget == 512
    second = c.decide(trig(1, agent="b"))
    assert second.admitted and second.token_budget < 512
    assert second.predicted_p95_ms <= 0.9 * second.slo_ms + 1e-6
    assert second.predicted_p95_ms > c.latency_model.predict_p95(CONTEXT, second.token_budget)  # the wait is in it


def test_a_cold_controller_and_the_defer_guard_do_not_wait_for_the_servers_other_requests():
    c = controller(cooldown_steps=0, commit_steps=0, defer_when_infeasible=True, max_consecutive_deferrals=2)
    c.set_server_calls(3)  # other robots keep the shared server busy
    assert c.decide(trig(1)).admitted  # no latency model yet: its first call learns the cost
    done(c, step=1)
    warm(c, 1.0)
    c.accept_plan("a", ("plan",))
    for step in (2, 3):
        assert c.decide(trig(step)).reason == Reason.SLO_INFEASIBLE
    assert c.decide(trig(4)).reason == Reason.DEFER_GUARD  # a late plan beats an agent starved by other robots


def test_a_shared_servers_other_requests_are_a_backlog():
    c = controller(defer_when_infeasible=True)  # B_t fixed (adaptive off); 20 + N ms per call
    warm(c, 1.0)
    c.accept_plan("a", ("plan",))
    assert not c.set_server_calls(1)  # another robot's call at the server: ~532 ms ahead of a's
    held_back = c.decide(trig(1))
    assert not held_back.admitted and held_back.reason == Reason.SLO_INFEASIBLE
    assert c.decide(trig(1, agent="c", kind=TriggerKind.FAILURE)).admitted  # critical: admitted anyway
    done(c, agent="c", step=1)
    assert c.set_server_calls(0)  # it fell
    again = c.decide(trig(2))
    assert again.admitted and again.predicted_p95_ms <= 0.9 * again.slo_ms


def test_an_idle_agent_waits_for_the_servers_other_requests_and_is_decided_again_when_they_fall():
    c = controller(defer_when_infeasible=True)
    warm(c, 1.0)
    c.set_server_calls(2)
    idle = c.decide(trig(1, has_goal=False))  # no plan: never deferred for good, but held while others run
    assert not idle.admitted and "a" in c.held
    assert not c.set_server_calls(3)
    assert c.set_server_calls(0)
    (again,) = c.release_held()
    assert c.decide(again).admitted and not c.held


def test_the_adaptive_budget_leaves_room_for_the_servers_other_requests():
    c = controller(adaptive_budget=True, defer_when_infeasible=True)
    warm(c, 1.0)
    alone = c.decide(trig(1))
    done(c, step=1)
    c.set_server_calls(1)
    shared = c.decide(trig(2, agent="b"))
    assert alone.admitted and shared.admitted and shared.token_budget < alone.token_budget
    assert shared.predicted_p95_ms <= 0.9 * shared.slo_ms + 1e-6
    with pytest.raises(ValueError):
        c.set_server_calls(-1)


def test_without_slo_admission_the_servers_load_changes_nothing():
    c = controller()  # No BRACE: every trigger admitted with the policy's budget
    warm(c, 1.0)
    c.set_server_calls(8)
    decision = c.decide(trig(1))
    assert decision.admitted and decision.token_budget == 512


def test_every_trigger_gets_a_decision_with_unique_id():
    c = controller(cooldown_steps=2)
    ids = {c.decide(trig(s)).decision_id for s in range(10)}
    assert len(ids) == 10
    assert c.tally["a"].triggers == 10


@pytest.mark.parametrize("bad", [
    Trigger(TriggerKind.PERIODIC, "", 1),
    Trigger(TriggerKind.PERIODIC, "a", 1, severity=math.nan),
    Trigger(TriggerKind.PERIODIC, "a", 1, severity=2.0),
    Trigger(TriggerKind.PERIODIC, "a", -1),
])
def test_malformed_trigger_is_rejected_without_state_change(bad):
    c = controller()
    with pytest.raises(ValueError):
        c.decide(bad)
    assert not c.agents.get("a") or c.agents["a"].last_call_step is None


def test_a_call_admitted_beyond_its_slo_runs_without_memory():
    c = controller(adaptive_budget=True, defer_when_infeasible=True)
    warm(c, 1.0, base=5000.0)  # even the minimum budget misses every SLO
    hazard = c.decide(trig(1, agent="b", kind=TriggerKind.HAZARD))
    assert hazard.admitted and hazard.memory_off
    fits = controller(adaptive_budget=True, defer_when_infeasible=True)
    warm(fits, 1.0)
    assert not fits.decide(trig(1, kind=TriggerKind.HAZARD)).memory_off
    kept = controller(adaptive_budget=True, defer_when_infeasible=True, memory_off_when_infeasible=False)
    warm(kept, 1.0, base=5000.0)
    assert not kept.decide(trig(1, kind=TriggerKind.HAZARD)).memory_off


def test_health_sums_every_agents_tally_by_reason():
    c = controller(cooldown_steps=0, commit_steps=0)
    assert c.decide(trig(1)).admitted
    assert c.decide(trig(2)).reason == Reason.IN_FLIGHT
    assert c.decide(trig(2, agent="b")).admitted
    values = c.health().values
    assert (values["triggers"], values["admitted"], values["suppressed"]) == (3, 2, 1)
    assert values["reason.in_flight"] == 1 and values["server_calls"] == 0 and not values["latency_model_ready"]
    assert "latency_model_prefill_ms" in values


def recap(step: int, kind: TriggerKind, depth: int = 0, has_goal: bool = True) -> Trigger:
    return Trigger(kind, "a", step, has_goal=has_goal, depth=depth)


def test_a_subtask_trigger_is_served_whatever_the_gates_with_the_depths_budget():
    c = controller(cooldown_steps=100, commit_steps=100, recap_depth_budget_ratio=0.5)
    assert c.decide(trig(1)).admitted
    done(c, step=1, changed=True)
    child = c.decide(recap(2, TriggerKind.SUBTASK, depth=1, has_goal=False))   # the cooldown would refuse it
    assert child.admitted and child.reason == Reason.RECURSION and child.mode == Mode.FULL_REPLAN
    assert child.token_budget == 512                                          # 1024 x 0.5^1
    assert c.decide(recap(2, TriggerKind.SUBTASK, depth=2)).reason == Reason.IN_FLIGHT


def test_a_refine_trigger_is_gated_rho_when_open_and_reuse_only_when_the_agent_has_nothing_left():
    c = controller(cooldown_steps=5, commit_steps=0)
    rho = c.decide(recap(10, TriggerKind.REFINE, depth=1))
    assert rho.reason == Reason.GATE_OPEN and rho.mode == Mode.PARTIAL_REPLAN
    done(c, step=10)
    going_on = c.decide(recap(11, TriggerKind.REFINE, depth=1))             # S[1:] still runs: no call
    assert not going_on.admitted and going_on.reason == Reason.COOLDOWN
    reuse = c.decide(recap(12, TriggerKind.REFINE, depth=1, has_goal=False))  # nothing left: reuse its S
    assert reuse.admitted and reuse.reason == Reason.RECURSION and reuse.mode == Mode.REUSE_SUBPLAN
    assert reuse.token_budget == 32
    done(c, step=12)
    # a reuse is no model call: the cooldown still runs from step 10
    assert c.decide(recap(15, TriggerKind.REFINE, depth=1)).reason == Reason.GATE_OPEN
