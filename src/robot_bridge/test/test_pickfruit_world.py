"""The PickFruit world and the /act stand-in policy, driven by a point tool (no twin)."""

from __future__ import annotations

import math

import numpy as np

from brace_common.vocabulary import Activity
from brace_common.world_state import AgentActivity, Pose, Relation
from robot_bridge.pickfruit.pickfruit_world import PickFruitConfig, PickFruitWorld, TwinPolicy, world_state


class Tool:
    """A tool point that applies actions exactly, and a gripper that closes until the world stops it."""

    def __init__(self, world: PickFruitWorld, start=(0.30, 0.0, 0.25)) -> None:
        self.world, self.p, self.opening = world, np.array(start, float), 0.07

    def act(self, action: np.ndarray) -> None:
        self.p += action[:3]
        target = 0.07 if action[6] > 0.5 else 0.0
        for _ in range(20):  # the gripper moves, the world may stop it on a fruit
            stop = self.world.grasp(tuple(self.p), self.opening)
            floor = stop if (stop is not None and target < self.opening) else target
            self.opening = max(floor, target) if target < self.opening else target
        self.world.grasp(tuple(self.p), self.opening)


def run(world: PickFruitWorld, instruction: str, ticks: int = 200) -> Tool:
    tool = Tool(world)
    policy = TwinPolicy(world, tool=lambda: tuple(tool.p))
    for _ in range(ticks):
        tool.act(policy(np.zeros((4, 4, 3), np.uint8), instruction))
    return tool


def test_reset_is_seeded_and_spaces_the_fruits():
    a, b = PickFruitWorld(), PickFruitWorld()
    assert a.reset(3) == b.reset(3)
    assert {n: f.position for n, f in a.snapshot().items()} == {n: f.position for n, f in b.snapshot().items()}
    positions = [f.position for f in a.snapshot().values()]
    assert all(math.dist(p[:2], q[:2]) >= 0.05 for i, p in enumerate(positions) for q in positions[i + 1:])
    assert not a.success() and a.delivered() == 0


def test_pick_then_place_puts_the_fruit_in_the_bowl_without_slips():
    world = PickFruitWorld(PickFruitConfig(slip_probability=0.0))
    (fruit,) = world.reset(1)
    tool = Tool(world)
    policy = TwinPolicy(world, tool=lambda: tuple(tool.p))
    for _ in range(80):
        tool.act(policy(np.zeros((2, 2, 3), np.uint8), f"pick up the {fruit}"))
    assert world.snapshot()[fruit].held and abs(tool.opening - world.config.width(fruit)) < 1e-6
    for _ in range(80):
        tool.act(policy(np.zeros((2, 2, 3), np.uint8), f"put the {fruit} in the bowl"))
    assert world.success() and world.counts.grasps == 1 and world.counts.slips == 0
    assert tool.opening > world.config.width(fruit)


def test_a_slipping_grasp_drops_the_fruit_and_the_gripper_closes_on_nothing():
    world = PickFruitWorld(PickFruitConfig(slip_probability=1.0))
    (fruit,) = world.reset(2)
    tool = run(world, f"pick up the {fruit}", ticks=60)
    assert world.counts.grasps == 1
    tool2 = Tool(world, start=tuple(tool.p))
    tool2.opening = tool.opening
    policy = TwinPolicy(world, tool=lambda: tuple(tool2.p))
    for _ in range(60):
        tool2.act(policy(np.zeros((2, 2, 3), np.uint8), f"put the {fruit} in the bowl"))
    assert world.counts.slips == 1 and not world.success()
    assert not world.snapshot()[fruit].held


def test_fingers_already_narrower_than_a_fruit_do_not_grasp_it_when_they_come_down_on_it():
    world = PickFruitWorld(PickFruitConfig(slip_probability=0.0, phantom_probability=0.0))
    (fruit,) = world.reset(1)
    at, width = world.snapshot()[fruit].position, world.config.width(fruit)
    above = (at[0], at[1], at[2] + 0.1)
    assert world.grasp(above, width - 0.01) is None                   # closed a little, away from the fruit
    assert world.grasp(at, width - 0.01) is None                      # comes down on it: nothing between the fingers
    assert world.grasp(at, 0.0) is None and not world.snapshot()[fruit].held and world.counts.grasps == 0
    assert world.grasp(at, 0.07) == width                             # opens around it,
    assert world.grasp(at, width) == width and world.snapshot()[fruit].held    # then closes on it


def test_the_policy_refuses_an_instruction_without_a_known_object():
    world = PickFruitWorld()
    world.reset(0)
    policy = TwinPolicy(world, tool=lambda: (0.3, 0.0, 0.2))
    try:
        policy(np.zeros((2, 2, 3), np.uint8), "pick up the hammer")
    except ValueError as exc:
        assert "hammer" in str(exc)
    else:
        raise AssertionError("no error")


def test_steps_are_bounded():
    world = PickFruitWorld()
    (fruit,) = world.reset(0)
    action = TwinPolicy(world, tool=lambda: (0.0, 0.0, 0.5))(np.zeros((2, 2, 3), np.uint8), f"pick up the {fruit}")
    assert np.linalg.norm(action[:3]) <= 0.02 + 1e-9 and action[6] == 1.0


def test_the_world_state_follows_the_fruit_from_the_table_to_the_bowl():
    world = PickFruitWorld(PickFruitConfig(slip_probability=0.0))
    (fruit,) = world.reset(1)
    arm = AgentActivity("arm_0", Activity.EXECUTING, "pick", f'{{"object": "{fruit}"}}', 0, 2)
    start = world_state(world, 3, 0, arm, (0.3, 0.0, 0.25), 0.07)
    assert (start.world, start.episode, start.step) == ("pickfruit", 3, 0)
    assert start.entity(fruit).state == "on_table" and Relation(fruit, "on", "table") in start.relations
    assert start.entity(fruit).pose == Pose(*world.snapshot()[fruit].position)
    assert start.entity(f"task_{fruit}").state == "open" and start.entity("arm_0").pose == Pose(0.3, 0.0, 0.25)
    assert Relation(f"task_{fruit}", "target", "bowl") in start.relations and start.activity("arm_0") == arm
    tool = run(world, f"pick up the {fruit}", ticks=80)
    held = world_state(world, 3, 1, arm, tuple(tool.p), tool.opening)
    assert held.entity(fruit).state == "held" and held.related("holding") == [Relation("arm_0", "holding", fruit)]
    assert held.entity("arm_0").attributes["gripper_m"] == f"{tool.opening:.4f}"
    policy = TwinPolicy(world, tool=lambda: tuple(tool.p))
    for _ in range(80):
        tool.act(policy(np.zeros((2, 2, 3), np.uint8), f"put the {fruit} in the bowl"))
    done = world_state(world, 3, 2, arm, tuple(tool.p), tool.opening)
    assert done.entity(fruit).state == "in_bowl" and Relation(fruit, "in", "bowl") in done.relations
    assert done.entity(f"task_{fruit}").state == "done"
