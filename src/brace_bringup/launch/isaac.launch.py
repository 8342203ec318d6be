"""Launch the BRACE stack beside a running Isaac Sim: the isaac_bridge and the control stack, on Isaac's clock.

    ros2 launch brace_bringup isaac.launch.py
    ros2 launch brace_bringup isaac.launch.py variant:=no_brace

Start Isaac Sim first or after (any order): its stage holds one OmniGraph per
robot speaking the bridge's topic contract (docs/isaac_sim.md), and it must
be playing, so /clock runs. The nodes and parameter files of the 'isaac'
stack (brace_bringup/graph.py: params/isaac_bridge.yaml,
params/isaac/control.yaml) with runs/isaac.yaml; every node with
use_sim_time. The bridge waits until every robot's topics are live, then
starts the episode; give Isaac Sim and this machine the same ROS_DOMAIN_ID.
"""

from launch import LaunchDescription

from brace_bringup.launch_description import stack_launch_description


def generate_launch_description() -> LaunchDescription:
    """isaac_bridge + trigger_monitor + brace_controller + erecap_planner + audit_recorder, all at once."""
    return stack_launch_description("isaac.yaml", "brace_erecap")
