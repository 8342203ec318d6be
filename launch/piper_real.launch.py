"""Launch BRACE on the real AgileX PiPER arm: arm, two Orbbec cameras, OpenVLA executor, control stack, audit bag.

    robot_preflight config/robot/piper_real.yaml        # first: CAN up at 1 Mbit/s, cameras, VLA server
    ros2 launch launch/piper_real.launch.py
    ros2 launch launch/piper_real.launch.py variant:=no_brace namespace:=piper_1/brace

The nodes and parameter files of the 'piper_real' stack (brace_bringup/graph.py):
each node's defaults (config/<node>.yaml), the robot's settings
(config/robot/control.yaml) and this robot's hardware (config/robot/piper_real.yaml:
CAN port, camera serial numbers, VLA server, planner), with the variant of
config/runs/piper_real.yaml. docs/robot.md is the guide (wiring, CAN, udev,
first run, recovery).
"""

from pathlib import Path

from launch import LaunchDescription
from launch.actions import OpaqueFunction

from brace_bringup.launch_description import declare_arguments, stack_nodes

WORKSPACE = Path(__file__).resolve().parents[1]


def generate_launch_description() -> LaunchDescription:
    """piper_arm + front_camera + wrist_camera + openvla_executor + the control stack, all at once."""
    return LaunchDescription([
        *declare_arguments(WORKSPACE, "piper_real.yaml", "brace_erecap"),
        OpaqueFunction(function=lambda context: stack_nodes(context, WORKSPACE)),
    ])
