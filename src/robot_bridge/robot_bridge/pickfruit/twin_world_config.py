"""Validated parameters of the twin_world node (one field = one ROS parameter), ROS-free."""

from __future__ import annotations

from dataclasses import dataclass

from brace_common import names
from brace_common.config import ConfigError, ReadinessConfig, check_agent_ids, param

from ..orbbec.camera_config import NAME_PATTERN
from ..twin_task import TASKS


@dataclass
class TwinWorldConfig(ReadinessConfig):
    """Parameters of the twin_world node."""

    can_port: str = param("piper_twin", "CAN channel the twin answers on (a udp_multicast group across processes)")
    can_interface: str = param("virtual", "python-can interface of the twin: 'virtual' (one process: brace-run) or "
                                          "'udp_multicast' (separate processes: launch)")
    agent_id: str = param("arm_0", "agent id of the arm (context entries, plans counted)")
    task: str = param("pickfruit", "the task on the table: 'pickfruit' (fruits into the bowl) or 'pusht' (the T "
                      "block onto the goal)")
    episodes: int = param(3, "episodes to run", 1, 100000)
    seed: int = param(0, "seed of episode 0 (episode e uses seed + e)", 0, 2**31 - 1)
    tasks: int = param(1, "fruits to put in the bowl per episode", 1, 3)
    slip_probability: float = param(0.35, "probability that a grasp slips on the carry", 0.0, 1.0)
    hand_probability: float = param(0.0, "probability per episode that a hand takes the task's fruit away as the "
                                    "tool comes near it", 0.0, 1.0)
    phantom_probability: float = param(0.0, "probability per grasp that the gripper stops at the fruit's width "
                                       "holding nothing (the fruit stays)", 0.0, 1.0)
    contact_loss_probability: float = param(0.1, "PushT: probability per contact that the fingertips ride over the "
                                            "block's edge and lose it", 0.0, 1.0)
    camera_name: str = param("front_camera", "the rendered camera's topic prefix ('' = no camera images)")
    camera_calibration: str = param("package://robot_bridge/config/twin_front_camera.yaml",
                                    "calibration (with pose_in_base_link) of the rendered camera")
    camera_period_s: float = param(0.2, "seconds between rendered frames (the executor's and the verifier's period)",
                                   0.02, 10.0)
    feedback_period_s: float = param(0.005, "seconds between the twin's feedback frames (the real arm's: 0.005, "
                                     "200 Hz)", 0.001, 1.0)
    max_episode_s: float = param(60.0, "an episode that has not succeeded by then fails", 1.0, 3600.0)
    act_host: str = param("127.0.0.1", "address of the /act stand-in server")
    act_port: int = param(8765, "port of the /act stand-in server (0 = any free port)", 0, 65535)
    variant: str = param("", "the run's variant label, copied into Episode messages")
    period_s: float = param(0.1, "how often the episode is judged (s)", 0.01, 1.0)
    shutdown_when_done: bool = param(False, "exit the node's process after the last episode")
    replan_action: str = param(names.REPLAN, "Replan action whose server must answer before the first episode "
                               "starts ('' = do not wait for a planner)")

    def validate(self) -> None:
        """ConfigError naming the first invalid parameter."""
        if not self.can_port:
            raise ConfigError("can_port", "must not be empty")
        if self.can_interface not in ("virtual", "udp_multicast", "socketcan"):
            raise ConfigError("can_interface", f"'{self.can_interface}' is not virtual, udp_multicast or socketcan")
        check_agent_ids("agent_id", self.agent_id)
        if self.task not in TASKS:
            raise ConfigError("task", f"'{self.task}' is not one of {', '.join(TASKS)}")
        if self.camera_name and not NAME_PATTERN.fullmatch(self.camera_name):
            raise ConfigError("camera_name", f"'{self.camera_name}' is not a relative ROS name")
