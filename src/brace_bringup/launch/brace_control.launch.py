"""Launch the BRACE control stack for a robot or an external simulator: triggers, controller, planner, audit bag.

    ros2 launch brace_bringup brace_control.launch.py
    ros2 launch brace_bringup brace_control.launch.py namespace:=robot_1/brace

The nodes and parameter files of the 'control' stack (brace_bringup/graph.py)
with runs/control.yaml. The agents' state / outcome / context sources
(a robot's or a simulator's bridge) are launched separately, in the same
namespace.
"""

from launch import LaunchDescription

from brace_bringup.launch_description import stack_launch_description


def generate_launch_description() -> LaunchDescription:
    """trigger_monitor + brace_controller + erecap_planner + audit_recorder, all at once."""
    return stack_launch_description("control.yaml", "brace_erecap")
