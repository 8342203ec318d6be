"""The intersection scenario: geometry, crossing order, oracle, schema, settings (ROS-free)."""

import math

import pytest

from brace_common.config import ConfigError
from sim_bridges.airsim.intersection import (
    DroneView,
    IntersectionConfig,
    Step,
    action_schema,
    cleared,
    crossing_order,
    in_box,
    must_yield,
    oracle_plan,
    routes,
    same_step,
    settings,
)


def test_eight_drones_come_from_four_approaches_in_two_rows_and_land_beyond_the_centre():
    cfg = IntersectionConfig()
    rs = routes(cfg)
    assert [r.approach for r in rs.values()] == ["south", "west", "north", "east"] * 2
    for r in rs.values():
        assert r.start[2] == 0.0 and r.goal[2] == 0.0
        assert r.progress(r.start[0], r.start[1]) == -(cfg.approach_m + r.row * cfg.row_spacing_m)
        assert r.progress(r.goal[0], r.goal[1]) == cfg.goal_m + r.row * cfg.row_spacing_m
        assert r.cross_track(r.goal[0], r.goal[1]) == pytest.approx(0.0)
        assert r.hold[2] == -cfg.cruise_altitude_m and not in_box(cfg, r.hold[0], r.hold[1])
    # Right-hand lanes: the south and north drones pass each other lane_offset apart on each side.
    assert rs["drone_0"].start[1] == cfg.lane_offset_m and rs["drone_2"].start[1] == -cfg.lane_offset_m


def test_lanes_of_crossing_approaches_meet_inside_the_box():
    cfg = IntersectionConfig()
    south, west = routes(cfg)["drone_0"], routes(cfg)["drone_1"]
    # south flies along y = +3 (north), west along x = -3 (east): they cross at (-3, 3).
    assert in_box(cfg, -3.0, 3.0)
    assert south.cross_track(-3.0, 3.0) == pytest.approx(0.0) and west.cross_track(-3.0, 3.0) == pytest.approx(0.0)


def test_the_crossing_order_takes_nearer_rows_first_and_vehicle_names_follow_the_parameter():
    assert crossing_order(IntersectionConfig(num_agents=8)) == [f"drone_{i}" for i in range(8)]
    named = IntersectionConfig(num_agents=2, vehicles=["Drone1", "Drone2"])
    assert crossing_order(named) == ["Drone1", "Drone2"] and set(routes(named)) == {"Drone1", "Drone2"}


def _views(cfg, **where):
    rs = routes(cfg)
    out = {}
    for name, r in rs.items():
        x, y = where.get(name, (r.hold[0] * 3, r.hold[1] * 3))
        out[name] = DroneView(x, y, False, False)
    return out


def test_the_oracle_yields_until_the_drone_before_has_cleared_then_flies_and_lands():
    cfg = IntersectionConfig(num_agents=4)
    rs = routes(cfg)
    views = _views(cfg)
    assert oracle_plan(cfg, "drone_0", views)[0].action == "move_to"   # first in order: no one to yield to
    plan = oracle_plan(cfg, "drone_1", views)
    assert [s.action for s in plan] == ["yield_to", "move_to", "land"] and plan[0].parameters == {"agent": "drone_0"}
    assert plan[1].parameters == {"x": rs["drone_1"].goal[0], "y": rs["drone_1"].goal[1], "z": -cfg.cruise_altitude_m,
                              "speed": cfg.cruise_speed_mps}
    past = (rs["drone_0"].goal[0] / 2, rs["drone_0"].goal[1])   # drone_0 half way to its goal: cleared
    assert cleared(cfg, rs["drone_0"], *past)
    assert must_yield(cfg, "drone_1", {**views, "drone_0": DroneView(*past, False, False)}) is None
    at_goal = {**views, "drone_0": DroneView(rs["drone_0"].goal[0], rs["drone_0"].goal[1], False, False)}
    assert oracle_plan(cfg, "drone_0", at_goal) == [Step("land")]
    done = {**views, "drone_0": DroneView(rs["drone_0"].goal[0], rs["drone_0"].goal[1], True, True)}
    assert oracle_plan(cfg, "drone_0", done)[0].action == "hover"


def test_a_drone_already_at_the_box_does_not_yield():
    cfg = IntersectionConfig(num_agents=2)
    rs = routes(cfg)
    near = (rs["drone_1"].hold[0], rs["drone_1"].hold[1] / 2)  # west approach, 6 m before the centre: at the box
    assert must_yield(cfg, "drone_1", {**_views(cfg), "drone_1": DroneView(*near, False, False)}) is None


def test_the_schema_enumerates_every_coordinate_the_oracle_writes():
    cfg = IntersectionConfig()
    schema = action_schema(cfg)
    xs, ys = schema["actions"]["move_to"]["x"]["choices"], schema["actions"]["move_to"]["y"]["choices"]
    for r in routes(cfg).values():
        assert r.goal[0] in xs and r.goal[1] in ys and r.hold[0] in xs and r.hold[1] in ys
    assert schema["actions"]["yield_to"]["agent"]["choices"] == cfg.names()
    assert set(schema["actions"]) == {"takeoff", "move_to", "hover", "yield_to", "land"}


def test_settings_place_every_vehicle_at_its_start():
    cfg = IntersectionConfig(num_agents=3)
    vehicles = settings(cfg, 2.0)["Vehicles"]
    assert settings(cfg, 2.0)["ClockSpeed"] == 2.0 and list(vehicles) == ["drone_0", "drone_1", "drone_2"]
    for name, r in routes(cfg).items():
        assert (vehicles[name]["X"], vehicles[name]["Y"], vehicles[name]["Z"]) == r.start
        assert vehicles[name]["VehicleType"] == "SimpleFlight"


def test_same_step_compares_numbers_within_tolerance():
    assert same_step(Step("move_to", {"x": 40, "y": 3.0}), Step("move_to", {"x": 40.0, "y": 3.0000001}))
    assert not same_step(Step("move_to", {"x": 40.0}), Step("move_to", {"x": -40.0}))
    assert not same_step(Step("land"), Step("takeoff"))


@pytest.mark.parametrize("field, value", [("num_agents", 9), ("hold_m", 5.0), ("approach_m", 11.0),
                                          ("vehicles", ["a"]), ("gust_probability", 1.5),
                                          ("cruise_speed_mps", math.nan)])
def test_invalid_scenarios_name_the_parameter(field, value):
    with pytest.raises(ConfigError) as err:
        IntersectionConfig(**{field: value}).validate()
    assert err.value.parameter == field
