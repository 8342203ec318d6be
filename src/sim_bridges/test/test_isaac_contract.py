"""Isaac Sim's topic contract, robot state from its messages, liveness, and the bridge's validated config (no ROS)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from ament_index_python.packages import get_package_share_directory

from brace_common.config import ConfigError, config_from_file, from_mapping
from brace_common.validation import InvalidInput
from sim_bridges.isaac.isaac_config import IsaacBridgeConfig, TaskGoal
from sim_bridges.isaac.isaac_contract import (
    DEFAULT_TOPICS,
    Liveness,
    Pose2D,
    RobotKind,
    RobotSpec,
    base_state,
    joint_positions,
    robot_contract,
    yaw_of,
)

PARAMS = Path(get_package_share_directory("brace_bringup")) / "params"  # the stacks' parameter files


def test_a_mobile_robot_with_a_camera_speaks_odom_cmd_vel_and_the_camera_helper_topics():
    contract = robot_contract(RobotSpec("carter_1", RobotKind.MOBILE, camera=True))
    assert {(t.topic, t.msg_type, t.subscribed) for t in contract} == {
        ("/carter_1/odom", "nav_msgs/msg/Odometry", True),
        ("/carter_1/cmd_vel", "geometry_msgs/msg/Twist", False),
        ("/carter_1/camera/rgb", "sensor_msgs/msg/Image", True),
        ("/carter_1/camera/camera_info", "sensor_msgs/msg/CameraInfo", True)}
    assert [t.topic for t in contract if t.controls] == ["/carter_1/odom"]


def test_an_arm_speaks_joint_states_and_joint_command_under_its_names():
    topics = {**DEFAULT_TOPICS, "joint_command": "arm/joint_command"}
    contract = robot_contract(RobotSpec("/lab/franka_1/", RobotKind.ARM), topics)
    assert {(t.topic, t.msg_type, t.subscribed) for t in contract} == {
        ("/lab/franka_1/joint_states", "sensor_msgs/msg/JointState", True),
        ("/lab/franka_1/arm/joint_command", "sensor_msgs/msg/JointState", False)}


def test_odometry_relative_to_the_start_pose_is_placed_by_the_robots_origin():
    q = (0.0, 0.0, math.sin(math.pi / 4), math.cos(math.pi / 4))  # 90 degrees
    state = base_state(Pose2D(1.0, 2.0, math.pi / 2), (1.0, 0.0, 0.0), q, (0.4, 0.0, 0.0), (0.0, 0.0, 0.3))
    assert state.pose.x == pytest.approx(1.0) and state.pose.y == pytest.approx(3.0)
    assert state.pose.yaw == pytest.approx(-math.pi) or state.pose.yaw == pytest.approx(math.pi)
    assert (state.linear, state.angular) == (0.4, 0.3)
    assert yaw_of(0, 0, 0, 2.0) == 0.0  # unnormalised quaternions are normalised


@pytest.mark.parametrize("position, orientation, reason", [
    ((math.nan, 0.0, 0.0), (0, 0, 0, 1), "bad_position"),
    ((0.0, 0.0, 0.0), (0, 0, 0, 0), "bad_orientation"),
    ((0.0, 0.0, 0.0), (0, 0, math.inf, 1), "bad_orientation"),
])
def test_malformed_odometry_is_refused_by_reason(position, orientation, reason):
    with pytest.raises(InvalidInput) as err:
        base_state(Pose2D(0, 0, 0), position, orientation, (0, 0, 0), (0, 0, 0))
    assert err.value.reason == reason


def test_joint_positions_take_the_configured_joints_by_name_and_refuse_gaps():
    wanted = ("j1", "j2")
    assert joint_positions(["finger", "j2", "j1"], [0.04, 2.0, 1.0], wanted) == (1.0, 2.0)
    for names, positions, reason in ((["j1"], [1.0], "missing_joint"), (["j1", "j2"], [1.0], "bad_joint_state"),
                                     (["j1", "j2"], [1.0, math.nan], "bad_joint_position")):
        with pytest.raises(InvalidInput) as err:
            joint_positions(names, positions, wanted)
        assert err.value.reason == reason


def test_liveness_tells_missing_from_stale_topics():
    live = Liveness(["/a", "/b"], stale_after_s=1.0)
    assert live.missing() == ["/a", "/b"] and live.stale(0.0) == []
    live.seen("/a", 10.0)
    live.seen("/unknown", 10.0)  # not a contract topic: ignored
    assert live.missing() == ["/b"]
    assert live.stale(10.5) == [] and live.stale(11.5) == ["/a"]
    assert live.age("/a", 12.0) == 2.0 and live.age("/b", 12.0) == math.inf


def test_the_shipped_parameter_file_builds_the_default_scene():
    cfg = config_from_file(IsaacBridgeConfig, PARAMS / "isaac_bridge.yaml", "isaac_bridge")
    carter, franka = cfg.robot_specs()
    assert (carter.kind, carter.camera, franka.kind, franka.camera) == (RobotKind.MOBILE, True, RobotKind.ARM, False)
    assert franka.origin == Pose2D(1.5, -1.0, 0.0)
    assert cfg.goals() == [TaskGoal("carter_1", position=(3.0, 1.0)), TaskGoal("franka_1", pose="ready")]
    assert set(cfg.poses()) == {"home", "ready", "extended"} and len(cfg.poses()["ready"]) == 7
    assert cfg.topics() == {**DEFAULT_TOPICS, "cmd_vel": "cmd_vel_nav"}   # into the stack's collision monitor


@pytest.mark.parametrize("name, value", [
    ("agents", []),
    ("agents", ["carter_1", "carter_1"]),
    ("agents", ["1st_robot", "franka_1"]),
    ("agents", ["fleet/carter_1"]),  # a robot's namespace is its agent id: one name token, never a path
    ("agents", ["carter_1", ".."]),
    ("agents", ["carter_1\n", "franka_1"]),  # ids and names are matched whole: no trailing newline
    ("agent_kinds", ["mobile"]),
    ("agent_kinds", ["mobile", "flying"]),
    ("origins", [0.0, 0.0]),
    ("camera_agents", ["franka_2"]),
    ("odom_topic", "odom topic"),
    ("odom_topic", "odom\n"),
    ("frame_id", " "),
    ("named_poses", ["home: 0 0 0"]),
    ("named_poses", ["home 0 0 0 0 0 0 0"]),
    ("named_poses", ["home: 0 0 0 0 0 0 nan"]),
    ("tasks", ["drone_1: fly"]),
    ("task_goals", ["carter_1: 3.0"]),
    ("task_goals", ["franka_1: dance"]),
    ("task_goals", ["carter_1: 1 1", "carter_1: 2 2"]),
    ("goal_tolerance_m", 0.0),
    ("stale_after_s", math.nan),
])
def test_a_bad_value_is_refused_naming_its_parameter(name, value):
    with pytest.raises(ConfigError) as err:
        from_mapping(IsaacBridgeConfig, {name: value})
    assert err.value.parameter == name


def test_per_robot_lists_follow_the_robots_order():
    cfg = from_mapping(IsaacBridgeConfig, {"agents": ["/a/", "b"], "agent_kinds": ["arm", "mobile"],
                                           "origins": [1.0, 2.0, 0.5, -1.0, 0.0, 0.0], "camera_agents": ["b"],
                                           "tasks": [], "task_goals": ["b: -1 2"]})
    a, b = cfg.robot_specs()
    assert (a.name, a.kind, a.origin, a.camera) == ("a", RobotKind.ARM, Pose2D(1.0, 2.0, 0.5), False)
    assert (b.name, b.kind, b.camera) == ("b", RobotKind.MOBILE, True)
    assert cfg.goals() == [TaskGoal("b", position=(-1.0, 2.0))]
    assert cfg.limits().goal_tolerance_m == cfg.goal_tolerance_m
