"""Launch the BRACE controller, the trigger monitor and the E-RECAP planner with the workspace parameter files.

    ros2 launch launch/brace_controller.launch.py
    ros2 launch launch/brace_controller.launch.py controller_params:=/path/to/brace_controller.yaml

The agents' state / outcome / context sources (simulator or robot bridges) are
launched separately.
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
        DeclareLaunchArgument("planner_params", default_value=str(CONFIG / "erecap_planner.yaml"),
                              description="ros__parameters file of erecap_planner"),
        Node(package="erecap_planner", executable="erecap_planner", name="erecap_planner",
             parameters=[LaunchConfiguration("planner_params")], output="screen"),
        Node(package="brace_controller", executable="trigger_monitor", name="trigger_monitor",
             parameters=[LaunchConfiguration("monitor_params")], output="screen"),
        Node(package="brace_controller", executable="brace_controller", name="brace_controller",
             parameters=[LaunchConfiguration("controller_params")], output="screen"),
    ])
