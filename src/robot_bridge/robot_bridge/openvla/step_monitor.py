"""When the executor's current plan step ends, and how: success, or a failure of BRACE Table 32 (no ROS).

Each skill has a success condition (`Condition`: grasp, place, push, reach) from `skill_conditions`; failures are
brace_common.vocabulary.Failure categories. Times are seconds of a monotonic clock the caller gives; the gripper's
state (closed, holding) lives across steps. The conditions and failures: docs/openvla_executor.md, "When a step
ends".
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from brace_common.validation import InvalidInput
from brace_common.vocabulary import Failure

from .instructions import parse_table

Point = tuple[float, float, float]
EPS_S = 1e-9
"""Slack of time comparisons: a duration of 0.4 s measured as 1.2 - 0.8 is 0.39999999999999997."""


class Condition(str, enum.Enum):
    """How a skill's success is recognised."""

    GRASP = "grasp"
    PLACE = "place"
    PUSH = "push"
    REACH = "reach"


NEEDS_TARGET = (Condition.PUSH, Condition.REACH)
"""Conditions that cannot be judged without a known target location."""


class StepError(InvalidInput):
    """A plan step the monitor cannot judge (no condition for its skill, an unknown location); `reason` is the key."""


def parse_locations(entries: Sequence[str], label: str = "locations") -> dict[str, Point]:
    """`name=x,y,z` entries (three numbers: a point in m, or any triple such as r,g,b) as a dict; ValueError naming
    `label` on a malformed entry."""
    locations: dict[str, Point] = {}
    for name, text in parse_table(entries, label).items():
        try:
            xyz = tuple(float(v) for v in text.split(","))
        except ValueError:
            raise ValueError(f"{label}: '{name}={text}' is not 'name=x,y,z'") from None
        if len(xyz) != 3 or not all(math.isfinite(v) for v in xyz):
            raise ValueError(f"{label}: '{name}={text}' needs three finite numbers")
        locations[name] = xyz  # type: ignore[assignment]
    return locations


def parse_conditions(entries: Sequence[str]) -> dict[str, Condition]:
    """`skill=condition` entries as a dict; ValueError on an unknown condition."""
    conditions: dict[str, Condition] = {}
    for skill, text in parse_table(entries, "skill_conditions").items():
        try:
            conditions[skill] = Condition(text)
        except ValueError:
            raise ValueError(f"skill_conditions: '{skill}={text}': condition must be one of "
                             f"{[c.value for c in Condition]}") from None
    return conditions


