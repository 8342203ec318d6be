"""A world's step timer never starves the node's inputs, however long a step takes."""

from __future__ import annotations

import time

from rclpy.node import Node
from std_msgs.msg import String

from brace_common.clock import spaced_timer
from brace_common.testing import wait_for


class SlowWorld(Node):
    """Steps longer than its period (a slow simulator's RPCs) and takes plans on a subscription."""

    def __init__(self) -> None:
        super().__init__("slow_world")
        self.steps = 0
        self.plans: list[str] = []
        self.create_subscription(String, "plan", lambda m: self.plans.append(m.data), 10)
        self.timer = spaced_timer(self, 0.005, self.step)

    def step(self) -> None:
        self.steps += 1
        time.sleep(0.02)  # the step's own work: four periods


def test_a_step_longer_than_its_period_leaves_room_for_the_nodes_subscriptions(ros):
    world = ros.add(SlowWorld())
    planner = ros.add(Node("planner"))
    pub = planner.create_publisher(String, "plan", 10)
    wait_for(lambda: pub.get_subscription_count() > 0 and world.steps >= 3, what="the world stepping")
    pub.publish(String(data="move_to(shelf_3)"))
    wait_for(lambda: world.plans == ["move_to(shelf_3)"], what="the plan taken between steps")
    stepped = world.steps
    wait_for(lambda: world.steps > stepped, what="the world stepping on")

