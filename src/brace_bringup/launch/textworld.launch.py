"""Launch the BRACE stack on TextWorld cooking games: the textworld_world node and the control stack.

    ros2 launch brace_bringup textworld.launch.py
    ros2 launch brace_bringup textworld.launch.py variant:=no_brace

The nodes and parameter files of the 'textworld' stack (brace_bringup/graph.py: params/textworld_world.yaml,
params/textworld/control.yaml) with runs/textworld.yaml. Games are made offline on first use (~3 s each) in the
world's game_dir; the world starts the first episode once the stack is up (docs/textworld.md).
"""

from launch import LaunchDescription

from brace_bringup.launch_description import stack_launch_description


def generate_launch_description() -> LaunchDescription:
    """textworld_world + trigger_monitor + brace_controller + erecap_planner + audit_recorder, all at once."""
    return stack_launch_description("textworld.yaml", "brace_erecap")
