"""PushT (BRACE Table 32), as a world beside the CAN twin: a T block pushed by the closed gripper to a goal pose.

ROS-free. `PushTWorld` follows the twin's tool point (quasi-static pushing through `t_block`, contact loss, the
contact offset); `PushPolicy` is the /act stand-in that pushes the block by the part its instruction names. The
mechanics, success, contact loss, the offset and the stand-in's rules: docs/robot.md, "PushT on the twin".
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np

from brace_common.episode import (
    CONTACT_LOSSES,
    DURATION_S,
    GOAL_ERROR_DEG,
    GOAL_ERROR_M,
    PUSHES,
    EpisodeMetrics,
    failure_metrics,
)
from brace_common.planar import Pose2D, Vec, wrap_angle
from brace_common.vocabulary import Activity, Predicate
from brace_common.world_state import AgentActivity, Entity, Pose, Relation, WorldState

from ..pickfruit.twin_camera import TABLE_TOP_M
from .t_block import PARTS, TShape

Point = tuple[float, float, float]

WORLD = "pusht"
"""Episode.world and WorldState.world of PushT."""
BLOCK = "t_block"
"""The block's object name (plans, the verifier's catalogue)."""
GOAL = "goal"
"""The goal's location name (the executor's locations table, plans)."""
FINGER_BOTTOM_M = 0.013
"""How far the fingertips reach below the tool point (m; the twin's gripper geometry, scene_render.gripper_boxes)."""

SKILLS_TEXT = ("Skills: push(object, target, part) pushes the object along the table, pressing on its part (bar or "
               "stem), until it lies on the target turned to the target's orientation, or until pushing that part "
               "brings it no nearer. A push may lose contact with the object: then push again.")
"""The constraints entry of a PushT episode (what the planner may call)."""
INSTRUCTION_TEMPLATE = "push=push the {object} by its {part} to the {target}"
"""The executor's instruction template of a push (the run configurations' `instruction_templates`)."""


def task_text(block: str = BLOCK) -> str:
    """The task entry of a PushT episode."""
    return f"Push the {block.replace('_', ' ')} onto the {GOAL}."


def scene_text(lines: list[str]) -> str:
    """The state entry for the scene lines of `PushTWorld.describe`."""
    return "Scene: " + "; ".join(lines) + "."


@dataclass(frozen=True)
class PushTConfig:
    """The table, the block, the goal and the faults (metres, degrees, base_link)."""

    table_top_m: float = TABLE_TOP_M
    start_x_m: tuple[float, float] = (0.26, 0.34)          # where the block's centroid starts
    start_y_m: tuple[float, float] = (-0.10, -0.03)
    start_yaw_deg: tuple[float, float] = (-50.0, 50.0)     # from the goal's yaw
    goal: tuple[float, float, float] = (0.31, 0.08, 0.0)   # x, y (m), yaw (deg)
    goal_tolerance_m: float = 0.02
    goal_tolerance_deg: float = 15.0
    friction: float = 0.5                                  # pusher-block friction coefficient
    pusher_radius_m: float = 0.008                         # the closed fingertips, seen from above
    contact_loss_probability: float = 0.1                  # per contact: the fingertips ride over the edge ...
    loss_after_m: tuple[float, float] = (0.004, 0.015)     # ... after pushing this far
    hover_z_m: float = 0.19                                # the goal location's height: the tool over the goal

    def __post_init__(self) -> None:
        if not 0.0 <= self.contact_loss_probability <= 1.0:
            raise ValueError(f"contact_loss_probability must be in [0, 1], got {self.contact_loss_probability}")
        for name in ("goal_tolerance_m", "goal_tolerance_deg", "pusher_radius_m"):
            if not getattr(self, name) > 0.0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.friction < 0.0:
            raise ValueError(f"friction must be non-negative, got {self.friction}")

    @property
    def goal_pose(self) -> Pose2D:
        """The goal as a planar pose (yaw in rad)."""
        return Pose2D(self.goal[0], self.goal[1], math.radians(self.goal[2]))

    @property
    def goal_location(self) -> Point:
        """The executor's `goal` location: over the goal at the hover height."""
        return (self.goal[0], self.goal[1], self.hover_z_m)


@dataclass
class PushCounts:
    """What happened in an episode (the world's view)."""

    pushes: int = 0            # contacts made
    contact_losses: int = 0


@dataclass(frozen=True)
class GoalError:
    """How far the block is from the goal pose."""

    distance_m: float
    yaw_deg: float

    def within(self, tolerance_m: float, tolerance_deg: float) -> bool:
        """Inside both tolerances."""
        return self.distance_m <= tolerance_m and abs(self.yaw_deg) <= tolerance_deg


class PushTWorld:
    """The PushT table; thread-safe (the twin's thread calls `grasp`, the node and the policy read)."""

    def __init__(self, config: PushTConfig = PushTConfig(), shape: Optional[TShape] = None) -> None:
        self.config = config
        self.shape = shape or TShape()
        self.lock = threading.Lock()
        self.block = config.goal_pose
        self.task: tuple[str, ...] = ()
        self.episodes = 0                   # resets so far: the policy starts over when it changes
        self.counts = PushCounts()
        self.rng = random.Random(0)
        self.lost = False                   # the current contact was lost: the policy believes it is done
        self._pusher: Optional[Vec] = None  # the fingertips' last position while below the block's top
        self._touching = False
        self._riding = False                # on or over the block: pushes nothing until off its outline
        self._loss_after: Optional[float] = None
        self._pushed_m = 0.0
        self._anchor: Optional[Vec] = None  # where the low fingertips last pushed the block, or came down

    def reset(self, seed: int) -> tuple[str, ...]:
        """A new episode: the block at a seeded pose away from the goal; returns the task's objects."""
        cfg = self.config
        rng = random.Random(seed)
        goal = cfg.goal_pose
        with self.lock:
            self.rng = rng
            self.block = Pose2D(rng.uniform(*cfg.start_x_m), rng.uniform(*cfg.start_y_m),
                                    wrap_angle(goal.yaw + math.radians(rng.uniform(*cfg.start_yaw_deg))))
            self.task = (BLOCK,)
            self.episodes += 1
            self.counts = PushCounts()
            self.lost, self._pusher, self._touching, self._riding = False, None, False, False
            self._loss_after, self._pushed_m, self._anchor = None, 0.0, None
            return self.task

    # ------------------------------------------------------------------ the twin's hook

    def grasp(self, tool: Point, gripper_m: float) -> Optional[float]:
        """Advance the world to the tool point (the twin's hook); the gripper never closes on the block (None)."""
        cfg = self.config
        with self.lock:
            low = self._low(tool)
            now = (tool[0], tool[1])
            if not low:
                self._pusher, self._touching, self._riding, self._anchor = None, False, False, None
                return None
            inside = self.shape.contact(self.block.to_block(now)).distance < cfg.pusher_radius_m
            if self._pusher is None:                 # came down here: onto the block if over it
                self._pusher, self._riding, self._anchor = now, inside, now
                return None
            if self._riding:
                self._riding = inside
                self._pusher = now
                return None
            block, touched = self.shape.push(self.block, self._pusher, now, cfg.pusher_radius_m, cfg.friction)
            self._pusher = now
            if touched and not self._touching:
                self._new_contact()
            if touched:
                self._anchor = now
                self._pushed_m += math.dist(self.block.to_world((0, 0)), block.to_world((0, 0))) + \
                    abs(wrap_angle(block.yaw - self.block.yaw)) * self.shape.c
                self.block = block
                if self._loss_after is not None and self._pushed_m >= self._loss_after:
                    self._riding, self.lost, self._loss_after = True, True, None   # rides over the edge
                    self.counts.contact_losses += 1
            self._touching = touched
            return None

    def _low(self, tool: Point) -> bool:
        return tool[2] - FINGER_BOTTOM_M < self.config.table_top_m + self.shape.height_m

    def _new_contact(self) -> None:
        cfg = self.config
        self.counts.pushes += 1
        self._pushed_m = 0.0
        self._loss_after = self.rng.uniform(*cfg.loss_after_m) if self.rng.random() < cfg.contact_loss_probability \
            else None

    def recover(self) -> None:
        """The policy starts over (a new step): the lost contact is forgotten."""
        with self.lock:
            self.lost = False

    # ------------------------------------------------------------------ reading the world

    def contact_offset_m(self, tool: Point) -> float:
        """How far the fingertips have slid along the table (m, horizontally) since they last pushed the block or came
        down below its top; NaN while they are above it."""
        with self.lock:
            if self._anchor is None or not self._low(tool):
                return math.nan
            return math.dist(self._anchor, (tool[0], tool[1]))

    def pose(self) -> Pose2D:
        """The block's pose now."""
        with self.lock:
            return self.block

    def goal_error(self) -> GoalError:
        """The block's distance and yaw from the goal pose."""
        block, goal = self.pose(), self.config.goal_pose
        return GoalError(math.hypot(block.x - goal.x, block.y - goal.y),
                         math.degrees(wrap_angle(block.yaw - goal.yaw)))

    def success(self) -> bool:
        """The block lies on the goal within both tolerances."""
        cfg = self.config
        return bool(self.task) and self.goal_error().within(cfg.goal_tolerance_m, cfg.goal_tolerance_deg)

    def delivered(self) -> int:
        """1 when the block is on the goal."""
        return int(self.success())

    def describe(self) -> list[str]:
        """The scene as a perception module would report it (positions to the centimetre, yaw to 5 degrees)."""
        block, error = self.pose(), self.goal_error()
        gx, gy, gyaw = self.config.goal
        return [f"{BLOCK} on the table at x={block.x:.2f} y={block.y:.2f} yaw={_deg5(math.degrees(block.yaw))}",
                f"{GOAL} at x={gx:.2f} y={gy:.2f} yaw={_deg5(gyaw)}",
                f"{BLOCK} is {error.distance_m:.2f} m and {abs(_deg5(error.yaw_deg))} deg from the {GOAL}"]


def _deg5(deg: float) -> int:
    return int(5 * round(deg / 5.0))


def episode_metrics(world: PushTWorld, duration_s: float, steps: int, failures: Mapping[str, int]) -> EpisodeMetrics:
    """PushT's verdict on an episode with Table 32's measurements: duration, pushes, contact losses, the goal error
    at the verdict and failed steps by category."""
    error = world.goal_error()
    measured = {DURATION_S: round(duration_s, 2), PUSHES: world.counts.pushes,
                CONTACT_LOSSES: world.counts.contact_losses, GOAL_ERROR_M: round(error.distance_m, 4),
                GOAL_ERROR_DEG: round(abs(error.yaw_deg), 2), **failure_metrics(failures)}
    return EpisodeMetrics(success=world.success(), steps=steps, delivered=world.delivered(), tasks=len(world.task),
                          metrics=measured)


def world_state(world: PushTWorld, episode: int, step: int, activity: AgentActivity, tool: Point,
                gripper_m: float) -> WorldState:
    """The PushT table as a scene graph, poses in base_link (m).

    Entities: the arm (its pose is the tool point; gripper_m), the block (state on_goal or on_table; its planar
    pose; goal_error_m, goal_error_deg), the goal (a place with the goal's pose and tolerances), the table and the
    task (open, done). Relations: block on table, arm assigned task, task concerns block, task target goal. The arm's
    activity carries the contact offset as its tracking error while it executes a step.
    """
    arm = activity.agent_id
    if activity.activity == Activity.EXECUTING:
        activity = replace(activity, tracking_error=world.contact_offset_m(tool))
    cfg = world.config
    block, error = world.pose(), world.goal_error()
    z = cfg.table_top_m + world.shape.height_m / 2
    done = world.success()
    entities = [Entity(arm, "arm", "", Pose(*map(float, tool)), {"gripper_m": f"{gripper_m:.4f}"}),
                Entity(BLOCK, "block", "on_goal" if done else "on_table", Pose.planar(block.x, block.y, z, block.yaw),
                       {"goal_error_m": f"{error.distance_m:.4f}", "goal_error_deg": f"{abs(error.yaw_deg):.2f}"}),
                Entity(GOAL, "place", "", Pose.planar(cfg.goal[0], cfg.goal[1], cfg.table_top_m,
                                                      math.radians(cfg.goal[2])),
                       {"tolerance_m": f"{cfg.goal_tolerance_m:g}", "tolerance_deg": f"{cfg.goal_tolerance_deg:g}"}),
                Entity("table", "table"),
                Entity(f"task_{BLOCK}", "task", "done" if done else "open", attributes={"text": task_text()})]
    relations = [Relation(BLOCK, Predicate.ON, "table"), Relation(arm, Predicate.ASSIGNED, f"task_{BLOCK}"),
                 Relation(f"task_{BLOCK}", Predicate.CONCERNS, BLOCK), Relation(f"task_{BLOCK}", Predicate.TARGET, GOAL)]
    return WorldState(WORLD, episode, step, tuple(entities), tuple(relations), (activity,))


# ---------------------------------------------------------------------- the /act stand-in


@dataclass(frozen=True)
class PushPolicyConfig:
    """How the stand-in pushes: heights, step sizes and the look-ahead."""

    max_step_m: float = 0.02          # per action (the executor scales and limits again)
    push_step_m: float = 0.01         # per action while in contact (slower: quasi-static)
    push_z_m: float = 0.11            # the tool's height while pushing (fingertips just above the table)
    transit_z_m: float = 0.16         # the tool's height between contacts (fingertips above the block)
    standoff_m: float = 0.012         # the pre-contact point: this far out from the outline
    push_length_m: float = 0.02       # one push: this far past the contact
    tolerance_m: float = 0.004        # a waypoint is reached within this
    stall_calls: int = 8              # the tool moved less than 1 mm in this many calls: the waypoint is out of reach
    reach_m: tuple[float, float] = (0.22, 0.45)   # pushes only where the tool is this far from the base, horizontally


@dataclass(frozen=True)
class Segment:
    """One push: the contact in the block's frame, its outward normal, and where the tool starts and stops."""

    contact: Vec
    normal: Vec
    start: Vec
    end: Vec


@dataclass
class PushPolicy:
    """The `/act` stand-in: instruction + world + the tool point -> a 7-D action (dxyz m, drpy rad, gripper 1 open)."""

    world: PushTWorld
    tool: Callable[[], Point]
    config: PushPolicyConfig = field(default_factory=PushPolicyConfig)
    segment: Optional[Segment] = None
    pushing: bool = False
    blocked: set = field(default_factory=set)      # contacts whose waypoints the arm did not reach (this episode)
    episode: int = -1
    last_tool: Optional[Point] = None
    still: int = 0
    anew: bool = False                              # the instruction was given anew: start over at the next call
    instruction: str = ""                           # the instruction being followed (lower case)
    part: Optional[str] = None                      # the part it names (PARTS), None: any
    pushes: int = 0                                 # pushes completed since the instruction was given
    spent: bool = False                             # the named part brings the block no nearer: over the goal

    def __call__(self, image: np.ndarray, instruction: str, unnorm_key: str = "") -> np.ndarray:
        """The action for `instruction` now; ValueError when it does not ask to push the block."""
        text = instruction.lower().replace("_", " ")
        if "push" not in text or BLOCK.replace("_", " ") not in text:
            raise ValueError(f"not a push of the {BLOCK.replace('_', ' ')}: {instruction!r}")
        tool = self.tool()
        if self.anew or text != self.instruction:
            if self.anew:
                self.world.recover()
            self.anew, self.segment, self.pushing = False, None, False
            self.instruction, self.part, self.pushes, self.spent = text, instruction_part(text), 0, False
        self._follow(tool)
        target, step = self._target(tool)
        delta = np.subtract(target, tool)
        norm = float(np.linalg.norm(delta))
        if norm > step:
            delta = delta * (step / norm)
        return np.array([*delta, 0.0, 0.0, 0.0, 0.0], dtype=np.float64)     # the gripper stays closed

    def start_over(self) -> None:
        """The executor gave the instruction anew (a new step, or a repair of the running one): the next call forgets
        the contact it was pushing and a lost contact, and chooses again (thread-safe: the server's thread calls)."""
        self.anew = True

    def _follow(self, tool: Point) -> None:
        """Start over in a new episode; give up a segment whose waypoints the arm does not reach (the twin's inverse
        kinematics refuses some from some joint configurations: the arm then holds where it is)."""
        if self.world.episodes != self.episode:
            self.episode, self.segment, self.pushing, self.blocked = self.world.episodes, None, False, set()
            self.pushes, self.spent = 0, False
        moved = self.last_tool is None or math.dist(tool, self.last_tool) >= 0.001
        self.last_tool = tool
        self.still = 0 if moved else self.still + 1
        if self.still >= self.config.stall_calls and self.segment is not None:
            self.blocked.add(self.segment.contact)
            self.segment, self.pushing, self.still = None, False, 0

    def _target(self, tool: Point) -> tuple[Point, float]:
        cfg, world = self.config, self.world
        over_goal = world.config.goal_location
        if world.lost:
            if math.dist(tool, over_goal) <= 0.02:     # arrived where it believed the block went: a new step starts
                world.recover()
                self.segment, self.pushing = None, False
            elif math.dist(tool[:2], over_goal[:2]) > cfg.tolerance_m:   # pushing nothing along the table to it
                return (over_goal[0], over_goal[1], cfg.push_z_m), cfg.push_step_m
            else:
                return over_goal, cfg.max_step_m
        half = GoalError(world.config.goal_tolerance_m / 2, world.config.goal_tolerance_deg / 2)
        if world.goal_error().within(half.distance_m, half.yaw_deg):
            self.segment, self.pushing = None, False
            return self._travel(tool, over_goal), cfg.max_step_m
        if self.segment is None and not self.spent:
            self.segment, self.pushing = self._choose(), False
            self.spent = self.segment is None
        if self.spent:                              # the named part brings the block no nearer: done, it believes
            return self._travel(tool, over_goal), cfg.max_step_m
        seg = self.segment
        if self.pushing:
            end = (*seg.end, cfg.push_z_m)
            if math.dist(tool, end) <= cfg.tolerance_m:
                self.segment, self.pushing = None, False
                self.pushes += 1
                return self._target(tool)
            return end, cfg.push_step_m
        start = (*seg.start, cfg.push_z_m)
        if math.dist(tool, start) <= cfg.tolerance_m:
            self.pushing = True
            return (*seg.end, cfg.push_z_m), cfg.push_step_m
        return self._travel(tool, start), cfg.max_step_m

    def _travel(self, tool: Point, to: Point) -> Point:
        """The next waypoint toward `to`: up to the transit height, across, then down."""
        cfg = self.config
        if math.dist(tool[:2], to[:2]) <= cfg.tolerance_m:
            return to
        if tool[2] < cfg.transit_z_m - cfg.tolerance_m:
            return (tool[0], tool[1], cfg.transit_z_m)
        return (to[0], to[1], max(cfg.transit_z_m, to[2]))

    def _choose(self) -> Optional[Segment]:
        """The next push: on the named part, while it brings the block nearer the goal (the first one regardless);
        None when the part is spent."""
        cfg, world = self.config, self.world
        found = best_push(world, cfg, self.part, self.blocked)
        if found is None and self.blocked:      # every reachable contact was given up once: try them again
            self.blocked.clear()
            found = best_push(world, cfg, self.part, self.blocked)
        if found is None and self.part is not None and not self.pushes:    # no reachable contact on it: any
            found = best_push(world, cfg, None, self.blocked)
        if found is None:
            if self.part is None:
                raise RuntimeError("no contact on the block's outline can be pushed within the arm's reach")
            return None
        score, segment = found
        if self.part is not None and self.pushes and score > (1.0 - MIN_GAIN) * pose_cost(world, world.pose()):
            return None
        return segment


MIN_GAIN = 0.01
"""A push on a named part goes on while it would lower the block's pose cost by at least this fraction."""


def instruction_part(text: str) -> Optional[str]:
    """The part of the block an instruction names (PARTS), or None."""
    words = set(text.lower().replace("_", " ").replace(",", " ").replace(".", " ").split())
    named = [part for part in PARTS if part in words]
    return named[0] if len(named) == 1 else None


def pose_cost(world: PushTWorld, pose: Pose2D) -> float:
    """How far `pose` is from the goal pose, each axis in units of its tolerance, squared and summed."""
    cfg, goal = world.config, world.config.goal_pose
    d = math.hypot(pose.x - goal.x, pose.y - goal.y) / cfg.goal_tolerance_m
    a = math.degrees(wrap_angle(pose.yaw - goal.yaw)) / cfg.goal_tolerance_deg
    return d * d + a * a


def best_push(world: PushTWorld, config: PushPolicyConfig, part: Optional[str] = None,
              blocked: frozenset | set = frozenset()) -> Optional[tuple[float, Segment]]:
    """The contact (on `part`, any when None; not in `blocked`) whose push, simulated `push_length_m` ahead, leaves
    the block nearest the goal pose, with that pose's cost; None when no contact within the arm's reach moves it."""
    wcfg, shape = world.config, world.shape
    block = world.pose()
    radius = wcfg.pusher_radius_m
    best: Optional[tuple[float, Segment]] = None
    for point, normal in shape.outline():
        if point in blocked or (part is not None and shape.part(point) != part):
            continue
        out = (point[0] + normal[0] * (radius + config.standoff_m), point[1] + normal[1] * (radius + config.standoff_m))
        if shape.contact(out).distance < radius + 0.5 * config.standoff_m:    # a notch: no room to approach
            continue
        past = config.standoff_m + config.push_length_m
        end = (out[0] - normal[0] * past, out[1] - normal[1] * past)
        start_w, end_w = block.to_world(out), block.to_world(end)
        if not all(config.reach_m[0] <= math.hypot(*p) <= config.reach_m[1] for p in (start_w, end_w)):
            continue                          # near the base the arm cannot get down to the table (twin's IK)
        after, touched = shape.push(block, start_w, end_w, radius, wcfg.friction)
        if not touched:
            continue
        score = pose_cost(world, after)
        if best is None or score < best[0]:
            best = (score, Segment(point, normal, start_w, end_w))
    return best


def oracle_part(world: PushTWorld, config: PushPolicyConfig = PushPolicyConfig()) -> Optional[str]:
    """The part the stand-in would push now if free to choose (the planner's label); None when nothing is to push."""
    found = best_push(world, config)
    return world.shape.part(found[1].contact) if found is not None else None
