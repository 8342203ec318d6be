"""step_monitor: success conditions per skill and Table 32's failure categories, tick by tick."""

import math

import pytest

from brace_common.vocabulary import Failure
from robot_bridge.openvla.step_monitor import (
    Condition,
    GripperEvent,
    GripperTracker,
    MonitorConfig,
    Observation,
    StepError,
    StepMonitor,
    parse_conditions,
    parse_locations,
    segment_distance,
)

OPEN, CLOSED = 0.07, 0.0
LOCATIONS = {"bin": (0.3, 0.0, 0.1), "box": (0.2, 0.0, 0.05), "dock": (0.4, 0.0, 0.05)}


def config(**kw):
    kw.setdefault("locations", LOCATIONS)
    kw.setdefault("grasp_settle_s", 0.3)
    kw.setdefault("hold_confirm_s", 0.4)
    return MonitorConfig(**kw)


class Run:
    """Drives a monitor at 10 Hz with a simulated gripper and end effector."""

    def __init__(self, cfg=None, action="pick", parameters=None, t=0.0):
        self.monitor = StepMonitor(cfg or config())
        self.t = t
        self.command = math.nan
        self.opening = OPEN
        self.ee = (0.0, 0.0, 0.2)
        self.results = []
        if action is not None:
            self.start(action, parameters if parameters is not None else {"object": "cup"})

    def start(self, action, parameters):
        self.monitor.start(self.monitor.spec(action, parameters), self.t)

    def tick(self, n=1, command=None, opening=None, ee=None, dt=0.1, state=True, image=True):
        if command is not None:
            self.command = command
        if opening is not None:
            self.opening = opening
        if ee is not None:
            self.ee = ee
        for _ in range(n):
            self.t = round(self.t + dt, 6)
            self.monitor.action_sent()
            obs = Observation(self.t, self.opening, self.ee, self.command, self.t if state else None,
                              self.t if image else None)
            result = self.monitor.observe(obs)
            if result is not None:
                self.results.append(result)
                return result
        return None


def test_pick_succeeds_when_the_opening_stays_above_the_object_width():
    run = Run()
    assert run.tick(3, command=OPEN) is None
    assert run.tick(1, command=CLOSED, opening=0.05) is None  # closing: still moving
    assert run.tick(1, opening=0.03) is None
    assert run.tick(2) is None                                 # settled 0.2 s < 0.3 s
    assert run.tick(1) is None and run.monitor.gripper.holding  # settled 0.3 s: grasped
    result = run.tick(10)
    assert result is not None and result.success and result.failure == Failure.NONE
    assert "holding cup" in result.detail and "0.030" in result.detail
    assert result.actions == 3 + 1 + 1 + 2 + 1 + 4 and result.elapsed_s == pytest.approx(1.2)
    assert run.t == pytest.approx(1.2)  # held from t = 0.8 until confirmed at 0.8 + 0.4
    assert not run.monitor.active and run.monitor.observe(Observation(run.t + 1, 0.03)) is None


def test_pick_on_nothing_is_a_grasp_failure():
    run = Run()
    run.tick(1, command=CLOSED, opening=0.02)
    result = run.tick(10, opening=0.001)
    assert result.failure == Failure.GRASP and not result.success
    assert "closed on nothing" in result.detail and "0.001" in result.detail


def test_a_gripper_that_does_not_close_is_an_executor_failure():
    run = Run()
    result = run.tick(10, command=CLOSED, opening=OPEN)  # commanded closed, never moves
    assert result.failure == Failure.EXECUTOR and "did not close" in result.detail
    assert result.elapsed_s == pytest.approx(0.4)  # settled from the close command (0.1) for 0.3 s


def test_slip_while_confirming_is_drop_slip():
    run = Run()
    run.tick(1, command=CLOSED, opening=0.03)
    run.tick(3)
    assert run.monitor.gripper.holding
    result = run.tick(1, opening=0.002)
    assert result.failure == Failure.DROP_SLIP and "slipped" in result.detail and "0.030" in result.detail


