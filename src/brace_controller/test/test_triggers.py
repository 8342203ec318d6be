"""Trigger detectors: periodic, failure, drift, hazard, deadlock (Eq. 12), preempt, loop."""

from __future__ import annotations

from brace_common.vocabulary import Activity, TriggerKind
from brace_common.world_state import AgentActivity, Entity, Pose, WorldState
from brace_controller.config import MonitorConfig
from brace_controller.triggers import (
    AgentObservation,
    DeadlockDetector,
    DriftDetector,
    FailureDetector,
    HazardDetector,
    PeriodicDetector,
    PlanDoneDetector,
    TriggerMonitor,
)


def at(x, y=0.0, goal=True, err=float("nan")):
    return AgentObservation((x, y, 0.0), err, goal)


def test_periodic_every_interval():
    det = PeriodicDetector(5)
    fired = [s for s in range(0, 21) if det.check(s, ["a"])]
    assert fired == [5, 10, 15, 20]
    assert PeriodicDetector(0).check(10, ["a"]) == []


def test_periodic_stagger_spreads_agents_over_steps():
    det = PeriodicDetector(5, stagger=2)
    fired = {s: [t.agent_id for t in det.check(s, ["a", "b", "c"])] for s in range(0, 13)}
    assert {s: f for s, f in fired.items() if f} == {5: ["a"], 7: ["b"], 9: ["c"], 10: ["a"], 12: ["b"]}


def test_initial_plans_at_episode_start_follow_the_stagger():
    monitor = TriggerMonitor(MonitorConfig(agents=["a", "b", "c"], periodic_interval_steps=10, periodic_stagger_steps=1))
    monitor.reset(episode_start=True)
    initial = {s: [(t.agent_id, t.detail) for t in monitor.on_step(s)] for s in range(3, 7)}
    assert initial == {3: [("a", "initial plan")], 4: [("b", "initial plan")], 5: [("c", "initial plan")], 6: []}
    monitor.reset(episode_start=False)
    assert [t for s in range(1, 5) for t in monitor.on_step(s)] == []
    off = TriggerMonitor(MonitorConfig(agents=["a", "b"], initial_plan=False))
    off.reset(episode_start=True)
    assert off.on_step(1) == []


def test_agents_join_from_the_worlds_states_with_their_initial_plans():
    """No agent list: each agent the world reports joins the episode with its first state (K comes from the world)."""
    monitor = TriggerMonitor(MonitorConfig(periodic_interval_steps=10, periodic_stagger_steps=1, hazard_distance_m=0.0,
                                           deadlock_window=0))
    monitor.reset(episode_start=True)
    assert monitor.agents() == []
    for agent in ("a", "b", "c"):
        monitor.on_state(agent, at(0.0))
    initial = {s: [(t.agent_id, t.detail) for t in monitor.on_step(s)] for s in range(2, 6)}
    assert initial == {2: [("a", "initial plan")], 3: [("b", "initial plan")], 4: [("c", "initial plan")], 5: []}
    monitor.on_state("d", at(1.0))  # a late agent still gets its initial plan
    assert [(t.agent_id, t.detail) for t in monitor.on_step(6)] == [("d", "initial plan")]
    monitor.reset(episode_start=True)  # the next episode: everyone joins again
    monitor.on_state("b", at(0.0))
    assert [(t.agent_id, t.detail) for t in monitor.on_step(1)] == [("b", "initial plan")]
    closed = TriggerMonitor(MonitorConfig(initial_plan=False))
    closed.reset(episode_start=True)
    closed.on_state("a", at(0.0))
    assert closed.on_step(1) == []


def test_failure_after_k_consecutive_and_reset_on_success():
    det = FailureDetector(2)
    assert det.update("a", 1, False) is None
    t = det.update("a", 2, False)
    assert t.kind == TriggerKind.FAILURE and t.consecutive_failures == 2
    assert det.update("a", 3, False).consecutive_failures == 3
    assert det.update("a", 4, True) is None
    assert det.update("a", 5, False) is None


def test_drift_after_m_steps_above_threshold():
    det = DriftDetector(0.5, 3)
    errors = [0.6, 0.7, 0.9, 0.2, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8]
    fired = [i for i, e in enumerate(errors) if det.update("a", i, e)]
    assert fired == [2, 6, 9]
    assert det.update("a", 10, float("nan")) is None and det.run["a"] == 0