@dataclass(frozen=True)
class MonitorConfig:
    """What the monitor judges with (see the module docstring for each threshold's role)."""

    conditions: Mapping[str, Condition] = field(default_factory=lambda: {
        "pick": Condition.GRASP, "place": Condition.PLACE, "push": Condition.PUSH, "move_to": Condition.REACH})
    locations: Mapping[str, Point] = field(default_factory=dict)
    object_parameter: str = "object"
    target_parameter: str = "target"
    min_object_width_m: float = 0.005
    max_object_width_m: float = 0.065
    closed_command_m: float = 0.01
    grasp_settle_s: float = 0.5
    settle_tolerance_m: float = 0.001
    hold_confirm_s: float = 0.5
    release_margin_m: float = 0.01
    position_tolerance_m: float = 0.02
    place_tolerance_m: float = 0.05
    push_contact_m: float = 0.03
    push_loss_m: float = 0.06
    step_timeout_s: float = 60.0
    max_step_actions: int = 300
    max_vla_errors: int = 3
    stale_after_s: float = 2.0

    def validate(self) -> None:
        """ValueError naming the first inconsistent field."""
        if not self.conditions:
            raise ValueError("conditions: no skill has a success condition")
        for name in ("min_object_width_m", "max_object_width_m", "closed_command_m", "grasp_settle_s",
                     "settle_tolerance_m", "hold_confirm_s", "release_margin_m", "position_tolerance_m", "place_tolerance_m",
                     "push_contact_m", "push_loss_m", "step_timeout_s", "stale_after_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0.0:
                raise ValueError(f"{name}: {value} must be a finite non-negative number")
        if not 0.0 < self.min_object_width_m < self.max_object_width_m:
            raise ValueError(f"min_object_width_m: needs 0 < min_object_width_m ({self.min_object_width_m}) < "
                             f"max_object_width_m ({self.max_object_width_m})")
        if self.push_loss_m < self.push_contact_m:
            raise ValueError(f"push_loss_m: {self.push_loss_m} is below push_contact_m ({self.push_contact_m})")
        if self.step_timeout_s <= 0.0:
            raise ValueError("step_timeout_s: must be positive")
        if self.max_step_actions < 1 or self.max_vla_errors < 1:
            raise ValueError("max_step_actions and max_vla_errors: must be at least 1")


@dataclass(frozen=True)
class Observation:
    """What the executor knows at one control tick."""

    t: float                                  # monotonic time (s)
    gripper_m: Optional[float] = None         # measured gripper opening (m); None = not known yet
    ee_xyz: Optional[Point] = None            # end-effector position in the locations' frame (m)
    commanded_gripper_m: float = math.nan     # the latest gripper opening the executor commanded; NaN = none yet
    state_time: Optional[float] = None        # when the arm's latest state arrived (monotonic s); None = never
    image_time: Optional[float] = None        # when the latest camera image arrived


@dataclass(frozen=True)
class StepResult:
    """How a step ended."""

    success: bool
    failure: Failure
    detail: str
    actions: int
    elapsed_s: float


@dataclass(frozen=True)
class StepSpec:
    """A step the monitor judges: its skill, condition and the locations it refers to."""

    action: str
    condition: Condition
    object_name: str = ""
    target_name: str = ""
    object_xyz: Optional[Point] = None
    target_xyz: Optional[Point] = None


def describe_step(action: str, parameters: Mapping[str, Any]) -> str:
    """`pick(object=cup)`: a plan step as logs and context entries write it."""
    return f"{action}({', '.join(f'{k}={v}' for k, v in parameters.items())})"


def outcome_text(description: str, result: StepResult) -> str:
    """The history entry of an ended step (what the planner reads about it)."""
    verdict = "succeeded" if result.success else f"failed ({Failure(result.failure).label})"
    return f"{description} {verdict}: {result.detail} [{result.actions} actions, {result.elapsed_s:.1f} s]"


def distance(a: Sequence[float], b: Sequence[float]) -> float:
    """Euclidean distance of two points."""
    return math.dist(a, b)


def segment_distance(p: Sequence[float], a: Sequence[float], b: Sequence[float]) -> float:
    """Distance of point p from the segment a-b."""
    ab = [bi - ai for ai, bi in zip(a, b, strict=True)]
    length2 = sum(v * v for v in ab)
    if length2 == 0.0:
        return math.dist(p, a)
    s = sum((pi - ai) * v for pi, ai, v in zip(p, a, ab, strict=True)) / length2
    s = min(1.0, max(0.0, s))
    return math.dist(p, [ai + s * v for ai, v in zip(a, ab, strict=True)])


class GripperEvent(str, enum.Enum):
    """What the gripper did at one observation."""

    GRASPED = "grasped"        # closed and settled on something of plausible width
    EMPTY = "empty"            # closed and settled on nothing
    NOT_CLOSING = "not_closing"  # commanded closed, settled wide open
    SLIPPED = "slipped"        # was holding, the opening collapsed
    RELEASED = "released"      # was holding, commanded open


class GripperTracker:
    """The gripper's closed / holding state from the commanded and the measured opening, across steps."""

    def __init__(self, cfg: MonitorConfig):
        self.cfg = cfg
        self.closed = False           # the latest command closes the gripper
        self.judged = False           # the current close has been judged (grasped / empty / not closing)
        self.holding = False
        self.held_width = math.nan    # opening when the grasp was judged
        self.holding_since = math.nan
        self.last_motion_t = math.nan  # when the opening last moved more than settle_tolerance_m
        self.close_t = math.nan        # when the current close was commanded
        self.observed_from = math.nan  # when the first opening measured after the current close arrived
        self.ref_opening = math.nan
        self.opening = math.nan

    def update(self, t: float, command_m: float, opening_m: Optional[float],
               measured_t: Optional[float] = None) -> list[GripperEvent]:
        """Apply one tick's command and measurement; the events it caused.

        `measured_t` is when the measurement arrived (default `t`): a close is judged only on an opening
        measured `grasp_settle_s` after the close command and after the first measurement taken since it,
        so neither a late feedback stream nor a burst of samples sent before the gripper saw the command
        (a paused process catching up) can pass for a gripper that stays open.
        """
        events: list[GripperEvent] = []
        cfg = self.cfg
        measured_t = t if measured_t is None else measured_t
        if opening_m is not None and math.isfinite(opening_m):
            self.opening = opening_m
        if math.isfinite(command_m):
            closing = command_m <= cfg.closed_command_m
            if closing and not self.closed:
                self.judged = False
                self.last_motion_t, self.ref_opening = t, self.opening
                self.close_t, self.observed_from = t, math.nan
            elif not closing and self.closed:
                if self.holding:
                    events.append(GripperEvent.RELEASED)
                self.holding = False
            self.closed = closing
        if not self.closed or math.isnan(self.opening):
            return events
        if opening_m is not None and math.isnan(self.observed_from) and measured_t >= self.close_t:
            self.observed_from = measured_t
        if math.isnan(self.ref_opening) or abs(self.opening - self.ref_opening) > cfg.settle_tolerance_m:
            moved_t = measured_t if math.isnan(self.last_motion_t) else max(measured_t, self.last_motion_t)
            self.ref_opening, self.last_motion_t = self.opening, moved_t
        if self.holding:
            if self.opening < cfg.min_object_width_m:
                self.holding = False
                events.append(GripperEvent.SLIPPED)
        elif not self.judged and self._settled(measured_t):
            self.judged = True
            if self.opening < cfg.min_object_width_m:
                events.append(GripperEvent.EMPTY)
            elif self.opening > cfg.max_object_width_m:
                events.append(GripperEvent.NOT_CLOSING)
            else:
                self.holding, self.held_width, self.holding_since = True, self.opening, t
                events.append(GripperEvent.GRASPED)
        return events

    def _settled(self, measured_t: float) -> bool:
        """The opening was observed unmoved for `grasp_settle_s`, from a measurement taken after the close."""
        if math.isnan(self.observed_from):
            return False
        since = max(self.last_motion_t, self.observed_from)
        return measured_t - since >= self.cfg.grasp_settle_s - EPS_S


class StepMonitor:
    """Judges the executor's current step from observations, action counts and VLA errors."""

    def __init__(self, cfg: MonitorConfig):
        cfg.validate()
        self.cfg = cfg
        self.gripper = GripperTracker(cfg)
        self.step: Optional[StepSpec] = None
        self.started = 0.0
        self.actions = 0
        self.vla_errors = 0           # consecutive, in this step
        self.last_vla_error = ""
        self.contact = False          # push: the end effector has been on the object's path
        self.away = False             # push: the end effector has been away from the target during the step
        self.had_hold = False         # place: the gripper held an object during this step
        self.released_width = math.nan
        self.released = False

    # ---------------------------------------------------------------- steps

    def spec(self, action: str, parameters: Mapping[str, Any]) -> StepSpec:
        """The step as the monitor judges it; StepError when its skill has no condition or a needed location is unknown."""
        condition = self.cfg.conditions.get(action)
        if condition is None:
            raise StepError("unknown_skill", f"no success condition for skill '{action[:64]}' "
                            f"(known: {sorted(self.cfg.conditions)})")
        object_name = str(parameters.get(self.cfg.object_parameter, ""))
        target_name = str(parameters.get(self.cfg.target_parameter, ""))
        target_xyz = self.cfg.locations.get(target_name) if target_name else None
        if condition in NEEDS_TARGET and target_xyz is None:
            raise StepError("unknown_location", f"'{action}' needs a known '{self.cfg.target_parameter}' location, got "
                            f"'{target_name[:64]}' (known: {sorted(self.cfg.locations)})")
        return StepSpec(action, condition, object_name, target_name,
                        self.cfg.locations.get(object_name) if object_name else None, target_xyz)

    def start(self, step: StepSpec, t: float) -> None:
        """Begin judging `step` at time t (the gripper's state carries over from the step before)."""
        self.step = step
        self.started = t
        self.actions = 0
        self.vla_errors = 0
        self.last_vla_error = ""
        self.contact = False
        self.away = False
        self.had_hold = self.gripper.holding
        self.released = False
        self.released_width = math.nan

    def stop(self) -> None:
        """No step is being judged (the plan ended or was replaced)."""
        self.step = None

    @property
    def active(self) -> bool:
        """A step is being judged."""
        return self.step is not None

    # ---------------------------------------------------------------- inputs

    def action_sent(self) -> None:
        """One action went to the arm: counts towards the step budget; the VLA answered, so errors are no longer consecutive."""
        self.actions += 1
        self.vla_errors = 0

    def vla_error(self, t: float, detail: str) -> Optional[StepResult]:
        """One VLA error; the EXECUTOR failure once `max_vla_errors` came in a row."""
        if self.step is None:
            return None
        self.vla_errors += 1
        self.last_vla_error = detail
        if self.vla_errors >= self.cfg.max_vla_errors:
            return self._end(t, Failure.EXECUTOR, f"VLA failed {self.vla_errors} times in a row: {detail}")
        return None

    def preempt(self, t: float, detail: str) -> Optional[StepResult]:
        """The visual verifier saw the step contradicted: it ends now with FAILURE_PREEMPTED (None when idle)."""
        if self.step is None:
            return None
        return self._end(t, Failure.PREEMPTED, f"halted by the visual verifier: {detail}")

    def observe(self, obs: Observation) -> Optional[StepResult]:
        """Judge the current step at one tick; its result when it ended, else None."""
        events = self.gripper.update(obs.t, obs.commanded_gripper_m, obs.gripper_m, obs.state_time)
        step, cfg = self.step, self.cfg
        if step is None:
            return None
        stale = self._stale(obs)
        if stale:
            return self._end(obs.t, Failure.EXECUTOR, stale)
        gripper = self.gripper
        if GripperEvent.SLIPPED in events:
            return self._end(obs.t, Failure.DROP_SLIP, f"the object slipped: opening fell to {gripper.opening:.3f} m "
                             f"(held at {gripper.held_width:.3f} m, minimum {cfg.min_object_width_m:.3f} m)")
        if step.condition in (Condition.GRASP, Condition.PLACE):
            result = self._grasp_events(step, obs, events)
            if result is not None:
                return result
        if gripper.holding:
            self.had_hold = True
        result = self._condition(step, obs)
        if result is not None:
            return result
        if obs.t - self.started >= cfg.step_timeout_s - EPS_S:
            if self.actions == 0:  # the VLA never answered: not a skill that took too long, the executor failed it
                errors = f" ({self.vla_errors} errors in a row: {self.last_vla_error})" if self.vla_errors else ""
                return self._end(obs.t, Failure.EXECUTOR, f"no VLA answer within the step timeout of "
                                 f"{cfg.step_timeout_s:g} s{errors}")
            return self._end(obs.t, Failure.TIMEOUT, f"no success within the step timeout of {cfg.step_timeout_s:g} s")
        if self.actions >= cfg.max_step_actions:
            return self._end(obs.t, Failure.TIMEOUT, f"no success within the budget of {cfg.max_step_actions} actions")
        return None

    # ---------------------------------------------------------------- judging

    def _stale(self, obs: Observation) -> str:
        limit = self.cfg.stale_after_s
        for what, when in (("arm state", obs.state_time), ("camera image", obs.image_time)):
            since = max(self.started, when) if when is not None else self.started
            if obs.t - since > limit + EPS_S:
                return f"no {what} for {obs.t - since:.1f} s (limit {limit:g} s)"
        return ""

    def _grasp_events(self, step: StepSpec, obs: Observation, events: list[GripperEvent]) -> Optional[StepResult]:
        gripper, cfg = self.gripper, self.cfg
        if GripperEvent.EMPTY in events:
            return self._end(obs.t, Failure.GRASP, f"the gripper closed on nothing: opening {gripper.opening:.3f} m "
                             f"< {cfg.min_object_width_m:.3f} m")
        if GripperEvent.NOT_CLOSING in events:
            return self._end(obs.t, Failure.EXECUTOR, f"the gripper did not close: opening {gripper.opening:.3f} m "
                             f"> {cfg.max_object_width_m:.3f} m while commanded closed")
        if GripperEvent.RELEASED in events and step.condition == Condition.PLACE:
            if step.target_xyz is not None:
                if obs.ee_xyz is None:
                    return self._end(obs.t, Failure.EXECUTOR, "released without a known end-effector position")
                off = distance(obs.ee_xyz[:2], step.target_xyz[:2])
                if off > cfg.place_tolerance_m:
                    return self._end(obs.t, Failure.DROP_SLIP, f"released {off:.3f} m (horizontally) from "
                                     f"{step.target_name} (tolerance {cfg.place_tolerance_m:.3f} m)")
            self.released, self.released_width = True, gripper.held_width
        return None

    def _condition(self, step: StepSpec, obs: Observation) -> Optional[StepResult]:
        gripper, cfg = self.gripper, self.cfg
        if step.condition == Condition.GRASP:
            if gripper.holding and obs.t - gripper.holding_since >= cfg.hold_confirm_s - EPS_S:
                name = f"{step.object_name} " if step.object_name else "an object "
                return self._end(obs.t, Failure.NONE, f"holding {name}(opening {gripper.opening:.3f} m)")
            return None
        if step.condition == Condition.PLACE:
            if self.released and self.had_hold and gripper.opening >= self.released_width + cfg.release_margin_m:
                where = f" at {step.target_name}" if step.target_name else ""
                return self._end(obs.t, Failure.NONE, f"released {step.object_name or 'the object'}{where} "
                                 f"(opening {gripper.opening:.3f} m)")
            return None
        if obs.ee_xyz is None:
            return None
        off = distance(obs.ee_xyz, step.target_xyz)
        if step.condition == Condition.PUSH and step.object_xyz is not None:
            from_path = segment_distance(obs.ee_xyz, step.object_xyz, step.target_xyz)
            if from_path <= cfg.push_contact_m:
                self.contact = True
            elif self.contact and from_path > cfg.push_loss_m:
                return self._end(obs.t, Failure.CONTACT_LOSS, f"left the path of {step.object_name} to "
                                 f"{step.target_name} by {from_path:.3f} m (limit {cfg.push_loss_m:.3f} m)")
        if off > cfg.position_tolerance_m:
            self.away = True
        elif step.condition != Condition.PUSH or self.away:
            return self._end(obs.t, Failure.NONE, f"reached {step.target_name} ({off:.3f} m off)")
        return None

    def _end(self, t: float, failure: Failure, detail: str) -> StepResult:
        result = StepResult(failure == Failure.NONE, failure, detail, self.actions, max(0.0, t - self.started))
        self.step = None
        return result
