"""Validated configuration of the piper_arm node (one field = one ROS parameter), ROS-free."""

from __future__ import annotations

import math
from dataclasses import dataclass

from brace_common.config import ConfigError, autostart_param, check_agent_ids, check_fields, diagnostics_period_param, param

from .arm_safety import SafetyLimits
from .piper_driver import DriverConfig
from .piper_units import GRIPPER_EFFORT_MAX_NM, GRIPPER_RANGE_M, JOINT_COUNT, JOINT_LIMITS_RAD


def can_interfaces() -> frozenset[str]:
    """python-can's interface names (what `can_interface` may be)."""
    # optional: python-can is needed only by the arm's CAN bus
    from can.interfaces import VALID_INTERFACES

    return frozenset(VALID_INTERFACES)


_SAFE = SafetyLimits()


@dataclass
class PiperArmConfig:
    """Parameters of the piper_arm node."""

    can_port: str = param("can0", "CAN port (socketcan interface name, or the channel of another python-can interface)")
    can_interface: str = param("socketcan", "python-can interface: 'socketcan' for the arm; 'virtual' / "
                               "'udp_multicast' for the twin")
    agent_id: str = param("arm_0", "agent id of this arm in agent_states")
    frame_id: str = param("base_link", "frame of end_pose, agent_states and the workspace box")
    autostart: bool = autostart_param(False)
    feedback_period_s: float = param(0.005, "shortest period of joint_states and end_pose (s; the arm reports at 200 Hz)",
                                     0.001, 1.0)
    agent_state_period_s: float = param(0.1, "period of agent_states (s)", 0.005, 10.0)
    diagnostics_period_s: float = diagnostics_period_param()
    supervision_period_s: float = param(0.02, "how often CAN health, arm faults and the watchdog are checked (s)",
                                        0.002, 1.0)
    command_timeout_s: float = param(0.5, "no command for this long: hold position (s)", 0.01, 60.0)
    feedback_timeout_s: float = param(2.0, "activate waits this long for the arm's first frames (s)", 0.1, 60.0)
    silence_timeout_s: float = param(0.25, "no feedback frame from the arm itself (status, end pose, joints, "
                                     "gripper; never the node's own frames echoed) for this long: can_silent (s)",
                                     0.01, 10.0)
    silence_recovery_s: float = param(0.5, "can_silent clears once the arm's own feedback has arrived this long "
                                      "without a silent gap (s)", 0.0, 60.0)
    enable_attempts: int = param(20, "enable attempts at activate / ~/enable before giving up", 1, 1000)
    enable_interval_s: float = param(0.1, "pause between enable attempts (s)", 0.001, 10.0)
    reconnect_initial_s: float = param(0.5, "first wait before reconnecting after CAN silence (s); doubles", 0.01,
                                       60.0)
    reconnect_max_s: float = param(8.0, "longest wait between reconnection attempts (s)", 0.01, 600.0)
    speed_percent: int = param(_SAFE.speed_percent, "motion speed percentage (MotionCtrl_2)", 1, 100)
    gripper_effort_nm: float = param(1.0, "gripper effort of gripper commands (N·m)", 0.0, GRIPPER_EFFORT_MAX_NM)
    joint_lower_rad: list[float] = param(list(_SAFE.joint_lower_rad), "lower joint limits (rad), joint1..6; within "
                                         "the SDK's table")
    joint_upper_rad: list[float] = param(list(_SAFE.joint_upper_rad), "upper joint limits (rad), joint1..6; within "
                                         "the SDK's table")
    workspace_min_m: list[float] = param(list(_SAFE.workspace_min_m), "workspace box lower corner x, y, z (m, "
                                         "base_link) for end-effector targets")
    workspace_max_m: list[float] = param(list(_SAFE.workspace_max_m), "workspace box upper corner x, y, z (m)")
    max_joint_step_rad: float = param(_SAFE.max_joint_step_rad, "largest joint change one command may ask (rad)",
                                      1e-4, 3.2)
    max_translation_step_m: float = param(_SAFE.max_translation_step_m, "longest end-effector translation one "
                                          "command may ask (m)", 1e-5, 1.0)
    max_rotation_step_rad: float = param(_SAFE.max_rotation_step_rad, "largest end-effector rotation one command "
                                         "may ask (rad)", 1e-4, 3.2)
    gripper_min_m: float = param(GRIPPER_RANGE_M[0], "smallest gripper opening a command may ask (m)",
                                 GRIPPER_RANGE_M[0], GRIPPER_RANGE_M[1])
    gripper_max_m: float = param(GRIPPER_RANGE_M[1], "largest gripper opening a command may ask (m)",
                                 GRIPPER_RANGE_M[0], GRIPPER_RANGE_M[1])

    def validate(self) -> None:
        """Raise ConfigError naming the first invalid parameter."""
        check_fields(self)
        if not self.can_port.strip():
            raise ConfigError("can_port", "must name a CAN port")
        if self.can_interface not in can_interfaces():
            raise ConfigError("can_interface", f"'{self.can_interface}' is not a python-can interface (socketcan, "
                              f"virtual, udp_multicast, ...: {', '.join(sorted(can_interfaces()))})")
        check_agent_ids("agent_id", self.agent_id)
        if not self.frame_id.strip():
            raise ConfigError("frame_id", "must not be empty")
        if self.silence_timeout_s <= self.supervision_period_s:
            raise ConfigError("silence_timeout_s", f"{self.silence_timeout_s} is not above supervision_period_s "
                              f"{self.supervision_period_s}")
        if self.reconnect_initial_s > self.reconnect_max_s:
            raise ConfigError("reconnect_max_s", f"{self.reconnect_max_s} is below reconnect_initial_s "
                              f"{self.reconnect_initial_s}")
        for name, corner in (("joint_lower_rad", 0), ("joint_upper_rad", 1)):
            values = getattr(self, name)
            if len(values) != JOINT_COUNT:
                raise ConfigError(name, f"needs {JOINT_COUNT} values, got {len(values)}")
            for i, value in enumerate(values):
                sdk = JOINT_LIMITS_RAD[i]
                if not math.isfinite(value) or not sdk[0] <= value <= sdk[1]:
                    raise ConfigError(name, f"joint{i + 1} {'upper' if corner else 'lower'} limit {value} is outside "
                                      f"the SDK's [{sdk[0]}, {sdk[1]}] rad")
        for i, (lo, hi) in enumerate(zip(self.joint_lower_rad, self.joint_upper_rad, strict=True)):
            if lo >= hi:
                raise ConfigError("joint_upper_rad", f"joint{i + 1} upper {hi} is not above its lower {lo}")
        for name in ("workspace_min_m", "workspace_max_m"):
            values = getattr(self, name)
            if len(values) != 3 or not all(math.isfinite(v) for v in values):
                raise ConfigError(name, f"needs 3 finite values (x, y, z), got {values}")
        for axis, lo, hi in zip("xyz", self.workspace_min_m, self.workspace_max_m, strict=True):
            if lo >= hi:
                raise ConfigError("workspace_max_m", f"{axis} max {hi} is not above its min {lo}")
        if self.gripper_min_m >= self.gripper_max_m:
            raise ConfigError("gripper_max_m", f"{self.gripper_max_m} is not above gripper_min_m {self.gripper_min_m}")

    def limits(self) -> SafetyLimits:
        """The safety limits these parameters describe (validated)."""
        limits = SafetyLimits(
            joint_lower_rad=tuple(self.joint_lower_rad), joint_upper_rad=tuple(self.joint_upper_rad),
            workspace_min_m=tuple(self.workspace_min_m), workspace_max_m=tuple(self.workspace_max_m),
            max_joint_step_rad=self.max_joint_step_rad, max_translation_step_m=self.max_translation_step_m,
            max_rotation_step_rad=self.max_rotation_step_rad,
            gripper_range_m=(self.gripper_min_m, self.gripper_max_m), speed_percent=self.speed_percent)
        limits.validate()
        return limits

    def driver(self) -> DriverConfig:
        """The driver's share of these parameters."""
        return DriverConfig(self.can_port, self.can_interface, self.speed_percent, self.gripper_effort_nm,
                            self.silence_timeout_s)
