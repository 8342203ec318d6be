"""Launch the BRACE controller and the trigger monitor with the workspace parameter files.

    ros2 launch launch/brace_controller.launch.py
    ros2 launch launch/brace_controller.launch.py controller_params:=/path/to/brace_controller.yaml

The planner (Replan action server) and the agents' state/outcome sources are
launched separately (later issues add the planner and simulator launch files).
"""

from pathlib import Path

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

CONFIG = Path(__file__).resolve().parents[1] / "config"


def generate_launch_description() -> LaunchDescription:
    """Controller + trigger monitor, each with its ros__parameters file."""
    return LaunchDescription([
        DeclareLaunchArgument("controller_params", default_value=str(CONFIG / "brace_controller.yaml"),
                              description="ros__parameters file of brace_controller"),
        DeclareLaunchArgument("monitor_params", default_value=str(CONFIG / "trigger_monitor.yaml"),
                              description="ros__parameters file of trigger_monitor"),
        Node(package="brace_controller", executable="trigger_monitor", name="trigger_monitor",
             parameters=[LaunchConfiguration("monitor_params")], output="screen"),
        Node(package="brace_controller", executable="brace_controller", name="brace_controller",
             parameters=[LaunchConfiguration("controller_params")], output="screen"),
    ])
