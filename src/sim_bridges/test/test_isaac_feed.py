"""What the isaac_bridge tells the stack: context entries and the episode's verdict (no ROS)."""

from __future__ import annotations

import math
from pathlib import Path

from brace_common.action_schema import Step
from brace_common.planar import Pose2D
from brace_common.vocabulary import Activity, Block, EntryKind, Failure, Observability
from brace_common.world_state import AgentActivity, Pose, Relation
from sim_bridges.isaac.isaac_config import TaskGoal
from sim_bridges.isaac.isaac_contract import BaseState, CameraStatus, RobotKind, RobotSpec, RobotState
from sim_bridges.isaac.isaac_feed import (
    EpisodeJudge,
    episode_entries,
    observation_text,
    outcome_entry,
    task_done_entry,
    world_state,
)
from sim_bridges.isaac.isaac_skills import ExecLimits, Outcome, RobotExecutor, SkillSchema

SCHEMA = SkillSchema.load(Path(__file__).resolve().parents[1] / "config" / "isaac_actions.yaml")
POSES = {"home": (0.0, 0.0), "ready": (1.0, -0.5), "extended": (0.5, 0.5)}
CARTER = RobotSpec("carter_1", RobotKind.MOBILE, camera=True)
FRANKA = RobotSpec("franka_1", RobotKind.ARM, origin=Pose2D(1.5, -1.0, 0.0))
GOALS = [TaskGoal("carter_1", position=(3.0, 1.0)), TaskGoal("franka_1", pose="ready")]


def base(x: float, y: float, v: float = 0.0) -> RobotState:
    return RobotState(base=BaseState(Pose2D(x, y, 0.0), v, 0.0))


def test_an_episode_opens_with_the_scene_tasks_and_each_robots_skills():
    entries = episode_entries([CARTER, FRANKA], [("carter_1", "drive to the bay."), ("franka_1", "get ready")], GOALS,
                              ["Keep clear of the arm."], SCHEMA, POSES, "world")
    by_kind = {(e.agent_id, e.block, e.kind): e.text for e in entries}
    assert "carter_1 (mobile base), franka_1 (arm)" in by_kind[("supervisor", Block.TASK, EntryKind.TASK.value)]
    assert by_kind[("carter_1", Block.TASK, "task")] == "carter_1 must drive to the bay. Done when at (3, 1)."
    assert by_kind[("franka_1", Block.TASK, "task")] == "franka_1 must get ready. Done when at pose ready."
    assert by_kind[("carter_1", Block.CONSTRAINTS, "constraint")] == \
        "carter_1 may call move_to(x, y), stop(), wait(seconds)."
    assert "pose is one of home, ready, extended" in by_kind[("franka_1", Block.CONSTRAINTS, "constraint")]
    assert by_kind[("supervisor", Block.CONSTRAINTS, "constraint")] == "Keep clear of the arm."


def test_observations_read_the_robots_state_camera_and_next_skill():
    carter = base(1.234, -0.5, v=0.4)
    carter.camera = CameraStatus(width=640, height=480, images=12)
    text = observation_text(CARTER, carter, Step("move_to", {"x": 3.0, "y": 1.0}), POSES)
    assert text == ("carter_1 at (1.23, -0.50) heading 0 deg, moving, camera 640x480, 12 images, "
                    "next move_to(x=3.0, y=1.0)")
    arm = observation_text(FRANKA, RobotState(joints=(0.98, -0.5)), None, POSES)
    assert arm == "franka_1 joints near pose ready (within 0.02 rad), next no plan"
    assert observation_text(CARTER, RobotState(), None, POSES).startswith("carter_1 no state yet, camera: no image")


def test_outcomes_are_history_and_a_reached_goal_is_a_task_entry():
    failed = Outcome("carter_1", "p", 0, Step("move_to", {"x": 3.0, "y": 1.0}), False, Failure.TIMEOUT, "stuck")
    entry = outcome_entry(failed, 7)
    assert (entry.block, entry.kind, entry.step) == (Block.HISTORY, EntryKind.FAILURE_TRACE.value, 7)
    assert entry.text == "carter_1 move_to(x=3.0, y=1.0) FAILED (timeout): stuck"
    done = outcome_entry(Outcome("franka_1", "p", 0, Step("stop"), True, Failure.NONE, "stopped"), 8)
    assert done.kind == EntryKind.ACTION_OUTCOME.value and done.text == "franka_1 stop() done: stopped"
    task = task_done_entry(GOALS[1], 9)
    assert (task.block, task.kind, task.text) == (Block.TASK, "task_done", "task done: franka_1 at pose ready")


