"""The executor's core, ROS-free: the current plan, its running step, the VLA call in flight and the counters.

Each control tick takes a finished VLA answer (one ArmAction), judges the step (step_monitor) and asks the
backend for the next action in a worker thread; a step that ends is a `Finished` for the node to publish. The
rules (plan replacement, preemption, VLA errors) are in docs/openvla_executor.md.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from brace_common.action_schema import Step, step_from_message
from brace_common.config import ConfigError
from brace_common.counters import Counters, Health
from brace_common.plan_start import PlanStart, plan_start
from brace_common.validation import InvalidInput, Rejections, check_id, shorten
from brace_common.vocabulary import EpisodeEvent, Failure, TriggerKind

from .executor_config import ExecutorConfig
from .step_monitor import Observation, StepMonitor, StepResult, StepSpec
from .vla_action import ActionError, ArmAction, anchored, to_arm
from .vla_backends import LocalBackend, ServerBackend, VlaError, resize_image

MAX_PLAN_STEPS = 64
"""A plan longer than this is rejected (the planner's schemas allow a handful)."""
COUNTERS = ("plans", "plans_other_agents", "plans_repeated", "plans_unchanged", "plans_ended_by_episode",
            "plans_between_episodes",
            "steps_succeeded", "steps_replaced", "steps_restarted", "verdicts_not_halting", "verdicts_idle", "halts",
            "images", "vla_requests", "vla_requests_cancelled", "answers_dropped", "actions", "actions_anchored",
            "actions_clipped", "vla_errors")
"""The executor's counters; vla_errors.<reason> and steps_failed.<category> are declared as they first happen."""


@dataclass(frozen=True)
class PlannedStep:
    """One step of the current plan with what the executor derived from it when the plan arrived.

    Not a second step type: it wraps the plan's `Step` with executor state (its index in the plan, the VLA
    instruction, the step monitor's spec), which a Step does not carry.
    """

    index: int
    step: Step
    instruction: str
    spec: StepSpec

    @property
    def action(self) -> str:
        """The step's skill."""
        return self.step.action

    @property
    def parameters(self) -> dict[str, Any]:
        """The step's parameters."""
        return self.step.parameters

    def describe(self) -> str:
        """`pick(object=cup)` for logs and context entries."""
        return self.step.text()

    def call(self) -> str:
        """The skill call as canonical text (what makes two plan steps the same)."""
        return self.step.call()


@dataclass(frozen=True)
class Finished:
    """A step that ended: the node publishes its outcome and context entry (the next step has begun already)."""

    step: PlannedStep
    result: StepResult
    tick: int


def build_backend(cfg: ExecutorConfig):
    """The VLA backend of `cfg` (local: the model is loaded now); ConfigError naming the parameter on failure."""
    if cfg.backend == "server":
        return ServerBackend(cfg.server_url, cfg.unnorm_key, cfg.server_timeout_s)
    try:
        backend = LocalBackend(cfg.model_path, cfg.unnorm_key, cfg.device)
        backend.load()
    except VlaError as exc:
        raise ConfigError("unnorm_key" if exc.reason == "unnorm_key" else "model_path", str(exc)) from None
    return backend


class StepRunner:
    """Runs one agent's plan steps with a VLA; thread-safe (one lock: inputs, verdicts, ticks and transitions).

    `configure` takes a validated config and its backend, `start` / `stop` the control loop, `release` frees them;
    the counters and rejections live as long as the runner. `logger` takes rclpy's `throttle_duration_sec`.
    """

    def __init__(self, logger) -> None:
        self.log = logger
        self.counts = Counters(COUNTERS, warn=("vla_errors", "actions_clipped"))
        self.rejections = Rejections(logger)
        self.lock = threading.Lock()
        self.config: Optional[ExecutorConfig] = None
        self.backend = None
        self.monitor: Optional[StepMonitor] = None
        self.running = False
        self.last_vla_error = ""
        self.consecutive_vla_errors = 0
        self.plan_id = ""
        self.steps: list[PlannedStep] = []
        self.index = 0
        self.between_episodes = False  # after an episode's END, before the next START: no world to act in
        self.generation = 0           # bumped whenever the current step changes: older VLA answers are dropped
        self.ticks = 0
        self.image: Optional[np.ndarray] = None
        self.image_time: Optional[float] = None
        self.gripper_m: Optional[float] = None
        self.joints_time: Optional[float] = None
        self.ee_xyz: Optional[tuple[float, float, float]] = None
        self.pose_time: Optional[float] = None
        self.commanded_gripper_m = math.nan
        self.pool: Optional[ThreadPoolExecutor] = None
        # the VLA call in flight: (generation, future, monotonic start, the pose it was asked from)
        self.in_flight: Optional[tuple[int, Future, float, Optional[tuple[float, float, float]]]] = None

    # ------------------------------------------------------------------ lifecycle

    def configure(self, cfg: ExecutorConfig, build: Callable[[ExecutorConfig], Any] = build_backend) -> None:
        """Take a validated config and build its backend once every part of it is valid (ConfigError otherwise)."""
        templates, monitor_cfg, scaling, gripper = cfg.templates(), cfg.monitor_config(), cfg.scaling(), cfg.gripper()
        backend = build(cfg)
        with self.lock:
            self.config, self.backend = cfg, backend
            self.templates, self.scaling, self.gripper_map = templates, scaling, gripper
            self.monitor = StepMonitor(monitor_cfg)
            self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vla")

    def start(self) -> None:
        """Start the control loop (the current step, if any, starts again now)."""
        with self.lock:
            self.running = True
            self._begin_step()

    def stop(self) -> None:
        """Stop the control loop: no more actions (an answer in flight is dropped)."""
        with self.lock:
            self._stop()

    def _stop(self) -> None:
        self.running = False
        self.generation += 1
        self._abandon_request()
        if self.monitor is not None:
            self.monitor.stop()

    def release(self) -> None:
        """Free the backend (the model), the worker and the plan; safe to call twice."""
        with self.lock:
            self._stop()
            if self.pool is not None:
                self.pool.shutdown(wait=False, cancel_futures=True)
                self.pool = None
            if self.backend is not None:
                self.backend.close()
                self.backend = None
            self.plan_id, self.steps, self.index = "", [], 0
            self.monitor = None

    # ------------------------------------------------------------------ inputs

    def take_plan(self, agent_id: str, plan_id: str, steps: list[tuple[str, str]], trigger_kind: int) -> None:
        """A plan (each step's action and parameters JSON): validated whole, it replaces the current one or confirms
        it; one of another agent, a repeat or a malformed one is counted."""
        with self.lock:
            if self.config is None or agent_id != self.config.agent_id:
                self.counts["plans_other_agents"] += 1
                return
            try:
                plan_id = check_id("plan_id", plan_id)
                planned = self._parse_steps(steps)
            except InvalidInput as exc:  # InstructionError and StepError included
                self.rejections.reject("plan", exc, plan_id)
                return
            if plan_id == self.plan_id:
                self.counts["plans_repeated"] += 1
                return
            if self.between_episodes:   # a call answered after its episode ended: nothing left to do it in
                self.counts["plans_between_episodes"] += 1
                self.log.info(f"plan '{shorten(plan_id)}' arrived after the episode ended: not executed")
                return
            running = self.monitor is not None and self.monitor.active
            start = plan_start([s.call() for s in self.steps[self.index:]] if running else [],
                               [s.call() for s in planned], trigger_kind)
            if start != PlanStart.REPLACES:
                # the same steps from the running one on: the running step goes on (its timeout and action budget
                # still count); a drift or loop repair gives the VLA its instruction anew
                self.plan_id, self.steps, self.index = plan_id, planned, 0
                self.counts["plans_unchanged"] += 1
                if start == PlanStart.RESTARTS:
                    self.counts["steps_restarted"] += 1
                    self.generation += 1
                    self._abandon_request()
                self.log.info(f"plan '{shorten(plan_id)}': the same steps from the running one on; it "
                              + ("repairs a " + TriggerKind(trigger_kind).label + ": the instruction is given anew"
                                 if start == PlanStart.RESTARTS else "goes on"))
                return
            if running:
                self.counts["steps_replaced"] += 1
            self.plan_id, self.steps, self.index = plan_id, planned, 0
            self.counts["plans"] += 1
            self.log.info(f"plan '{shorten(plan_id)}': " + (", ".join(s.describe() for s in planned) or "empty"))
            if self.running:
                self._begin_step()

    def _parse_steps(self, steps: list[tuple[str, str]]) -> list[PlannedStep]:
        if len(steps) > MAX_PLAN_STEPS:
            raise InvalidInput("long_steps", f"the plan has {len(steps)} steps (at most {MAX_PLAN_STEPS})")
        planned = []
        for i, (action, parameters_json) in enumerate(steps):
            step = step_from_message(action, parameters_json)
            instruction = self.templates.instruction(step.action, step.parameters)
            planned.append(PlannedStep(i, step, instruction, self.monitor.spec(step.action, step.parameters)))
        return planned

    def end_episode(self, episode: int, event: EpisodeEvent = EpisodeEvent.START) -> None:
        """An episode's END or a new one's START ends the current plan without an outcome (it was for the world that
        is over); the arm holds until the next episode's first plan (plans between an END and a START are not run)."""
        with self.lock:
            self.between_episodes = event == EpisodeEvent.END
            if self.monitor is None or not self.steps:
                return
            how = "ended" if event == EpisodeEvent.END else "began"
            self.log.info(f"episode {episode} {how}: plan '{shorten(self.plan_id)}' ended; idle")
            self.plan_id, self.steps, self.index = "", [], 0
            self._begin_step()      # no current step: the monitor stops, the request in flight is dropped
            self.counts["plans_ended_by_episode"] += 1  # last: a reader that sees the count sees the arm idle

    def verdict(self, agent_id: str, violation: bool, confidence: float, detail: str) -> Optional[Finished]:
        """A verifier's verdict: a confident violation for this agent halts the running step and returns it (the
        node then makes the arm hold before it publishes the outcome); anything else is counted."""
        with self.lock:
            cfg = self.config
            if cfg is None or agent_id != cfg.agent_id or not violation:
                return None
            if not math.isfinite(confidence) or not 0.0 <= confidence <= 1.0:
                self.rejections.reject("verdict", InvalidInput("confidence", f"confidence {confidence} is not in "
                                                               "[0, 1]"), agent_id)
                return None
            if not cfg.halt_on_verdict or confidence < cfg.halt_min_confidence:
                self.counts["verdicts_not_halting"] += 1
                return None
            if not self.running or self.current is None or not self.monitor.active:
                self.counts["verdicts_idle"] += 1
                return None
            self._abandon_request()
            self.counts["halts"] += 1
            return self._finish(self.monitor.preempt(time.monotonic(), shorten(detail, 300)))

    def take_image(self, image: np.ndarray) -> None:
        """The latest camera image (RGB)."""
        self.image, self.image_time = image, time.monotonic()
        self.counts.add("images")

    def take_gripper(self, opening_m: float) -> None:
        """The latest gripper opening (m); a non-finite one is counted."""
        if not math.isfinite(opening_m):
            self.rejections.reject("joint_states", InvalidInput("non_finite", "the gripper position is not finite"))
            return
        self.gripper_m, self.joints_time = opening_m, time.monotonic()

    def take_pose(self, xyz: tuple[float, float, float]) -> None:
        """The end effector's latest position; a non-finite one is counted."""
        if not all(math.isfinite(v) for v in xyz):
            self.rejections.reject("end_pose", InvalidInput("non_finite", "the end pose is not finite"))
            return
        self.ee_xyz, self.pose_time = xyz, time.monotonic()

    # ------------------------------------------------------------------ the control loop

    @property
    def current(self) -> Optional[PlannedStep]:
        """The step being executed (None when idle)."""
        return self.steps[self.index] if self.index < len(self.steps) else None

    def _abandon_request(self) -> None:
        """Forget the VLA call in flight (its generation is over, so it cancels itself); counted when it was running."""
        if self.in_flight is not None and not self.in_flight[1].done():
            self.counts["vla_requests_cancelled"] += 1
        self.in_flight = None

    def _begin_step(self) -> None:
        self.generation += 1
        self._abandon_request()
        step = self.current
        if step is None:
            self.monitor.stop()
            return
        self.monitor.start(step.spec, time.monotonic())
        self.log.info(f"step {step.index}: {step.describe()} -> '{step.instruction}'")

    def tick(self) -> tuple[Optional[ArmAction], Optional[Finished]]:
        """One control tick: the action of a finished VLA answer to send, the step that ended (or None for each)."""
        with self.lock:
            if not self.running or self.monitor is None:
                return None, None
            self.ticks += 1
            now = time.monotonic()
            # the next request's observation is taken before this tick's step goes out, so the image and the pose
            # it is anchored to are both from before that step, whatever the callbacks on other threads do meanwhile
            image, observed_xyz = self.image, self.ee_xyz
            action, result = self._take_answer(now)
            state_time = None if self.joints_time is None or self.pose_time is None else \
                min(self.joints_time, self.pose_time)
            judged = self.monitor.observe(Observation(now, self.gripper_m, self.ee_xyz, self.commanded_gripper_m,
                                                      state_time, self.image_time))
            result = result or judged
            if result is not None:
                return action, self._finish(result)
            step = self.current
            if step is not None and self.monitor.active and self.in_flight is None and image is not None:
                generation = self.generation
                future = self.pool.submit(self._predict, self.backend, image, self.config.image_size,
                                          step.instruction, lambda: generation != self.generation)
                self.in_flight = (generation, future, now, observed_xyz)   # the pose the VLA's answer is from
                self.counts["vla_requests"] += 1
            return action, None

    @staticmethod
    def _predict(backend, image: np.ndarray, size: int, instruction: str, cancelled) -> np.ndarray:
        # `cancelled` turns true when the step changes or the loop stops: the request ends within a poll, so the
        # single worker is free for the next step's request at once instead of queueing it behind a slow answer
        return backend.predict(resize_image(np.ascontiguousarray(image), size), instruction, cancelled)

    def _take_answer(self, now: float) -> tuple[Optional[ArmAction], Optional[StepResult]]:
        if self.in_flight is None or not self.in_flight[1].done():
            return None, None
        generation, future, _, observed_xyz = self.in_flight
        self.in_flight = None
        if generation != self.generation or not self.monitor.active:
            self.counts["answers_dropped"] += 1
            return None, None
        try:
            arm = to_arm(future.result(), self.scaling, self.gripper_map)
        except (VlaError, ActionError) as exc:
            return None, self._vla_error(now, exc.reason, str(exc))
        except Exception as exc:  # noqa: BLE001 - a backend bug must not stop the control loop
            return None, self._vla_error(now, "internal", f"{type(exc).__name__}: {exc}")
        self.consecutive_vla_errors = 0
        if self.config.anchor_actions and observed_xyz is not None and self.ee_xyz is not None:
            arm = anchored(arm, observed_xyz, self.ee_xyz, self.scaling)
            self.counts["actions_anchored"] += 1
        self.commanded_gripper_m = arm.gripper_m
        self.monitor.action_sent()
        self.counts["actions"] += 1
        if arm.clipped:
            self.counts["actions_clipped"] += 1
        return arm, None

    def _vla_error(self, now: float, reason: str, detail: str) -> Optional[StepResult]:
        self.counts["vla_errors"] += 1
        self.counts.declare(f"vla_errors.{reason}")  # the reason comes from the error, not from a literal here
        self.counts[f"vla_errors.{reason}"] += 1
        self.consecutive_vla_errors += 1
        self.last_vla_error = detail
        self.log.warning(f"VLA error ({reason}): {shorten(detail, 200)}", throttle_duration_sec=2.0)
        return self.monitor.vla_error(now, detail)

    def _finish(self, result: StepResult) -> Finished:
        step = self.current
        failure = Failure(result.failure)
        if result.success:
            self.counts["steps_succeeded"] += 1
        else:
            self.counts.declare(f"steps_failed.{failure.label}")
            self.counts[f"steps_failed.{failure.label}"] += 1
        if result.success or (self.config.on_failure == "continue" and failure != Failure.PREEMPTED):
            self.index += 1
        else:
            self.index = len(self.steps)  # abandoned: idle until the next plan
        if self.current is None:
            self.log.info(f"plan '{shorten(self.plan_id)}' {'done' if result.success else 'ended after a failure'}: idle")
        self._begin_step()
        return Finished(step, result, self.ticks)

    # ------------------------------------------------------------------ health

    def health(self) -> Health:
        """The current step, counts, VLA errors and rejected input; ERROR while the VLA fails max_vla_errors in a row."""
        with self.lock:
            cfg, step = self.config, self.current if self.monitor is not None else None
            gripper = self.monitor.gripper if self.monitor is not None else None
            values = {"agent_id": cfg.agent_id if cfg else "",
                      "backend": self.backend.describe() if self.backend is not None else "",
                      "plan_id": self.plan_id, "step": f"{step.index}: {step.describe()}" if step else "idle",
                      "instruction": step.instruction if step else "", "ticks": self.ticks,
                      "gripper_m": "" if self.gripper_m is None else f"{self.gripper_m:.4f}",
                      "holding": bool(gripper and gripper.holding), "consecutive_vla_errors": self.consecutive_vla_errors,
                      "vla_in_flight_s": "" if self.in_flight is None else f"{time.monotonic() - self.in_flight[2]:.2f}",
                      "last_vla_error": self.last_vla_error}
            failing = cfg is not None and self.consecutive_vla_errors >= cfg.max_vla_errors
            errors = (f"VLA failing ({self.consecutive_vla_errors} errors in a row): {self.last_vla_error}",) \
                if failing else ()
        counts = self.counts.health()
        return Health(values, errors=errors) + Health(dict(sorted(counts.values.items())), counts.warnings) + \
            self.rejections.health()
