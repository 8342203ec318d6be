"""StepRunner without ROS: plans, the VLA call in flight, errors, preemption and the counters, with a scripted backend."""

from __future__ import annotations

import numpy as np
import pytest

from brace_common.vocabulary import Failure, TriggerKind
from robot_bridge.openvla.executor_config import ExecutorConfig
from robot_bridge.openvla.step_runner import StepRunner
from robot_bridge.openvla.vla_backends import VlaError

OPEN_ACTION = np.array([0.001, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0])  # the gripper stays open: a pick never ends by itself


class Backend:
    """Answers `answer` (or raises it when it is an exception) to every request."""

    def __init__(self) -> None:
        self.answer: object = OPEN_ACTION
        self.instructions: list[str] = []

    def predict(self, image, instruction, cancelled):
        self.instructions.append(instruction)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def describe(self) -> str:
        return "scripted"

    def close(self) -> None:
        pass


class Log:
    def _log(self, text: str, **_) -> None:
        pass

    info = warning = error = _log


@pytest.fixture
def runner():
    backend = Backend()
    runner = StepRunner(Log())
    runner.configure(ExecutorConfig(locations=["bowl=0.25,0.12,0.12"], max_vla_errors=2, stale_after_s=1e6),
                     lambda cfg: backend)
    runner.take_image(np.zeros((6, 8, 3), np.uint8))
    runner.take_gripper(0.05)
    runner.take_pose((0.2, 0.0, 0.2))
    runner.start()
    yield runner, backend
    runner.release()


def answered_tick(runner: StepRunner):
    """Tick until a request is in flight, wait for its answer, and tick once more to take it."""
    runner.tick()
    assert runner.in_flight is not None
    runner.in_flight[1].exception(timeout=30.0)  # waits on the worker's future, never on the clock
    return runner.tick()


def test_an_answer_becomes_one_arm_action(runner):
    runner, backend = runner
    runner.take_plan("arm_0", "p1", [("pick", '{"object": "cup"}')], 0)
    action, finished = answered_tick(runner)
    assert action is not None and finished is None and action.gripper_m > 0.0
    assert backend.instructions == ["pick up the cup"]
    assert runner.counts["actions"] == 1 and runner.counts["vla_requests"] >= 1 and runner.monitor.actions == 1


def test_max_vla_errors_in_a_row_fail_the_step_and_are_counted_by_reason(runner):
    runner, backend = runner
    backend.answer = VlaError("server_error", "answered error")
    runner.take_plan("arm_0", "p1", [("pick", '{"object": "cup"}'), ("move_to", '{"target": "bowl"}')], 0)
    assert answered_tick(runner) == (None, None)
    action, finished = answered_tick(runner)
    assert action is None and finished is not None and finished.step.index == 0
    assert finished.result.failure == Failure.EXECUTOR and "2 times in a row" in finished.result.detail
    assert runner.counts["vla_errors.server_error"] == 2 and runner.counts["steps_failed.executor"] == 1
    assert runner.current is None  # on_failure abandon: the rest of the plan is dropped
    health = runner.health()
    assert health.errors and "VLA failing" in health.errors[0] and "vla_errors" in health.warnings
    assert health.values["vla_errors.server_error"] == 2


def test_plans_of_others_repeats_and_malformed_ones_are_counted_and_change_nothing(runner):
    runner, _ = runner
    runner.take_plan("arm_0", "p1", [("pick", '{"object": "cup"}')], 0)
    runner.take_plan("arm_1", "q", [("pick", '{"object": "cup"}')], 0)
    runner.take_plan("arm_0", "p1", [("place", '{"object": "cup", "target": "bowl"}')], 0)
    runner.take_plan("arm_0", "bad", [("dance", "{}")], 0)
    assert runner.counts["plans_other_agents"] == 1 and runner.counts["plans_repeated"] == 1
    assert dict(runner.rejections.counts) == {"plan.unknown_skill": 1}
    assert runner.plan_id == "p1" and runner.current.action == "pick" and runner.counts["plans"] == 1


def test_a_confirming_plan_goes_on_and_a_repairing_one_restarts_the_instruction(runner):
    runner, _ = runner
    steps = [("pick", '{"object": "cup"}')]
    runner.take_plan("arm_0", "p1", steps, 0)
    generation = runner.generation
    runner.take_plan("arm_0", "p2", steps, 0)
    assert runner.counts["plans_unchanged"] == 1 and runner.generation == generation
    runner.take_plan("arm_0", "p3", steps, int(TriggerKind.DRIFT))
    assert runner.counts["steps_restarted"] == 1 and runner.generation > generation
    runner.take_plan("arm_0", "p4", [("pick", '{"object": "mug"}')], 0)
    assert runner.counts["steps_replaced"] == 1 and runner.current.parameters["object"] == "mug"


def test_a_confident_violation_preempts_and_abandons_the_plan_and_later_ones_are_idle(runner):
    runner, _ = runner
    runner.take_plan("arm_0", "p1", [("pick", '{"object": "cup"}'), ("move_to", '{"target": "bowl"}')], 0)
    runner.tick()
    assert runner.verdict("arm_0", True, 0.1, "unsure") is None and runner.counts["verdicts_not_halting"] == 1
    assert runner.verdict("arm_0", True, 2.0, "bad") is None and runner.rejections.counts["verdict.confidence"] == 1
    finished = runner.verdict("arm_0", True, 0.9, "cup removed")
    assert finished.result.failure == Failure.PREEMPTED and "cup removed" in finished.result.detail
    assert runner.current is None and runner.in_flight is None and runner.counts["halts"] == 1
    assert runner.verdict("arm_0", True, 0.9, "again") is None and runner.counts["verdicts_idle"] == 1


def test_stop_drops_the_answer_in_flight_and_ticks_do_nothing_until_start(runner):
    runner, _ = runner
    runner.take_plan("arm_0", "p1", [("pick", '{"object": "cup"}')], 0)
    runner.tick()
    runner.stop()
    assert runner.tick() == (None, None) and runner.in_flight is None
    runner.start()
    action, _ = answered_tick(runner)
    assert action is not None
