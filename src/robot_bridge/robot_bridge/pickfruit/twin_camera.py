"""What the twin's front camera sees of PickFruit: the world's fruits, bowl, gripper and hand as a Scene, ROS-free.

Fruits rest on the table top (a sphere of the fruit's width whose bottom
touches it), ride between the fingers when held, and sit on the bowl when in
it; a removed fruit is gone; the hand is drawn while it is in view.
"""

from __future__ import annotations

from .pickfruit_world import PickFruitWorld, Point
from .scene_render import BOWL_COLOR, OBJECT_COLORS, Box, Cylinder, Scene, Sphere, gripper_boxes, hand_boxes

TABLE_TOP_M = 0.095
"""The table top (m, base_link): the largest fruit's (0.05 m) bottom when its centre is at the grasp height."""
TABLE_X_M = (0.12, 0.42)
TABLE_Y_M = (-0.2, 0.22)
BOWL_TOP_M = 0.105
"""The bowl's rim: a fruit in the bowl rests on it (its centre above by its radius)."""
UNKNOWN_COLOR = (128, 0, 128)


def pickfruit_scene(world: PickFruitWorld, tool: Point, gripper_m: float) -> Scene:
    """The PickFruit table now, with the gripper at `tool` opened `gripper_m`."""
    cfg = world.config
    bx, by, _ = cfg.bowl
    shapes: list[Sphere | Box | Cylinder] = [Cylinder((bx, by), cfg.bowl_radius_m, TABLE_TOP_M, BOWL_TOP_M, BOWL_COLOR)]
    for fruit in world.snapshot().values():
        if fruit.removed:
            continue
        r = fruit.width_m / 2.0
        x, y, z = fruit.position
        if fruit.held:
            centre = tool
        elif fruit.in_bowl:
            centre = (x, y, BOWL_TOP_M + r)
        else:
            centre = (x, y, TABLE_TOP_M + r)
        shapes.append(Sphere(centre, r, OBJECT_COLORS.get(fruit.name, UNKNOWN_COLOR)))
    shapes += gripper_boxes(tool, gripper_m)
    hand = world.hand_in_view()
    if hand is not None:
        shapes += hand_boxes((hand[0], hand[1], TABLE_TOP_M + 0.03))
    return Scene(TABLE_TOP_M, TABLE_X_M, TABLE_Y_M, shapes)

