"""PushT on the twin: the T block's pushing mechanics, the world's faults and verdict, the /act stand-in through the
executor's loop, and what the front camera shows of it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from brace_common.action_schema import Step
from brace_common.episode import CONTACT_LOSSES, GOAL_ERROR_DEG, GOAL_ERROR_M, PUSHES
from brace_common.planar import Pose2D
from brace_common.vocabulary import Activity
from brace_common.world_state import AgentActivity
from robot_bridge.openvla.executor_config import ExecutorConfig
from robot_bridge.orbbec.calibration import load_calibration
from robot_bridge.pickfruit.pickfruit_rollout import PickFruitRollout
from robot_bridge.pickfruit.scene_render import OBJECT_COLORS, SceneRenderer
from robot_bridge.pusht.pusht_camera import pusht_scene
from robot_bridge.pusht.pusht_world import (
    BLOCK,
    FINGER_BOTTOM_M,
    GOAL,
    PushPolicy,
    PushTConfig,
    PushTWorld,
    episode_metrics,
    instruction_part,
    oracle_part,
    world_state,
)
from robot_bridge.pusht.t_block import PARTS, TShape
from robot_bridge.twin_task import TwinTask
from robot_bridge.verifier.scene_diff import TABLE, Catalogue, GeometricPerceiver
from robot_bridge.verifier.verifier_config import VerifierConfig
from robot_bridge.verifier.visual_verifier import VisualVerifier

PUSH = [("push", {"object": BLOCK, "target": GOAL})]
"""A push that names no part (the executor's default template): the stand-in chooses the part itself."""
SHAPE = TShape()
R, MU = 0.008, 0.5


def low(x: float, y: float) -> tuple[float, float, float]:
    """A tool point whose fingertips are below the block's top."""
    return (x, y, PushTConfig().table_top_m + FINGER_BOTTOM_M + 0.01)


# ---------------------------------------------------------------------- mechanics


def test_the_t_outline_is_centred_on_its_centroid_and_c_is_its_mean_radius():
    xs, ys = zip(*SHAPE.polygon, strict=True)
    area = 0.5 * sum(x0 * y1 - x1 * y0 for x0, y0, x1, y1 in zip(xs, ys, xs[1:] + xs[:1], ys[1:] + ys[:1], strict=True))
    assert area == pytest.approx(SHAPE.area_m2)                    # counter-clockwise, the bar and the stem
    cy = sum((y0 + y1) * (x0 * y1 - x1 * y0) for x0, y0, x1, y1 in
             zip(xs, ys, xs[1:] + xs[:1], ys[1:] + ys[:1], strict=True)) / (6 * area)
    assert abs(cy) < 1e-9
    assert 0.02 < SHAPE.c < 0.05
    assert SHAPE.inside((0.0, 0.0)) and not SHAPE.inside((0.04, -0.03))    # beside the stem, under the bar
    with pytest.raises(ValueError, match="stem narrower"):
        TShape(bar_m=(0.02, 0.02), stem_m=(0.03, 0.05))


def test_a_push_through_the_centroid_translates_and_an_offset_push_turns():
    pose = Pose2D(0.25, 0.0, 0.0)
    bottom = min(y for _, y in SHAPE.polygon)
    straight, touched = SHAPE.push(pose, (0.25, bottom - 0.02), (0.25, bottom + 0.03), R, MU)
    assert touched and straight.yaw == pytest.approx(0.0, abs=1e-9) and straight.x == pytest.approx(0.25)
    assert straight.y == pytest.approx(0.03 + R, abs=0.003)      # moved with the pusher once it touched
    turned, _ = SHAPE.push(pose, (0.29, -0.03), (0.29, 0.02), R, MU)
    assert turned.yaw > math.radians(5)                           # up at the bar's right end: counter-clockwise
    missed, touched = SHAPE.push(pose, (0.19, -0.05), (0.19, 0.05), R, MU)   # past the bar's end
    assert not touched and missed == pose


def test_a_push_outside_the_friction_cone_slides_along_the_edge():
    pose = Pose2D(0.25, 0.0, 0.0)
    bottom = min(y for _, y in SHAPE.polygon)
    start = (0.25, bottom - R + 0.001)                             # touching the stem's end
    steep = (start[0] + 0.01, start[1] + 0.004)                    # mostly sideways (beyond atan(0.5)), on the end
    sticking, _ = SHAPE.push(pose, start, steep, R, mu=5.0)
    sliding, _ = SHAPE.push(pose, start, steep, R, mu=0.5)
    frictionless, _ = SHAPE.push(pose, start, steep, R, mu=0.0)
    assert abs(sticking.yaw) > abs(sliding.yaw) > abs(frictionless.yaw) - 1e-9
    r, n = (0.01, bottom), (0.0, 1.0)
    assert SHAPE.twist(r, n, (0.01, 0.004), 0.0) == pytest.approx(SHAPE.twist(r, n, (0.0, 0.004), 0.0))  # normal only
    dx, dy, w = SHAPE.twist(r, n, (0.01, 0.004), 5.0)              # sticking: the contact point goes with the pusher
    assert (dx - w * r[1], dy + w * r[0]) == pytest.approx((0.01, 0.004))


# ---------------------------------------------------------------------- the world


def test_reset_is_seeded_and_the_block_starts_away_from_the_goal():
    a, b = PushTWorld(), PushTWorld()
    assert a.reset(3) == (BLOCK,) and b.reset(3) == (BLOCK,)
    assert a.pose() == b.pose() and not a.success() and a.goal_error().distance_m > 0.05
    assert a.describe()[0].startswith(f"{BLOCK} on the table at x=") and GOAL in a.describe()[1]


def test_the_verdict_needs_both_tolerances():
    world = PushTWorld()
    world.reset(0)
    goal = world.config.goal_pose
    world.block = Pose2D(goal.x + 0.015, goal.y, goal.yaw + math.radians(10))
    assert world.success()
    world.block = Pose2D(goal.x + 0.015, goal.y, goal.yaw + math.radians(20))
    assert not world.success()
    world.block = Pose2D(goal.x + 0.03, goal.y, goal.yaw)
    metrics = episode_metrics(world, 12.345, 60, {"contact_loss": 2}).metrics
    assert metrics[GOAL_ERROR_M] == pytest.approx(0.03) and metrics[GOAL_ERROR_DEG] == 0.0
    assert metrics["failure_contact_loss"] == 2.0 and metrics[PUSHES] == 0 and metrics[CONTACT_LOSSES] == 0


def test_a_pusher_that_comes_down_on_the_block_rides_it_and_pushes_nothing():
    world = PushTWorld()
    world.reset(1)
    pose = world.pose()
    world.grasp((pose.x, pose.y, 0.2), 0.0)                        # above the block
    world.grasp(low(pose.x, pose.y), 0.0)                          # down onto it
    world.grasp(low(pose.x + 0.005, pose.y), 0.0)
    assert world.pose() == pose and world.counts.pushes == 0


def test_a_lost_contact_stops_pushing_and_is_counted():
    world = PushTWorld(PushTConfig(contact_loss_probability=1.0, loss_after_m=(0.004, 0.004)))
    world.reset(2)
    world.block = Pose2D(0.25, 0.0, 0.0)
    bottom = min(y for _, y in world.shape.polygon)
    y = bottom - 0.02
    world.grasp(low(0.25, y), 0.0)
    while y < 0.03:
        y += 0.002
        world.grasp(low(0.25, y), 0.0)
    assert world.counts.pushes == 1 and world.counts.contact_losses == 1 and world.lost
    assert 0.004 <= world.pose().y <= 0.004 + 0.004                # pushed about loss_after_m, then nothing
    world.recover()
    assert not world.lost


def test_world_state_is_the_table_as_a_scene_graph():
    world = PushTWorld()
    world.reset(0)
    state = world_state(world, 0, 4, AgentActivity("arm_0"), (0.3, 0.0, 0.2), 0.0)
    block = state.entity(BLOCK)
    assert state.world == "pusht" and block.state == "on_table" and float(block.attributes["goal_error_m"]) > 0
    assert state.entity(GOAL).attributes["tolerance_m"] == "0.02" and state.entity(f"task_{BLOCK}").state == "open"


# ---------------------------------------------------------------------- the stand-in through the executor's loop


def test_the_stand_in_rejects_other_instructions():
    world = PushTWorld()
    world.reset(0)
    policy = PushPolicy(world, tool=lambda: (0.3, 0.0, 0.2))
    with pytest.raises(ValueError, match="not a push"):
        policy(np.zeros((1, 1, 3), np.uint8), "pick up the apple")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_push_step_brings_the_block_onto_the_goal(seed):
    world = PushTWorld(PushTConfig(contact_loss_probability=0.0))
    rollout = free_rollout(world)
    rollout.start(seed)
    (record,) = rollout.execute(PUSH)
    assert record.result.success and world.success() and world.counts.pushes >= 2
    assert rollout.lines[1].text.startswith("Skills: push(object, target, part)")
    assert any(line.text.startswith(f"Scene: {BLOCK} on the table") for line in rollout.lines)


def test_after_a_lost_contact_the_push_ends_over_the_goal_and_a_second_push_pushes_again():
    world = PushTWorld(PushTConfig(contact_loss_probability=1.0))
    rollout = free_rollout(world)
    rollout.start(0)
    (first,) = rollout.execute(PUSH)
    assert first.result.success and not world.success() and world.counts.contact_losses == 1
    assert f"{BLOCK} is " in rollout.scene[-1]                     # the scene tells the planner it is not there
    pushes = world.counts.pushes
    (second,) = rollout.execute(PUSH)
    assert second.result.actions > 1 and world.counts.pushes > pushes


def offsets_of(world: PushTWorld, seed: int, pushes: int = 1) -> list[float]:
    """The contact offset after every tick of `pushes` push steps of the kinematic rollout."""
    rollout = free_rollout(world)
    rollout.start(seed)
    offsets = [world.contact_offset_m(rollout.tool)]
    for _ in range(pushes):
        rollout.execute(PUSH, halt=lambda: offsets.append(world.contact_offset_m(rollout.tool)))
    return offsets


def test_the_contact_offset_stays_small_while_pushing_and_grows_when_a_contact_is_lost():
    clean = offsets_of(PushTWorld(PushTConfig(contact_loss_probability=0.0)), 0)
    assert math.isnan(clean[0])                                      # before the first contact: unknown
    measured = [o for o in clean if not math.isnan(o)]
    assert measured and max(measured) < 0.02 and min(measured) < 1e-6        # down beside a contact, pushing
    assert any(math.isnan(o) for o in clean[1:])                             # above the block between contacts
    lost = offsets_of(PushTWorld(PushTConfig(contact_loss_probability=1.0)), 4, pushes=2)
    assert max(o for o in lost if not math.isnan(o)) > 0.1           # on along the table to the goal, pushing nothing


def test_the_arms_activity_carries_the_contact_offset_while_it_executes():
    world = PushTWorld(PushTConfig(contact_loss_probability=0.0))
    world.reset(0)
    block = world.pose()
    down, away = low(block.x + 0.10, block.y), low(block.x + 0.15, block.y)   # beside the block, then off it
    above = (away[0], away[1], 0.2)
    assert math.isnan(world.contact_offset_m(down))                          # never came down yet
    for tool in (down, away):
        world.grasp(tool, 0.0)
    executing = AgentActivity("arm_0", Activity.EXECUTING, "push", "{}", 0, 1)
    state = world_state(world, 0, 1, executing, away, 0.0)
    assert state.agents[0].tracking_error == pytest.approx(0.05) == world.contact_offset_m(away)
    assert math.isnan(world_state(world, 0, 1, AgentActivity("arm_0"), away, 0.0).agents[0].tracking_error)
    world.grasp(above, 0.0)
    assert math.isnan(world_state(world, 0, 1, executing, above, 0.0).agents[0].tracking_error)   # above the block


def test_given_its_instruction_anew_the_stand_in_forgets_a_lost_contact():
    world = PushTWorld(PushTConfig(contact_loss_probability=1.0))
    rollout = free_rollout(world)
    rollout.start(4)
    rollout.execute(PUSH, halt=lambda: "lost" if world.lost else None)   # halted as the contact is lost
    assert world.lost
    rollout.policy(np.zeros((4, 4, 3), np.uint8), "push the t block to the goal")
    assert world.lost and rollout.policy.pushing                   # on its way to where it believes the block went
    rollout.policy.start_over()
    rollout.policy(np.zeros((4, 4, 3), np.uint8), "push the t block to the goal")
    assert not world.lost and not rollout.policy.pushing           # a contact chosen again, approached first
    assert rollout.policy.segment is not None


def free_rollout(world: PushTWorld) -> PickFruitRollout:
    """The kinematic loop with the executor's default push template (no part named)."""
    return PickFruitRollout(world, ExecutorConfig(locations=list(TwinTask.of(world).locations)))


def by(part: str) -> list:
    """A push by `part` (the PushT run's template names it)."""
    return [("push", {"object": BLOCK, "target": GOAL, "part": part})]


def test_every_outline_point_lies_on_the_bar_or_the_stem():
    parts = {SHAPE.part(p) for p, _ in SHAPE.outline()}
    assert parts == set(PARTS)
    junction = SHAPE.rects[0].centre[1] - SHAPE.rects[0].half[1]          # the bar's underside
    for p, _ in SHAPE.outline():
        assert (SHAPE.part(p) == "bar") == (p[1] >= junction - 1e-9)


def test_an_instruction_names_one_part_or_none():
    assert instruction_part("push the t block by its stem to the goal") == "stem"
    assert instruction_part("Push the T_block by its bar.") == "bar"
    assert instruction_part("push the t block to the goal") is None
    assert instruction_part("push the t block by its bar and stem") is None


@pytest.mark.parametrize("part", PARTS)
def test_a_push_by_a_part_presses_only_on_that_part_and_ends_over_the_goal(part):
    world = PushTWorld(PushTConfig(contact_loss_probability=0.0))
    rollout = PickFruitRollout(world)                 # the PushT template: "push the t block by its <part> ..."
    rollout.start(0)
    pressed = set()

    def watch() -> None:
        if rollout.policy.segment is not None:
            pressed.add(SHAPE.part(rollout.policy.segment.contact))

    (record,) = rollout.execute(by(part), halt=watch)
    assert pressed == {part} and record.result.success and world.counts.pushes >= 1
    assert rollout.policy.part == part


def test_a_part_that_brings_the_block_no_nearer_is_spent_after_one_push_and_the_step_ends():
    spent = 0
    for seed in range(6):
        world = PushTWorld(PushTConfig(contact_loss_probability=0.0))
        rollout = PickFruitRollout(world)
        rollout.start(seed)
        wrong = next(p for p in PARTS if p != oracle_part(world))
        pushes = world.counts.pushes
        (record,) = rollout.execute(by(wrong))
        assert record.result.success and world.counts.pushes > pushes      # it pushed, then rose over the goal
        spent += rollout.policy.spent and not world.success()
    assert spent >= 1


def test_pushing_by_the_oracles_part_each_step_brings_the_block_onto_the_goal():
    for seed in (0, 1, 2):
        world = PushTWorld(PushTConfig(contact_loss_probability=0.0))
        rollout = PickFruitRollout(world)
        rollout.start(seed)
        for _ in range(6):
            rollout.execute(by(oracle_part(world)))
            if world.success():
                break
        assert world.success()
    assert oracle_part(world) in PARTS


# ---------------------------------------------------------------------- the camera


def test_the_camera_shows_the_block_where_it_is_and_the_perceiver_finds_it():
    camera = load_calibration("package://robot_bridge/config/twin_front_camera.yaml")
    world = PushTWorld()
    world.reset(4)
    task = TwinTask.of(world)
    rgb, depth = SceneRenderer(camera, seed=0).render(task.render((0.3, 0.15, 0.25), 0.0))
    catalogue = Catalogue({BLOCK: OBJECT_COLORS[BLOCK]}, world.config.table_top_m)
    sighting = GeometricPerceiver(camera, catalogue).perceive(rgb, depth).sightings[BLOCK]
    pose = world.pose()
    assert sighting.place == TABLE and math.dist(sighting.position[:2], (pose.x, pose.y)) < 0.02
    moved = pusht_scene(world, (0.3, 0.15, 0.25), 0.0)
    assert any(getattr(s, "yaw", 0.0) == pose.yaw for s in moved.shapes)     # the bars turn with the block


@pytest.mark.parametrize("loss", [0.0, 1.0])
def test_the_verifier_contradicts_a_push_that_ended_off_the_goal(loss):
    cfg = VerifierConfig(regions=["goal=0.31,0.08,0.03"])
    camera = load_calibration(cfg.camera_calibration)
    renderer = SceneRenderer(camera, seed=5)
    world = PushTWorld(PushTConfig(contact_loss_probability=loss))
    rollout = free_rollout(world)
    rollout.start(0)
    verifier = VisualVerifier(cfg.perceiver(camera), cfg.confirm_frames)
    verifier.on_plan([Step(a, p) for a, p in PUSH])
    verdicts = []

    def frame() -> str:
        out = verifier.on_frame(*renderer.render(pusht_scene(world, rollout.tool, rollout.opening_m)))
        verdicts.extend(out)
        return next((v.detail for v in out if v.violation), "")

    frame()
    (record,) = rollout.execute(PUSH, halt=frame)
    verifier.on_outcome(record.result.success)
    frame()
    (end,) = [v for v in verdicts if v.step_ended]
    assert record.result.success, "the executor saw the tool over the goal either way"
    assert not any(v.violation for v in verdicts if not v.step_ended), "a push moves the block: not a removal"
    assert end.expected_state_achieved == world.success() and end.violation == (not world.success())
    if end.violation:
        assert "push reported success but t_block is at table" in end.detail and end.detail.endswith("not goal")


def test_the_next_episode_starts_with_the_tool_over_the_goal_and_still_pushes():
    world = PushTWorld(PushTConfig(contact_loss_probability=0.0))
    rollout = free_rollout(world)
    for seed in (3, 4):                                            # the arm starts episode 4 where episode 3 ended
        rollout.start(seed)
        (record,) = rollout.execute(PUSH)
        assert record.result.success and world.success() and record.result.actions > 20


def test_the_stand_in_gives_up_a_contact_the_arm_does_not_reach_and_starts_over_each_episode():
    world = PushTWorld(PushTConfig(contact_loss_probability=0.0))
    world.reset(5)
    tool = [0.25, 0.0, 0.2]
    policy = PushPolicy(world, tool=lambda: tuple(tool))
    policy(np.zeros((1, 1, 3), np.uint8), "push the t block to the goal")
    first = policy.segment
    for _ in range(policy.config.stall_calls):                     # the arm holds: every action refused
        policy(np.zeros((1, 1, 3), np.uint8), "push the t block to the goal")
    assert first.contact in policy.blocked and policy.segment is not None and policy.segment != first
    world.reset(6)
    policy(np.zeros((1, 1, 3), np.uint8), "push the t block to the goal")
    assert not policy.blocked and policy.episode == world.episodes