def test_gripper_state_carries_over_into_place_which_releases_at_the_target():
    run = Run(action="pick")
    run.tick(1, command=CLOSED, opening=0.03)
    assert run.tick(10).success
    run.start("place", {"object": "cup", "target": "bin"})
    assert run.monitor.had_hold
    assert run.tick(5, ee=(0.31, 0.0, 0.16)) is None           # carrying, 0.06 m above the bin
    assert run.tick(1, command=OPEN) is None                    # released over the bin; the gripper not open yet
    assert run.tick(1, opening=0.035) is None                   # 0.035 < 0.03 + 0.01
    result = run.tick(1, opening=0.05)
    assert result.success and "released cup at bin" in result.detail


def test_place_can_grasp_first_then_release():
    run = Run(action="place", parameters={"object": "cup", "target": "bin"})
    assert not run.monitor.had_hold
    run.tick(1, command=CLOSED, opening=0.03)
    run.tick(4)
    assert run.monitor.gripper.holding
    result = run.tick(3, command=OPEN, opening=0.07, ee=(0.3, 0.01, 0.1))
    assert result.success


def test_place_released_away_from_the_target_is_a_drop():
    run = Run(action="place", parameters={"object": "cup", "target": "bin"})
    run.tick(5, command=CLOSED, opening=0.03)
    result = run.tick(1, command=OPEN, ee=(0.3, 0.06, 0.1))    # 0.06 m beside the bin (tolerance 0.05)
    assert result.failure == Failure.DROP_SLIP and "0.060 m (horizontally) from bin" in result.detail


def test_place_without_a_known_target_only_needs_the_release():
    run = Run(action="place", parameters={"object": "cup", "target": "shelf_9"})
    run.tick(5, command=CLOSED, opening=0.03)
    assert run.tick(2, command=OPEN, opening=0.06, ee=(9.0, 9.0, 9.0)).success


def test_place_never_holding_times_out():
    run = Run(cfg=config(step_timeout_s=1.0), action="place", parameters={"object": "cup", "target": "bin"})
    result = run.tick(20, command=OPEN)
    assert result.failure == Failure.TIMEOUT and "1 s" in result.detail and result.elapsed_s == pytest.approx(1.0)


def test_reach_and_push_success():
    run = Run(action="move_to", parameters={"target": "dock"})
    assert run.tick(2, ee=(0.0, 0.0, 0.0)) is None
    result = run.tick(1, ee=(0.39, 0.0, 0.05))
    assert result.success and result.detail.startswith("reached dock")
    run = Run(action="push", parameters={"object": "box", "target": "dock"})
    for x in (0.0, 0.1, 0.19, 0.25, 0.3, 0.35):               # approach, then along the path
        assert run.tick(1, ee=(x, 0.0, 0.05 if x >= 0.19 else 0.2)) is None
    assert run.monitor.contact
    assert run.tick(1, ee=(0.395, 0.0, 0.05)).success


def test_push_leaving_the_path_is_contact_loss():
    run = Run(action="push", parameters={"object": "box", "target": "dock"})
    assert run.tick(1, ee=(0.0, 0.3, 0.3)) is None and not run.monitor.contact  # far from the path before contact
    run.tick(1, ee=(0.22, 0.01, 0.05))
    assert run.monitor.contact
    assert run.tick(1, ee=(0.3, 0.05, 0.05)) is None           # 0.05 m off the path: within push_loss_m
    result = run.tick(1, ee=(0.3, 0.08, 0.05))
    assert result.failure == Failure.CONTACT_LOSS and "0.080" in result.detail


def test_push_of_an_unknown_object_only_needs_the_target():
    run = Run(action="push", parameters={"object": "ghost", "target": "dock"})
    assert run.tick(1, ee=(0.0, 0.5, 0.5)) is None
    assert run.tick(1, ee=LOCATIONS["dock"]).success


def test_budget_and_timeout():
    run = Run(cfg=config(max_step_actions=5), action="move_to", parameters={"target": "dock"})
    result = run.tick(10)
    assert result.failure == Failure.TIMEOUT and "5 actions" in result.detail and result.actions == 5
    run = Run(cfg=config(step_timeout_s=0.5), action="move_to", parameters={"target": "dock"})
    result = run.tick(10)
    assert result.failure == Failure.TIMEOUT and result.elapsed_s == pytest.approx(0.5)


