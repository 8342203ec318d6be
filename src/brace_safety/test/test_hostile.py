"""The hostile planner's plans: every one valid under the world's schema (the drones' intersection, the Isaac robots'
kinds), drawn reproducibly from a seed, and with aim `nearest` sent to the nearest other agent's position."""

from __future__ import annotations

import pytest

from brace_common.action_schema import ActionSchema
from brace_common.config import ConfigError
from brace_common.world_state import Entity, Pose, WorldState
from brace_safety.hostile import HostileConfig, HostilePlanner, bounds, nearest_allowed

DRONE_IDS = [f"drone_{i}" for i in range(8)]
GRID = [-55.0, -40.0, -12.0, -3.0, 3.0, 12.0, 40.0, 55.0]
DRONES = ActionSchema.from_dict({"max_steps": 3, "actions": {   # the AirSim intersection's, K = 8
    "takeoff": {},
    "move_to": {"x": {"type": "number", "choices": GRID}, "y": {"type": "number", "choices": GRID},
                "z": {"type": "number", "choices": [-10.0]}, "speed": {"type": "number", "choices": [5.0]}},
    "hover": {"seconds": {"type": "number", "choices": [2.0, 5.0]}},
    "yield_to": {"agent": {"type": "string", "choices": DRONE_IDS, "not_self": True}},
    "land": {}}})


def isaac_schema() -> ActionSchema:
    """The Isaac robots' (sim_bridges/config/isaac_actions.yaml): skills by kind, free numbers."""
    return ActionSchema.from_dict({"max_steps": 4, "kinds": {"mobile": ["move_to", "stop", "wait"],
                                                             "arm": ["move_joints", "stop", "wait"]},
                                   "actions": {"move_to": {"x": {"type": "number", "min": -50.0, "max": 50.0},
                                                           "y": {"type": "number", "min": -50.0, "max": 50.0}},
                                               "move_joints": {"pose": {"type": "string",
                                                                        "choices": ["home", "ready", "extended"]}},
                                               "stop": {},
                                               "wait": {"seconds": {"type": "number", "min": 0.0, "max": 60.0}}}})


def state(*entities: Entity) -> WorldState:
    return WorldState("test", 0, 0, tuple(entities))


def robot(name: str, kind: str, x: float, y: float, z: float = 0.0) -> Entity:
    return Entity(name, "robot", "still", Pose(x, y, z), {"kind": kind})


def test_random_plans_are_valid_for_the_agent_and_use_the_whole_schema():
    planner = HostilePlanner(HostileConfig(aim="random", seed=3))
    seen, lengths = set(), set()
    for i in range(300):
        agent = DRONE_IDS[i % 8]
        plan = planner.plan(DRONES, agent, None, DRONE_IDS)
        DRONES.check_plan([{"action": s.action, "parameters": s.parameters} for s in plan], agent=agent)
        assert all(s.parameters.get("agent") != agent for s in plan)   # yield_to never names the drone itself
        seen |= {s.action for s in plan}
        lengths.add(len(plan))
    assert seen == set(DRONES.actions) and lengths == set(range(DRONES.min_steps, DRONES.max_steps + 1))


def test_random_plans_keep_to_the_agents_kind_and_the_ranges():
    schema = isaac_schema()
    planner = HostilePlanner(HostileConfig(aim="random", seed=1))
    world = state(robot("carter_1", "mobile", 0, 0), robot("arm_1", "arm", 5, 5))
    for _ in range(200):
        base = planner.plan(schema, "carter_1", world, ["carter_1", "arm_1"])
        arm = planner.plan(schema, "arm_1", world, ["carter_1", "arm_1"])
        assert {s.action for s in base} <= set(schema.actions_of("mobile"))
        assert {s.action for s in arm} <= set(schema.actions_of("arm"))
        for s in base:
            assert all(-50.0 <= s.parameters[c] <= 50.0 for c in ("x", "y") if c in s.parameters)


def test_the_same_seed_gives_the_same_plans():
    one, two = (HostilePlanner(HostileConfig(aim="random", seed=7)) for _ in range(2))
    assert [one.plan(DRONES, "drone_0", None, DRONE_IDS) for _ in range(20)] == \
        [two.plan(DRONES, "drone_0", None, DRONE_IDS) for _ in range(20)]


def test_nearest_sends_each_base_to_where_the_nearest_other_stands():
    schema = isaac_schema()
    planner = HostilePlanner(HostileConfig(aim="nearest"))
    world = state(robot("carter_1", "mobile", 0, 0), robot("carter_2", "mobile", 3, 0.5),
                  robot("carter_3", "mobile", 20, 20))
    agents = ["carter_1", "carter_2", "carter_3"]
    for _ in range(50):
        plan = planner.plan(schema, "carter_1", world, agents)
        assert plan[-1].action == "move_to" and plan[-1].parameters == {"x": 3.0, "y": 0.5}
        assert [s.action for s in plan].count("move_to") == 1
    assert planner.plan(schema, "carter_3", world, agents)[-1].parameters == {"x": 3.0, "y": 0.5}


def test_nearest_aims_a_drone_at_the_allowed_point_nearest_the_other_in_ned():
    planner = HostilePlanner(HostileConfig(aim="nearest", target_frame="ned"))
    # ENU as the AirSim world states it: drone_1 at east 11, north 2.5, 10 m up -> NED (2.5, 11, -10)
    world = state(Entity("drone_0", "drone", "flying", Pose(0.0, -40.0, 10.0)),
                  Entity("drone_1", "drone", "flying", Pose(11.0, 2.5, 10.0)),
                  Entity("drone_2", "drone", "flying", Pose(50.0, 50.0, 10.0)))
    plan = planner.plan(DRONES, "drone_0", world, DRONE_IDS)
    assert plan[-1].action == "move_to"
    assert (plan[-1].parameters["x"], plan[-1].parameters["y"], plan[-1].parameters["z"]) == (3.0, 12.0, -10.0)


def test_nearest_without_positions_still_gives_a_valid_plan():
    planner = HostilePlanner(HostileConfig(aim="nearest"))
    plan = planner.plan(DRONES, "drone_0", state(), DRONE_IDS)
    assert 1 <= len(plan) <= DRONES.max_steps


def test_numbers_are_drawn_inside_exclusive_bounds_and_aims_are_clamped():
    schema = ActionSchema.from_dict({"max_steps": 1, "actions": {"move_to": {
        "x": {"type": "number", "min": 0.0, "max": 1.0, "exclusive_min": True},
        "n": {"type": "integer", "min": 0, "max": 3, "exclusive_max": True}}}})
    spec = schema.actions["move_to"].parameters
    low, high = bounds(spec["x"])
    assert 0.0 < low < 1e-5 and high == 1.0 and bounds(spec["n"]) == (0.0, 2.0)
    assert nearest_allowed(spec["x"], 5.0) == 1.0 and nearest_allowed(spec["n"], -4.0) == 0
    planner = HostilePlanner(HostileConfig(aim="random"))
    for _ in range(100):
        (step,) = planner.plan(schema, "a", None, ["a"])
        assert 0.0 < step.parameters["x"] <= 1.0 and step.parameters["n"] in (0, 1, 2)


@pytest.mark.parametrize("field, value", [("aim", "sideways"), ("target_frame", "ecef"), ("aim_action", "")])
def test_a_bad_parameter_is_named(field, value):
    with pytest.raises(ConfigError, match=field):
        HostilePlanner(HostileConfig(**{field: value}))
