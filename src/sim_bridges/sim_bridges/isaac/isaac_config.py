"""Typed, validated parameters of the isaac_bridge node (one field = one ROS parameter). ROS-free.

ROS parameters are flat, so per-robot settings are parallel lists (`agents`,
`agent_kinds`, `origins`) and named things are "name: value" strings
(`named_poses: ["home: 0 -0.785 ..."]`, `tasks: ["carter_1: drive to ..."]`,
`task_goals: ["carter_1: 3.0 1.0", "franka_1: ready"]`); `validate()` parses
them once and names the parameter of the first bad value.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional

from brace_common.config import ConfigError, autostart_param, check_agent_ids, check_fields, diagnostics_period_param, param
from brace_common.planar import Pose2D

from .isaac_contract import DEFAULT_TOPICS, RobotKind, RobotSpec
from .isaac_skills import ExecLimits

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(/[A-Za-z_][A-Za-z0-9_]*)*")
"""A ROS namespace or relative topic name (tokens of letters, digits and underscores, not starting with a digit)."""
FRANKA_JOINTS = [f"panda_joint{i}" for i in range(1, 8)]


@dataclass(frozen=True)
class TaskGoal:
    """When a robot's task is done: a base within goal_tolerance_m of `position`, an arm at named `pose`."""

    robot: str
    position: Optional[tuple[float, float]] = None
    pose: str = ""

    def text(self) -> str:
        """The goal as a context entry writes it."""
        return f"at ({self.position[0]:g}, {self.position[1]:g})" if self.position else f"at pose {self.pose}"


def split_entry(parameter: str, entry: str) -> tuple[str, str]:
    """('name', 'rest') of a 'name: rest' entry; ConfigError naming `parameter` otherwise."""
    name, sep, rest = entry.partition(":")
    if not sep or not name.strip() or not rest.strip():
        raise ConfigError(parameter, f"'{entry}' is not 'name: value'")
    return name.strip().strip("/"), rest.strip()


def _floats(parameter: str, text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.replace(",", " ").split())
    except ValueError:
        raise ConfigError(parameter, f"'{text}' is not a list of numbers") from None
    if not all(math.isfinite(v) for v in values):
        raise ConfigError(parameter, f"'{text}' has a value that is not finite")
    return values


