"""Launch the real-robot graph without hardware: the PiPER arm node on the CAN twin, PickFruit, the whole stack.

    ros2 launch brace_bringup piper_twin.launch.py
    ros2 launch brace_bringup piper_twin.launch.py variant:=no_brace

The nodes and parameter files of the 'piper_twin' stack (brace_bringup/graph.py)
with runs/piper_twin_launch.yaml: as `brace-run piper_twin`,
but every node its own process, so the twin and the arm node share python-can's
udp_multicast bus instead of its in-process virtual bus. Every node starts at
once; the twin world waits for its peers and the Replan server.
"""

from launch import LaunchDescription

from brace_bringup.launch_description import stack_launch_description


def generate_launch_description() -> LaunchDescription:
    """twin_world (rendering the front camera) + piper_arm + openvla_executor + visual_verifier + the control stack,
    all at once."""
    return stack_launch_description("piper_twin_launch.yaml", "brace_erecap")
