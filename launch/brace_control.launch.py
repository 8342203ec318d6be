"""Launch the BRACE control stack for a robot or an external simulator: triggers, controller, planner, audit bag.

    ros2 launch launch/brace_control.launch.py
    ros2 launch launch/brace_control.launch.py namespace:=robot_1/brace

The nodes and parameter files of the 'control' stack (brace_bringup/graph.py)
with config/runs/control.yaml. The agents' state / outcome / context sources
(a robot's or a simulator's bridge) are launched separately, in the same
namespace.
"""

from pathlib import Path

from launch import LaunchDescription
from launch.actions import OpaqueFunction

from brace_bringup.launch_description import declare_arguments, stack_nodes

WORKSPACE = Path(__file__).resolve().parents[1]


def generate_launch_description() -> LaunchDescription:
    """trigger_monitor + brace_controller + erecap_planner + audit_recorder, all at once."""
    return LaunchDescription([
        *declare_arguments(WORKSPACE, "control.yaml", "brace_erecap"),
        OpaqueFunction(function=lambda context: stack_nodes(context, WORKSPACE)),
    ])
