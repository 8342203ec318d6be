"""Launch the closed loop on the embedded warehouse: simulator, triggers, controller, planner, audit bag.

    ros2 launch launch/brace_sim.launch.py
    ros2 launch launch/brace_sim.launch.py variant:=no_brace output:=/tmp/my_run
    ros2 launch launch/brace_sim.launch.py run:=config/runs/variants.yaml variant:=brace_erecap_table8

The nodes and parameter files of the 'sim' stack (brace_bringup/graph.py) with
the run configuration's overrides and variant, in one parameter file that
brace-run writes the same way (`brace-run config/runs/demo.yaml` runs the same
system in one process). RViz: `rviz2 -d config/brace.rviz`.
"""

from pathlib import Path

from launch import LaunchDescription
from launch.actions import OpaqueFunction

from brace_bringup.launch_description import declare_arguments, stack_nodes

WORKSPACE = Path(__file__).resolve().parents[1]


def generate_launch_description() -> LaunchDescription:
    """embedded_sim + trigger_monitor + brace_controller + erecap_planner + audit_recorder, all at once."""
    return LaunchDescription([
        *declare_arguments(WORKSPACE, "demo.yaml", "brace_erecap"),
        OpaqueFunction(function=lambda context: stack_nodes(context, WORKSPACE)),
    ])