def test_drift_reads_the_world_states_tracking_error_where_the_agent_state_has_none():
    monitor = TriggerMonitor(MonitorConfig(agents=["arm"], periodic_interval_steps=0, plan_done_idle_steps=0,
                                           drift_threshold_m=0.03, drift_steps=2))
    monitor.reset(episode_start=False)

    def world(offset: float) -> WorldState:       # PushT's contact offset, as the twin's world state gives it
        return WorldState("pusht", 0, 0, (Entity("arm", "arm"),),
                          agents=(AgentActivity("arm", Activity.EXECUTING, "push", "{}", 0, 1, offset),))

    monitor.on_state("arm", AgentObservation((0.3, 0.0, 0.1)))     # the arm knows its pose, not the block's
    monitor.on_world_state(world(0.01))
    assert monitor.on_step(1) == [] and monitor.on_step(2) == []
    monitor.on_world_state(world(0.06))
    assert monitor.on_step(3) == []
    (drift,) = monitor.on_step(4)
    assert drift.kind == TriggerKind.DRIFT and "0.06 m > 0.03 m for 2 steps" in drift.detail
    monitor.on_state("arm", AgentObservation((0.3, 0.0, 0.1), 0.0))   # a measured AgentState wins
    assert monitor.on_step(5) == [] and monitor.on_step(6) == []
    monitor.reset(episode_start=False)                              # a new episode forgets the world's figure
    monitor.on_state("arm", AgentObservation((0.3, 0.0, 0.1)))
    assert [monitor.on_step(s) for s in (7, 8, 9)] == [[], [], []]


def test_hazard_on_entry_and_every_repeat_steps():
    det = HazardDetector(1.0, repeat_steps=3)
    close = {"a": at(0.0), "b": at(0.4), "c": at(10.0)}
    first = det.check(0, close)
    assert sorted(t.agent_id for t in first) == ["a", "b"]
    assert "0.40 m to b" in first[0].detail and 0.5 < first[0].severity < 0.7
    assert det.check(1, close) == [] and det.check(2, close) == []
    assert len(det.check(3, close)) == 2
    assert det.check(4, {"a": at(0.0), "b": at(5.0)}) == []
    assert len(det.check(5, close)) == 2  # a new hazard fires at once


