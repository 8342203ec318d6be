"""Launch the closed loop on the embedded warehouse: simulator, triggers, controller, planner, audit bag.

    ros2 launch brace_bringup brace_sim.launch.py
    ros2 launch brace_bringup brace_sim.launch.py variant:=no_brace output:=/tmp/my_run
    ros2 launch brace_bringup brace_sim.launch.py run:=variants.yaml variant:=brace_erecap_table8

The nodes and parameter files of the 'sim' stack (brace_bringup/graph.py) with
the run configuration's overrides and variant, in one parameter file that
brace-run writes the same way (`brace-run demo` runs the same
system in one process).
RViz: `rviz2 -d $(ros2 pkg prefix brace_bringup)/share/brace_bringup/rviz/brace.rviz`.
"""

from launch import LaunchDescription

from brace_bringup.launch_description import stack_launch_description


def generate_launch_description() -> LaunchDescription:
    """embedded_sim + trigger_monitor + brace_controller + erecap_planner + audit_recorder, all at once."""
    return stack_launch_description("demo.yaml", "brace_erecap")
