"""What the isaac_bridge tells the rest of the stack: context entries and the episode's verdict. ROS-free.

Blocks follow the planner's context layout as sim_bridges.warehouse.warehouse_feed does for the
warehouse: the scene, each robot's task and the constraints (its skills, the
named poses) open an episode (protected); each robot's latest observation is
its state (protected); a reached task goal is a task_done entry (protected);
step outcomes and failure traces are history (prunable).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from brace_common.action_schema import Step
from brace_common.episode import MIN_DISTANCE_M, PATH_EFFICIENCY, EpisodeMetrics
from brace_common.vocabulary import Activity, Block, EntryKind, Observability, Predicate
from brace_common.world_feed import FeedEntry
from brace_common.world_state import AgentActivity, Entity, Pose, Relation, WorldState, parameters_text

from ..warehouse.warehouse_world import SUPERVISOR
from .isaac_config import TaskGoal
from .isaac_contract import RobotKind, RobotSpec, RobotState
from .isaac_skills import MOVE_JOINTS, WAIT, Outcome, RobotExecutor, SkillSchema, joint_error


def episode_entries(robots: list[RobotSpec], tasks: list[tuple[str, str]], goals: list[TaskGoal],
                    constraints: list[str], schema: SkillSchema, poses: dict[str, tuple[float, ...]],
                    frame_id: str) -> list[FeedEntry]:
    """The scene, every robot's task (and goal), and the constraints, at episode start."""
    scene = ", ".join(f"{r.name} ({'mobile base' if r.kind == RobotKind.MOBILE else 'arm'})" for r in robots)
    out = [FeedEntry(SUPERVISOR, 0, Block.TASK, EntryKind.TASK.value,
                     f"Isaac Sim scene with {len(robots)} robots: {scene}. Positions in frame {frame_id} (m).")]
    goal_of = {g.robot: g for g in goals}
    for robot, text in tasks:
        goal = f" Done when {goal_of[robot].text()}." if robot in goal_of else ""
        out.append(FeedEntry(robot, 0, Block.TASK, EntryKind.TASK.value, f"{robot} must {text.rstrip('.')}.{goal}"))
    for robot in robots:
        skills = ", ".join(schema.signature(s) for s in schema.skills_of(robot.kind))
        text = f"{robot.name} may call {skills or 'nothing'}"
        if robot.kind == RobotKind.ARM and MOVE_JOINTS in schema.skills_of(robot.kind):
            text += f"; pose is one of {', '.join(p for p in schema.pose_choices() if p in poses)}"
        out.append(FeedEntry(robot.name, 0, Block.CONSTRAINTS, EntryKind.CONSTRAINT.value, text + "."))
    out += [FeedEntry(SUPERVISOR, 0, Block.CONSTRAINTS, EntryKind.CONSTRAINT.value, c) for c in constraints]
    return out


def nearest_pose(joints: tuple[float, ...], poses: dict[str, tuple[float, ...]]) -> tuple[str, float]:
    """The named pose closest to `joints` (largest joint difference) and that difference; ('', inf) for none."""
    best = ("", math.inf)
    for name, target in poses.items():
        error = joint_error(joints, target)
        if error < best[1]:
            best = (name, error)
    return best


def observation_text(robot: RobotSpec, state: RobotState, current: Optional[Step],
                     poses: dict[str, tuple[float, ...]]) -> str:
    """A robot's observation as the planner reads it."""
    if robot.kind == RobotKind.MOBILE and state.base is not None:
        b = state.base
        where = (f"at ({b.pose.x:.2f}, {b.pose.y:.2f}) heading {math.degrees(b.pose.yaw):.0f} deg, "
                 f"{'moving' if abs(b.linear) > 0.02 or abs(b.angular) > 0.02 else 'still'}")
    elif robot.kind == RobotKind.ARM and state.joints is not None:
        name, error = nearest_pose(state.joints, poses)
        where = f"joints near pose {name} (within {error:.2f} rad)" if name else "joints measured"
    else:
        where = "no state yet"
    camera = f", {state.camera.text()}" if robot.camera else ""
    return f"{robot.name} {where}{camera}, next {current.text() if current else 'no plan'}"