def test_the_episode_succeeds_when_every_goal_was_reached_with_its_metrics():
    judge = EpisodeJudge(GOALS, POSES, 0.15, 0.03, max_episode_s=100.0, started=10.0)
    path = [(0.0, 0.0), (1.0, 0.0), (2.0, 0.5), (2.95, 1.0)]
    reached = [judge.update(10.0 + i, "carter_1", base(x, y)) for i, (x, y) in enumerate(path)]
    assert reached[:-1] == [None] * 3 and reached[-1] == GOALS[0]
    assert judge.update(14.0, "carter_1", base(3.0, 1.0)) is None  # once
    assert not judge.success() and not judge.finished(50.0)
    assert judge.update(15.0, "franka_1", RobotState(joints=(0.99, -0.49))) == GOALS[1]
    judge.record_positions({"carter_1": (3.0, 1.0), "franka_1": (1.5, -1.0)})
    judge.record_positions({"carter_1": (1.5, -0.5), "franka_1": (1.5, -1.0)})
    metrics = judge.metrics(steps=42)
    assert judge.success() and judge.finished(15.0)
    assert (metrics.success, metrics.steps, metrics.delivered, metrics.tasks) == (True, 42, 2, 2)
    travelled = 1.0 + math.dist((1, 0), (2, 0.5)) + math.dist((2, 0.5), (2.95, 1.0)) + 0.05
    assert metrics.metrics == {"path_efficiency": math.dist((0, 0), (3, 1)) / travelled, "min_distance_m": 0.5}


def test_without_every_goal_the_episode_fails_at_its_time_limit():
    judge = EpisodeJudge(GOALS, POSES, 0.15, 0.03, max_episode_s=30.0, started=10.0)
    judge.update(11.0, "carter_1", base(3.0, 1.0))
    assert not judge.finished(39.9) and judge.finished(40.0)
    metrics = judge.metrics(steps=3)
    assert (metrics.success, metrics.delivered) == (False, 1)
    assert metrics.metrics == {"path_efficiency": 0.0}  # one robot moved: no distance between two measured
    assert not EpisodeJudge([], POSES, 0.15, 0.03, 30.0).success()  # no goals: it runs until the time limit


def test_the_world_state_holds_the_robots_their_tasks_and_what_they_do():
    robots = {"carter_1": CARTER, "franka_1": FRANKA}
    executors = {name: RobotExecutor(spec, ExecLimits(), POSES) for name, spec in robots.items()}
    executors["carter_1"].set_plan("p1", [Step("move_to", {"x": 3.0, "y": 1.0}), Step("stop")])
    states = {"carter_1": RobotState(base=BaseState(Pose2D(1.0, 2.0, 0.5), 0.3, 0.0)),
              "franka_1": RobotState(joints=(0.98, -0.5))}
    state = world_state("isaac_sim", 1, 4, robots, states, executors, {"franka_1": True}, GOALS,
                        {"franka_1": 12.0}, POSES)
    assert (state.world, state.episode, state.step, state.observability) == ("isaac_sim", 1, 4,
                                                                          Observability.PARTIAL)
    carter, franka = state.entity("carter_1"), state.entity("franka_1")
    assert carter.pose == Pose.planar(1.0, 2.0, yaw=0.5) and carter.state == "moving"
    assert carter.attributes["camera"] == "camera: no image yet"
    assert franka.pose == Pose.planar(1.5, -1.0) and franka.state == "ready"
    assert (state.entity("task_carter_1").state, state.entity("task_franka_1").state) == ("open", "done")
    assert state.entity("task_carter_1").pose == Pose.planar(3.0, 1.0)
    assert Relation("franka_1", "assigned", "task_franka_1") in state.relations
    assert state.activity("carter_1") == AgentActivity("carter_1", Activity.EXECUTING, "move_to",
                                                       '{"x": 3.0, "y": 1.0}', 0, 2)
    assert state.activity("franka_1").activity == Activity.IDLE
    unseen = world_state("isaac_sim", 1, 0, robots, {}, executors, {"carter_1": True}, GOALS, {}, POSES)
    assert unseen.entity("carter_1").pose is None and unseen.entity("carter_1").state == "unknown"
    assert unseen.activity("carter_1").activity == Activity.BLOCKED  # held: its inputs are stale