def test_deadlock_evidence_over_window():
    det = DeadlockDetector(window=3, threshold=2, progress_m=0.05)
    positions = [0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    fired = [s for s, x in enumerate(positions) if det.update("a", s, at(x))]
    # z = [-, 1, 0, 1, 1, 1]: Z reaches 2 at step 3 (window cleared), then again at step 5.
    assert fired == [3, 5]


def test_deadlock_ignores_agents_without_goal():
    det = DeadlockDetector(window=1, threshold=1, progress_m=0.05)
    assert not any(det.update("a", s, at(0.0, goal=False)) for s in range(5))


def test_plan_done_after_idle_steps_only_when_the_agent_moved():
    det = PlanDoneDetector(idle_steps=2, progress_m=0.05)
    # (x, has_goal): starts idle where it is, moves with a plan, finishes, idles, waits at the end, moves again.
    track = [(0, False), (0, False), (0, False), (1, True), (2, True), (2, False), (2, False), (2, False),
             (2, False), (2, False), (3, True), (3, False), (3, False)]
    fired = [(s, t.kind, t.detail) for s, (x, goal) in enumerate(track) if (t := det.update("a", s, at(x, goal=goal)))]
    assert [s for s, _, _ in fired] == [6, 12]
    assert all(kind == TriggerKind.PERIODIC and detail.startswith("plan finished") for _, kind, detail in fired)
    assert not any(PlanDoneDetector(0, 0.05).update("a", s, at(float(s), goal=s < 3)) for s in range(8))


def test_monitor_raises_one_periodic_trigger_when_plan_done_and_periodic_coincide():
    mon = TriggerMonitor(MonitorConfig(agents=["a"], periodic_interval_steps=3, plan_done_idle_steps=1))
    mon.on_state("a", at(0.0))
    mon.on_step(1)
    mon.on_state("a", at(1.0, goal=False))
    assert [t.detail for t in mon.on_step(2)] == ["plan finished: idle 1 steps after moving 1.00 m"]
    mon.on_state("a", at(2.0))
    mon.on_step(3)
    mon.on_state("a", at(3.0, goal=False))
    assert [t.detail for t in mon.on_step(6)] == ["every 3 steps"]


def test_monitor_attaches_failure_count_to_every_trigger():
    mon = TriggerMonitor(MonitorConfig(agents=["a", "b"], periodic_interval_steps=2, failure_threshold=5))
    mon.on_outcome("a", False)
    mon.on_outcome("a", False)
    triggers = mon.on_step(2)
    assert {t.agent_id: t.consecutive_failures for t in triggers} == {"a": 2, "b": 0}
    preempt = mon.on_verdict("a", True, 0.9, "cup fell")
    assert preempt[0].kind == TriggerKind.PREEMPT and preempt[0].consecutive_failures == 2
    assert mon.on_verdict("a", True, 0.1) == [] and mon.on_verdict("a", False, 1.0) == []


def test_a_collision_monitors_stop_is_a_hazard_not_a_failed_step():
    mon = TriggerMonitor(MonitorConfig(agents=["a"], failure_threshold=1))
    mon.on_outcome("a", False, "slipped")
    hazard = mon.on_outcome("a", False, "collision monitor: stop: closing on b at 0.90 m < 1 m", safety_stop=True)
    assert [(t.kind, t.severity, t.consecutive_failures) for t in hazard] == [(TriggerKind.HAZARD, 1.0, 1)]
    assert "closing on b" in hazard[0].detail and mon.failure.consecutive["a"] == 1   # neither counted nor reset


def test_monitor_says_whether_the_agent_still_has_an_unfinished_plan():
    mon = TriggerMonitor(MonitorConfig(agents=["a", "b", "c"], periodic_interval_steps=2, plan_done_idle_steps=0))
    mon.on_state("a", at(0.0, goal=True))
    mon.on_state("b", at(1.0, goal=False))  # idle: a deferred trigger would leave it waiting
    triggers = mon.on_step(2)
    assert {t.agent_id: t.has_goal for t in triggers} == {"a": True, "b": False, "c": False}  # c: no state yet


def cells(step: int, x: int, episode: int = 0) -> WorldState:
    """A one-robot world with the robot at cell (x, 0), executing a move."""
    return WorldState("w", episode, step, (Entity("a", "robot", pose=Pose.planar(x, 0)),),
                      agents=(AgentActivity("a", Activity.EXECUTING, "move_to", '{"x": 0}'),))


def loop_monitor(**overrides) -> TriggerMonitor:
    config = dict(agents=["a"], periodic_interval_steps=0, loop_detection=True, loop_repeat_steps=3)
    return TriggerMonitor(MonitorConfig(**{**config, **overrides}))


def test_a_revisit_raises_a_loop_trigger_with_its_path():
    monitor = loop_monitor()
    raised = [monitor.on_world_state(cells(t, x)) for t, x in enumerate([0, 1, 1, 0])]
    assert raised[:3] == [[], [], []]
    (loop,) = raised[3]
    assert loop.kind == TriggerKind.LOOP and loop.agent_id == "a" and loop.severity == 1.0
    assert "state of step 0 again after 2 actions" in loop.detail and "move_to" in loop.detail


def test_loops_repeat_only_after_repeat_steps_and_count_for_the_override_until_a_new_state():
    monitor = loop_monitor()
    fired = []
    for t, x in enumerate([0, 1, 0, 1, 0, 1, 0]):
        monitor.step = t
        fired += [(t, tr.consecutive_failures) for tr in monitor.on_world_state(cells(t, x))]
    assert fired == [(2, 1), (5, 2)]          # step 3 and 4 revisit too, but within loop_repeat_steps
    assert monitor.failures("a") == 2
    monitor.on_world_state(cells(7, 5))       # somewhere new: progress
    assert monitor.failures("a") == 0


def test_loop_detection_off_and_a_new_episode_raise_nothing():
    off = loop_monitor(loop_detection=False)
    assert [off.on_world_state(cells(t, x)) for t, x in enumerate([0, 1, 0])] == [[], [], []]
    monitor = loop_monitor()
    monitor.on_world_state(cells(0, 0))
    monitor.on_world_state(cells(1, 1))
    assert monitor.on_world_state(cells(0, 0, episode=1)) == []


def test_recap_refine_raises_refine_after_a_step_that_succeeded_and_for_a_finished_plan():
    monitor = TriggerMonitor(MonitorConfig(agents=["a"], periodic_interval_steps=0, initial_plan=False,
                                           failure_threshold=1, plan_done_idle_steps=2, recap_refine=True))
    refine = monitor.on_outcome("a", True, "pick(cup)")
    assert [(t.kind, t.detail) for t in refine] == [(TriggerKind.REFINE, "step done: pick(cup)")]
    assert [t.kind for t in monitor.on_outcome("a", False, "slipped")] == [TriggerKind.FAILURE]   # ρ comes by failure
    assert TriggerMonitor(MonitorConfig(agents=["a"])).on_outcome("a", True) == []
    done = PlanDoneDetector(idle_steps=1, progress_m=0.05, kind=TriggerKind.REFINE)
    raised = [done.update("a", s, at(float(s), goal=s < 3)) for s in range(5)]
    assert [t.kind for t in raised if t] == [TriggerKind.REFINE]
