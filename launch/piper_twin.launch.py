"""Launch the real-robot graph without hardware: the PiPER arm node on the CAN twin, PickFruit, the whole stack.

    ros2 launch launch/piper_twin.launch.py
    ros2 launch launch/piper_twin.launch.py variant:=no_brace

The nodes and parameter files of the 'piper_twin' stack (brace_bringup/graph.py)
with config/runs/piper_twin_launch.yaml: as `brace-run config/runs/piper_twin.yaml`,
but every node its own process, so the twin and the arm node share python-can's
udp_multicast bus instead of its in-process virtual bus. Every node starts at
once; the twin world waits for its peers and the Replan server.
"""

from pathlib import Path

from launch import LaunchDescription
from launch.actions import OpaqueFunction

from brace_bringup.launch_description import declare_arguments, stack_nodes

WORKSPACE = Path(__file__).resolve().parents[1]


def generate_launch_description() -> LaunchDescription:
    """twin_world + piper_arm + front_camera (video) + openvla_executor + the control stack, all at once."""
    return LaunchDescription([
        *declare_arguments(WORKSPACE, "piper_twin_launch.yaml", "brace_erecap"),
        OpaqueFunction(function=lambda context: stack_nodes(context, WORKSPACE)),
    ])
