"""What the twin's front camera sees of PushT: the T block, the goal's outline and the gripper as a Scene, ROS-free.

The block is its bar and stem as two boxes turned by its yaw, resting on the
table top; the goal is the same T drawn flat on the table (a millimetre high,
grey: the perceiver's colour search skips it); the gripper is the PickFruit
camera's.
"""

from __future__ import annotations

from brace_common.planar import Pose2D

from ..pickfruit.scene_render import OBJECT_COLORS, TARGET_COLOR, Box, Scene, gripper_boxes
from ..pickfruit.twin_camera import TABLE_X_M, TABLE_Y_M
from .pusht_world import BLOCK, Point, PushTWorld
from .t_block import TShape

GOAL_MARK_M = 0.001
"""The goal's outline: this high above the table top (m)."""


def t_boxes(shape: TShape, pose: Pose2D, bottom_m: float, height_m: float, color: tuple[int, int, int]) -> list[Box]:
    """The T's bar and stem at `pose`, from `bottom_m` up `height_m`."""
    boxes = []
    for rect in shape.rects:
        x, y = pose.to_world(rect.centre)
        boxes.append(Box((x, y, bottom_m + height_m / 2), (rect.half[0], rect.half[1], height_m / 2), color, pose.yaw))
    return boxes


def pusht_scene(world: PushTWorld, tool: Point, gripper_m: float) -> Scene:
    """The PushT table now, with the gripper at `tool` opened `gripper_m`."""
    cfg = world.config
    top = cfg.table_top_m
    shapes = t_boxes(world.shape, cfg.goal_pose, top, GOAL_MARK_M, TARGET_COLOR)
    shapes += t_boxes(world.shape, world.pose(), top, world.shape.height_m, OBJECT_COLORS[BLOCK])
    shapes += gripper_boxes(tool, gripper_m)
    return Scene(top, TABLE_X_M, TABLE_Y_M, shapes)
