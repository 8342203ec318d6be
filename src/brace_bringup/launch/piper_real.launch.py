"""Launch BRACE on the real AgileX PiPER arm: arm, two Orbbec cameras, OpenVLA executor, control stack, audit bag.

    # first: CAN up at 1 Mbit/s, cameras, VLA server
    robot_preflight $(ros2 pkg prefix brace_bringup)/share/brace_bringup/params/robot/piper_real.yaml
    ros2 launch brace_bringup piper_real.launch.py
    ros2 launch brace_bringup piper_real.launch.py variant:=no_brace namespace:=piper_1/brace

The nodes and parameter files of the 'piper_real' stack (brace_bringup/graph.py):
each node's defaults (params/<node>.yaml), the robot's settings
(params/robot/control.yaml) and this robot's hardware (params/robot/piper_real.yaml:
CAN port, camera serial numbers, VLA server, planner), with the variant of
runs/piper_real.yaml. docs/robot.md is the guide (wiring, CAN, udev,
first run, recovery).
"""

from launch import LaunchDescription

from brace_bringup.launch_description import stack_launch_description


def generate_launch_description() -> LaunchDescription:
    """piper_arm + front_camera + wrist_camera + openvla_executor + visual_verifier + the control stack, all at
    once."""
    return stack_launch_description("piper_real.yaml", "brace_erecap")