def observation_entry(robot: RobotSpec, state: RobotState, current: Optional[Step],
                      poses: dict[str, tuple[float, ...]], step: int) -> FeedEntry:
    """A robot's latest observation as its state entry."""
    return FeedEntry(robot.name, step, Block.STATE, EntryKind.OBSERVATION.value,
                     observation_text(robot, state, current, poses))


def outcome_entry(outcome: Outcome, step: int) -> FeedEntry:
    """A finished step (action_outcome) or a failed one (failure_trace), as history."""
    kind = EntryKind.ACTION_OUTCOME if outcome.success else EntryKind.FAILURE_TRACE
    verdict = "done" if outcome.success else f"FAILED ({outcome.failure.label})"
    return FeedEntry(outcome.agent_id, step, Block.HISTORY, kind.value,
                     f"{outcome.agent_id} {outcome.call.text()} {verdict}: {outcome.detail}")


def task_done_entry(goal: TaskGoal, step: int) -> FeedEntry:
    """A robot reached its task goal."""
    return FeedEntry(goal.robot, step, Block.TASK, EntryKind.TASK_DONE.value, f"task done: {goal.robot} {goal.text()}")


@dataclass
class EpisodeJudge:
    """Which task goals were reached, when the episode ends, and its metrics."""

    goals: list[TaskGoal]
    poses: dict[str, tuple[float, ...]]
    goal_tolerance_m: float
    joint_tolerance_rad: float
    max_episode_s: float
    started: float = 0.0                                   # ROS time of the start
    reached: dict[str, float] = field(default_factory=dict)  # robot -> ROS time its goal was first reached
    travelled: dict[str, float] = field(default_factory=dict)
    start_xy: dict[str, tuple[float, float]] = field(default_factory=dict)
    last_xy: dict[str, tuple[float, float]] = field(default_factory=dict)
    min_distance: float = math.inf                          # closest two robots came (m)

    def reached_goal(self, goal: TaskGoal, state: RobotState) -> bool:
        """Whether `state` satisfies `goal`."""
        if goal.position is not None:
            return state.base is not None and math.dist((state.base.pose.x, state.base.pose.y),
                                                        goal.position) <= self.goal_tolerance_m
        return state.joints is not None and joint_error(state.joints, self.poses[goal.pose]) <= self.joint_tolerance_rad

    def update(self, now: float, robot: str, state: RobotState) -> Optional[TaskGoal]:
        """Account `robot`'s state at ROS time `now`; its goal when this state reached it for the first time."""
        if state.base is not None:
            xy = (state.base.pose.x, state.base.pose.y)
            self.start_xy.setdefault(robot, xy)
            self.travelled[robot] = self.travelled.get(robot, 0.0) + math.dist(self.last_xy.get(robot, xy), xy)
            self.last_xy[robot] = xy
        for goal in self.goals:
            if goal.robot == robot and robot not in self.reached and self.reached_goal(goal, state):
                self.reached[robot] = now
                return goal
        return None

    def record_positions(self, positions: dict[str, tuple[float, float]]) -> None:
        """Every robot's position now (a base's from odometry, an arm's base): the closest pair so far."""
        points = list(positions.values())
        for i, a in enumerate(points):
            for b in points[i + 1:]:
                self.min_distance = min(self.min_distance, math.dist(a, b))

    def success(self) -> bool:
        """Every goal reached (an episode without goals never succeeds: it runs until max_episode_s)."""
        return bool(self.goals) and all(g.robot in self.reached for g in self.goals)

    def finished(self, now: float) -> bool:
        """Every goal reached, or the episode ran `max_episode_s`."""
        return self.success() or now - self.started >= self.max_episode_s

    def metrics(self, steps: int) -> EpisodeMetrics:
        """The episode's metrics: path efficiency = straight-line / travelled distance of the bases with a goal
        (mean; 0 unless successful); min_distance_m = the closest two robots came (absent with one robot)."""
        ratios = []
        for g in self.goals:
            if g.position is not None and g.robot in self.start_xy:
                shortest = math.dist(self.start_xy[g.robot], g.position)
                travelled = self.travelled.get(g.robot, 0.0)
                ratios.append(1.0 if travelled <= shortest or travelled < 1e-9 else shortest / travelled)
        efficiency = sum(ratios) / len(ratios) if ratios and self.success() else 0.0
        measured = {PATH_EFFICIENCY: efficiency}
        if math.isfinite(self.min_distance):
            measured[MIN_DISTANCE_M] = self.min_distance
        return EpisodeMetrics(success=self.success(), steps=steps, delivered=len(self.reached), tasks=len(self.goals),
                              metrics=measured)