def test_vla_errors_fail_after_max_consecutive():
    run = Run(cfg=config(max_vla_errors=3), action="move_to", parameters={"target": "dock"})
    assert run.monitor.vla_error(0.1, "timeout") is None
    assert run.monitor.vla_error(0.2, "timeout") is None
    run.tick(1)                                                 # an answer: no longer consecutive
    assert run.monitor.vla_error(0.4, "timeout") is None
    assert run.monitor.vla_error(0.5, "timeout") is None
    result = run.monitor.vla_error(0.6, "server answered error")
    assert result.failure == Failure.EXECUTOR and "3 times in a row: server answered error" in result.detail
    assert result.actions == 1 and result.elapsed_s == pytest.approx(0.6)
    assert run.monitor.vla_error(0.7, "x") is None              # no step: nothing to fail


def test_a_step_the_vla_never_answered_in_times_out_as_an_executor_failure():
    run = Run(cfg=config(step_timeout_s=1.0, max_vla_errors=100), action="move_to", parameters={"target": "dock"})
    for i in range(1, 12):  # a request in flight, then errors below max_vla_errors: no action ever reached the arm
        t = i * 0.1
        if i > 5:
            assert run.monitor.vla_error(t, "slow_body: no complete answer within 0.5 s") is None
        result = run.monitor.observe(Observation(t, OPEN, (0.0, 0.0, 0.2), math.nan, t, t))
        if result is not None:
            break
    assert result.failure == Failure.EXECUTOR and result.actions == 0, result
    assert "no VLA answer within the step timeout of 1 s (5 errors in a row: slow_body" in result.detail


def test_stale_inputs_are_executor_failures():
    run = Run(cfg=config(stale_after_s=0.5), action="move_to", parameters={"target": "dock"})
    assert run.tick(5, state=False) is None                     # 0.5 s since the step began: not yet stale
    result = run.tick(1, state=False)
    assert result.failure == Failure.EXECUTOR and "no arm state" in result.detail
    run = Run(cfg=config(stale_after_s=0.5), action="move_to", parameters={"target": "dock"})
    run.tick(2)
    result = run.tick(6, image=False)
    assert result.failure == Failure.EXECUTOR and "no camera image" in result.detail


def test_spec_validation():
    monitor = StepMonitor(config())
    spec = monitor.spec("push", {"object": "box", "target": "dock"})
    assert spec.condition == Condition.PUSH and spec.object_xyz == LOCATIONS["box"]
    assert monitor.spec("pick", {"object": "anything"}).object_xyz is None
    for action, params, reason in (("fly", {}, "unknown_skill"), ("push", {"object": "box"}, "unknown_location"),
                                   ("move_to", {"target": "mars"}, "unknown_location")):
        with pytest.raises(StepError) as err:
            monitor.spec(action, params)
        assert err.value.reason == reason


def test_tracker_events_and_settling():
    tracker = GripperTracker(config(grasp_settle_s=0.2, settle_tolerance_m=0.001))
    assert tracker.update(0.0, CLOSED, 0.07) == []
    assert tracker.update(0.1, math.nan, 0.05) == []            # moving
    assert tracker.update(0.2, math.nan, 0.0305) == []
    assert tracker.update(0.3, math.nan, 0.0300) == []          # within tolerance of 0.0305: settled since 0.2
    assert tracker.update(0.4, math.nan, 0.0302) == [GripperEvent.GRASPED]
    assert tracker.update(0.5, math.nan, 0.0301) == []
    assert tracker.update(0.6, OPEN, 0.0301) == [GripperEvent.RELEASED] and not tracker.holding
    assert tracker.update(0.7, math.nan, None) == []
    assert tracker.update(0.8, CLOSED, None) == [] and tracker.closed  # no new measurement: the last one stands
    assert tracker.update(1.1, CLOSED, 0.0) == [] and tracker.update(1.3, CLOSED, 0.0) == [GripperEvent.EMPTY]
    assert tracker.update(2.0, CLOSED, 0.0) == []               # judged once per close