@dataclass
class IsaacBridgeConfig:
    """Parameters of the isaac_bridge node."""

    agents: list[str] = param(["carter_1", "franka_1"], "namespaces of the robots in Isaac Sim (OmniGraph "
                              "nodeNamespace, absolute: carter_1 -> /carter_1/odom); also their agent ids")
    agent_kinds: list[str] = param(["mobile", "arm"], "kind of each robot of `agents`: mobile (odom in, cmd_vel out) "
                                   "or arm (joint_states in, joint_command out)")
    origins: list[float] = param([], "x, y, yaw (m, m, rad) per robot in frame_id: where a base's odometry starts "
                                 "(Isaac Compute Odometry is relative to the start pose) or where an arm's base "
                                 "stands; [] = every robot at 0, 0, 0")
    camera_agents: list[str] = param(["carter_1"], "robots whose camera rgb + camera_info are contract topics "
                                     "(liveness, observations)")
    odom_topic: str = param(DEFAULT_TOPICS["odom"], "odometry topic in a robot's namespace (nav_msgs/Odometry)")
    joint_states_topic: str = param(DEFAULT_TOPICS["joint_states"], "joint state topic in a robot's namespace "
                                    "(sensor_msgs/JointState)")
    rgb_topic: str = param(DEFAULT_TOPICS["rgb"], "camera image topic in a robot's namespace (sensor_msgs/Image)")
    camera_info_topic: str = param(DEFAULT_TOPICS["camera_info"], "camera info topic in a robot's namespace "
                                   "(sensor_msgs/CameraInfo)")
    cmd_vel_topic: str = param(DEFAULT_TOPICS["cmd_vel"], "velocity command topic in a robot's namespace "
                               "(geometry_msgs/Twist)")
    joint_command_topic: str = param(DEFAULT_TOPICS["joint_command"], "joint command topic in a robot's namespace "
                                     "(sensor_msgs/JointState, positions)")
    frame_id: str = param("world", "frame of goals (move_to x, y), origins and agent_states positions")
    joint_names: list[str] = param(FRANKA_JOINTS, "the arm joints commanded and compared (every arm), in the order "
                                   "of named_poses' values")
    named_poses: list[str] = param(["home: 0.0 -0.785 0.0 -2.356 0.0 1.571 0.785",
                                    "ready: 0.0 -0.3 0.0 -1.9 0.0 1.6 0.785",
                                    "extended: 0.0 0.4 0.0 -1.2 0.0 1.6 0.785"],
                                   "arm poses move_joints(pose) goes to: 'name: one value per joint_names (rad)'")
    action_schema_file: str = param("package://sim_bridges/config/isaac_actions.yaml", "action schema plans are "
                                    "validated against (the planner's, with the bridge's `kinds` and ranges)")
    tasks: list[str] = param(["carter_1: drive to the loading bay at (3.0, 1.0) in the world frame.",
                              "franka_1: move the arm to its ready pose."],
                             "task entries of the context at episode start: 'robot: text'")
    task_goals: list[str] = param(["carter_1: 3.0 1.0", "franka_1: ready"], "when a robot's task is done: "
                                  "'robot: x y' (a base within goal_tolerance_m) or 'robot: pose' (an arm at the "
                                  "named pose); the episode succeeds when every goal was reached")
    constraints: list[str] = param(["Positions are metres in the world frame. A robot that fails a step stops "
                                    "and waits for a new plan."], "constraint entries at episode start (besides "
                                   "the skills of each robot, which the bridge writes from the schema)")
    goal_tolerance_m: float = param(0.15, "move_to succeeds within this distance of its goal (m)", 0.01, 10.0)
    max_linear_speed: float = param(0.6, "fastest forward speed a move_to commands (m/s)", 0.01, 10.0)
    max_angular_speed: float = param(1.2, "fastest yaw rate a move_to commands (rad/s)", 0.01, 10.0)
    linear_gain: float = param(0.8, "forward speed per metre to the goal (1/s)", 0.01, 100.0)
    angular_gain: float = param(2.0, "yaw rate per radian of heading error (1/s)", 0.01, 100.0)
    turn_in_place_rad: float = param(0.8, "heading error above which the base turns in place (rad)", 0.05, 3.1416)
    move_timeout_s: float = param(60.0, "a move_to not at its goal after this long fails as a timeout (s, ROS "
                                  "time)", 0.1, 86400.0)
    joint_tolerance_rad: float = param(0.03, "move_joints succeeds when every joint is this close (rad)", 0.001, 1.0)
    max_joint_speed: float = param(0.8, "fastest change of commanded joint positions (rad/s)", 0.01, 10.0)
    joints_timeout_s: float = param(20.0, "a move_joints not at its pose after this long fails as a timeout (s, "
                                    "ROS time)", 0.1, 86400.0)
    max_episode_s: float = param(300.0, "the episode ends, failed, after this long (s, ROS time: Isaac's clock)",
                                 1.0, 86400.0)
    stale_after_s: float = param(1.0, "a contract topic silent this long is stale: diagnostics ERROR; a robot whose "
                                 "odom / joint_states are stale is held (s, steady clock)", 0.05, 3600.0)
    wait_timeout_s: float = param(60.0, "diagnostics ERROR while contract topics are still missing after this long "
                                  "(s; the bridge keeps waiting)", 0.1, 86400.0)
    control_period_s: float = param(0.05, "period of the skill controllers and commands (s, steady clock)",
                                    0.005, 1.0)
    agent_state_period_s: float = param(0.2, "period of agent_states (s, steady clock)", 0.01, 60.0)
    observe_period_s: float = param(2.0, "period of each robot's observation context entry (s, steady clock)",
                                    0.1, 3600.0)
    diagnostics_period_s: float = diagnostics_period_param()
    variant: str = param("", "label of the run's variant, copied into the episode messages")
    autostart: bool = autostart_param()

    def validate(self) -> None:
        """ConfigError naming the first invalid parameter."""
        check_fields(self)
        robots = [r.strip("/") for r in self.agents]
        if not robots:
            raise ConfigError("agents", "name at least one robot namespace")
        check_agent_ids("agents", robots)  # a robot's namespace is its agent id
        if len(set(robots)) != len(robots):
            raise ConfigError("agents", f"{self.agents} names a robot twice")
        if len(self.agent_kinds) != len(robots):
            raise ConfigError("agent_kinds", f"needs one kind per robot ({len(robots)}), got {len(self.agent_kinds)}")
        kinds = {k.value for k in RobotKind}
        bad = [k for k in self.agent_kinds if k not in kinds]
        if bad:
            raise ConfigError("agent_kinds", f"'{bad[0]}' is not one of {sorted(kinds)}")
        if self.origins and len(self.origins) != 3 * len(robots):
            raise ConfigError("origins", f"needs x, y, yaw per robot ({3 * len(robots)} values) or none, "
                                         f"got {len(self.origins)}")
        if not all(math.isfinite(v) for v in self.origins):
            raise ConfigError("origins", "has a value that is not finite")
        unknown = [r for r in self.camera_agents if r.strip("/") not in robots]
        if unknown:
            raise ConfigError("camera_agents", f"'{unknown[0]}' is not one of agents")
        for name in ("odom_topic", "joint_states_topic", "rgb_topic", "camera_info_topic", "cmd_vel_topic",
                     "joint_command_topic"):
            if not NAME.fullmatch(getattr(self, name)):
                raise ConfigError(name, f"'{getattr(self, name)}' is not a relative topic name")
        if not self.frame_id.strip():
            raise ConfigError("frame_id", "must not be empty")
        if not self.action_schema_file.strip():
            raise ConfigError("action_schema_file", "must name the action schema")
        if RobotKind.ARM.value in self.agent_kinds:
            if not self.joint_names or len(set(self.joint_names)) != len(self.joint_names):
                raise ConfigError("joint_names", "an arm needs its joint names, each once")
        poses = self.poses()
        specs = {s.name: s for s in self.robot_specs()}
        for entry in self.tasks:
            robot, _ = split_entry("tasks", entry)
            if robot not in specs:
                raise ConfigError("tasks", f"'{robot}' is not one of agents")
        self.goals(specs, poses)

    def robot_specs(self) -> list[RobotSpec]:
        """The robots with their kind, origin and camera."""
        cameras = {c.strip("/") for c in self.camera_agents}
        specs = []
        for i, (name, kind) in enumerate(zip(self.agents, self.agent_kinds, strict=True)):
            origin = Pose2D(*(float(v) for v in self.origins[3 * i:3 * i + 3])) if self.origins else Pose2D(0, 0, 0)
            specs.append(RobotSpec(name.strip("/"), RobotKind(kind), origin, name.strip("/") in cameras))
        return specs

    def poses(self) -> dict[str, tuple[float, ...]]:
        """The named arm poses: name -> one position per joint name."""
        poses: dict[str, tuple[float, ...]] = {}
        for entry in self.named_poses:
            name, values = split_entry("named_poses", entry)
            if not NAME.fullmatch(name) or "/" in name:
                raise ConfigError("named_poses", f"'{name}' is not a pose name (letters, digits, underscores)")
            if name in poses:
                raise ConfigError("named_poses", f"'{name}' is defined twice")
            joints = _floats("named_poses", values)
            if len(joints) != len(self.joint_names):
                raise ConfigError("named_poses", f"'{name}' has {len(joints)} values for {len(self.joint_names)} "
                                                 "joint_names")
            poses[name] = joints
        if RobotKind.ARM.value in self.agent_kinds and not poses:
            raise ConfigError("named_poses", "an arm needs at least one named pose")
        return poses

    def goals(self, specs: Optional[dict[str, RobotSpec]] = None,
              poses: Optional[dict[str, tuple[float, ...]]] = None) -> list[TaskGoal]:
        """The task goals, one per robot at most."""
        specs = specs if specs is not None else {s.name: s for s in self.robot_specs()}
        poses = poses if poses is not None else self.poses()
        goals: dict[str, TaskGoal] = {}
        for entry in self.task_goals:
            robot, value = split_entry("task_goals", entry)
            if robot not in specs:
                raise ConfigError("task_goals", f"'{robot}' is not one of agents")
            if robot in goals:
                raise ConfigError("task_goals", f"'{robot}' has two goals")
            if specs[robot].kind == RobotKind.MOBILE:
                xy = _floats("task_goals", value)
                if len(xy) != 2:
                    raise ConfigError("task_goals", f"'{entry}': a mobile robot's goal is 'x y'")
                goals[robot] = TaskGoal(robot, position=(xy[0], xy[1]))
            elif value not in poses:
                raise ConfigError("task_goals", f"'{entry}': '{value}' is not one of named_poses")
            else:
                goals[robot] = TaskGoal(robot, pose=value)
        return list(goals.values())

    def task_texts(self) -> list[tuple[str, str]]:
        """(robot, text) of every task entry."""
        return [split_entry("tasks", entry) for entry in self.tasks]

    def topics(self) -> dict[str, str]:
        """Contract role -> topic name relative to a robot's namespace."""
        return {role: getattr(self, f"{role}_topic") for role in DEFAULT_TOPICS}

    def limits(self) -> ExecLimits:
        """How the skills are executed."""
        return ExecLimits(self.goal_tolerance_m, self.max_linear_speed, self.max_angular_speed, self.linear_gain,
                          self.angular_gain, self.turn_in_place_rad, self.move_timeout_s, self.joint_tolerance_rad,
                          self.max_joint_speed, self.joints_timeout_s)