def _activity(name: str, executor: RobotExecutor, held: bool) -> AgentActivity:
    call = executor.current
    if call is None:
        return AgentActivity(name, Activity.IDLE, index=executor.cursor, plan_steps=len(executor.plan))
    kind = Activity.BLOCKED if held else Activity.WAITING if call.action == WAIT else Activity.EXECUTING
    return AgentActivity(name, kind, call.action, parameters_text(call.parameters), executor.cursor, len(executor.plan))


def world_state(world: str, episode: int, step: int, robots: dict[str, RobotSpec], states: dict[str, RobotState],
                executors: dict[str, RobotExecutor], held: dict[str, bool], goals: list[TaskGoal],
                reached: dict[str, float], poses: dict[str, tuple[float, ...]]) -> WorldState:
    """The Isaac scene as far as the bridge reads it: the robots and their tasks (PARTIAL: objects of the
    Isaac stage are not on the contract's topics, so they are not in the state).

    A base's pose comes from its odometry (none before the first sample), an arm's is its base; an arm's state is
    the named pose its joints are nearest to. A robot with stale inputs is BLOCKED. Each robot with a goal has a
    task entity (open, done; a base's goal position as its pose) and an `assigned` relation.
    """
    entities: list[Entity] = []
    relations: list[Relation] = []
    for name, spec in robots.items():
        state = states.get(name, RobotState())
        attributes = {"kind": spec.kind.value}
        pose, label = None, ""
        if spec.kind == RobotKind.MOBILE and state.base is not None:
            b = state.base
            pose = Pose.planar(b.pose.x, b.pose.y, yaw=b.pose.yaw)
            attributes.update(linear_mps=f"{b.linear:.3f}", angular_radps=f"{b.angular:.3f}")
            label = "moving" if abs(b.linear) > 0.02 or abs(b.angular) > 0.02 else "still"
        elif spec.kind == RobotKind.ARM:
            pose = Pose.planar(spec.origin.x, spec.origin.y, yaw=spec.origin.yaw)
            if state.joints is not None:
                label = nearest_pose(state.joints, poses)[0] or "measured"
                attributes["joints_rad"] = ", ".join(f"{q:.3f}" for q in state.joints)
        if spec.camera:
            attributes["camera"] = state.camera.text()
        entities.append(Entity(name, "robot", label or "unknown", pose, attributes))
    for goal in goals:
        task = f"task_{goal.robot}"
        pose = Pose.planar(*goal.position) if goal.position is not None else None
        entities.append(Entity(task, "task", "done" if goal.robot in reached else "open", pose,
                               {"text": f"{goal.robot} {goal.text()}"}))
        if goal.robot in robots:
            relations.append(Relation(goal.robot, Predicate.ASSIGNED, task))
    return WorldState(world, episode, step, tuple(entities), tuple(relations),
                      tuple(_activity(n, executors[n], held.get(n, False)) for n in robots if n in executors),
                      Observability.PARTIAL)