def test_a_close_is_judged_only_on_openings_measured_after_it():
    tracker = GripperTracker(config(grasp_settle_s=0.2, settle_tolerance_m=0.001))
    assert tracker.update(1.0, CLOSED, 0.07, measured_t=0.95) == []
    # the feedback stream stalls: the executor ticks on with the last measurement, taken before the close
    for t in (1.1, 1.3, 1.6, 2.0):
        assert tracker.update(t, math.nan, 0.07, measured_t=0.95) == []
    assert tracker.update(2.05, math.nan, 0.03, measured_t=2.05) == []      # the first fresh opening: it moved
    assert tracker.update(2.3, math.nan, 0.03, measured_t=2.3) == [GripperEvent.GRASPED]
    # a gripper that really stays open is still caught, on fresh measurements
    tracker = GripperTracker(config(grasp_settle_s=0.2, settle_tolerance_m=0.001))
    assert tracker.update(1.0, CLOSED, 0.07, measured_t=0.95) == []
    assert tracker.update(1.1, math.nan, 0.07, measured_t=1.1) == []
    assert tracker.update(1.25, math.nan, 0.07, measured_t=1.25) == []     # observed for 0.15 s only
    assert tracker.update(1.3, math.nan, 0.07, measured_t=1.3) == [GripperEvent.NOT_CLOSING]


def test_a_burst_of_samples_sent_before_the_close_arrived_is_not_a_gripper_that_stays_open():
    tracker = GripperTracker(config(grasp_settle_s=0.2, settle_tolerance_m=0.001))
    assert tracker.update(1.0, CLOSED, 0.07, measured_t=0.95) == []
    # the process paused: the first sample after the close arrives 0.4 s late, sent before the gripper saw it
    assert tracker.update(1.4, math.nan, 0.07, measured_t=1.4) == []
    assert tracker.update(1.45, math.nan, 0.03, measured_t=1.45) == []     # the gripper's answer: it moved
    assert tracker.update(1.6, math.nan, 0.03, measured_t=1.6) == []
    assert tracker.update(1.65, math.nan, 0.03, measured_t=1.65) == [GripperEvent.GRASPED]


def test_table_parsing_and_config_validation():
    assert parse_locations(["bin=0.3, -0.1, 0.05"]) == {"bin": (0.3, -0.1, 0.05)}
    for bad in (["bin=0.3,0.1"], ["bin=a,b,c"], ["bin=nan,0,0"], ["bin"]):
        with pytest.raises(ValueError):
            parse_locations(bad)
    assert parse_conditions(["pick=grasp", "nudge=push"]) == {"pick": Condition.GRASP, "nudge": Condition.PUSH}
    with pytest.raises(ValueError):
        parse_conditions(["pick=hold"])
    for bad in (dict(min_object_width_m=0.0), dict(min_object_width_m=0.08), dict(push_loss_m=0.01),
                dict(step_timeout_s=0.0), dict(max_vla_errors=0), dict(conditions={}), dict(hold_confirm_s=-1.0),
                dict(release_margin_m=math.nan)):
        with pytest.raises(ValueError):
            config(**bad).validate()


def test_segment_distance():
    assert segment_distance((0.5, 1.0, 0.0), (0, 0, 0), (1, 0, 0)) == pytest.approx(1.0)
    assert segment_distance((-1.0, 0.0, 0.0), (0, 0, 0), (1, 0, 0)) == pytest.approx(1.0)
    assert segment_distance((2.0, 0.0, 0.0), (0, 0, 0), (1, 0, 0)) == pytest.approx(1.0)
    assert segment_distance((3.0, 4.0, 0.0), (0, 0, 0), (0, 0, 0)) == pytest.approx(5.0)


def test_a_push_that_starts_at_its_target_must_leave_it_first():
    monitor = StepMonitor(config())
    monitor.start(monitor.spec("push", {"object": "ghost", "target": "dock"}), 0.0)
    dock = LOCATIONS["dock"]
    for t, x in ((0.1, dock[0]), (0.2, dock[0] + 0.015)):      # at the target, and an action later still within it
        monitor.action_sent()
        assert monitor.observe(Observation(t, OPEN, (x, dock[1], dock[2]), math.nan, t, t)) is None
    monitor.action_sent()
    assert monitor.observe(Observation(0.3, OPEN, (dock[0] + 0.05, dock[1], dock[2]), math.nan, 0.3, 0.3)) is None
    assert monitor.observe(Observation(0.4, OPEN, dock, math.nan, 0.4, 0.4)).success    # back: arrived
    reach = StepMonitor(config())                               # a move to where the arm already is is done
    reach.start(reach.spec("move_to", {"target": "dock"}), 0.0)
    assert reach.observe(Observation(0.1, OPEN, dock, math.nan, 0.1, 0.1)).success
