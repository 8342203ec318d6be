"""Launch the closed loop on the embedded warehouse: simulator, triggers, controller, planner, audit bag.

    ros2 launch launch/brace_sim.launch.py
    ros2 launch launch/brace_sim.launch.py sim_params:=/path/to/embedded_sim.yaml bag:=/tmp/my_run

The same nodes and parameter files as `brace-run config/runs/demo.yaml` (which
composes them in one process where the launch tool is not installed). RViz:
`rviz2 -d config/brace.rviz`.
"""

from pathlib import Path

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

CONFIG = Path(__file__).resolve().parents[1] / "config"


def generate_launch_description() -> LaunchDescription:
    """embedded_sim + trigger_monitor + brace_controller + erecap_planner + audit_recorder."""
    return LaunchDescription([
        DeclareLaunchArgument("sim_params", default_value=str(CONFIG / "embedded_sim.yaml"),
                              description="ros__parameters file of embedded_sim"),
        DeclareLaunchArgument("monitor_params", default_value=str(CONFIG / "trigger_monitor.yaml"),
                              description="ros__parameters file of trigger_monitor"),
        DeclareLaunchArgument("controller_params", default_value=str(CONFIG / "brace_controller.yaml"),
                              description="ros__parameters file of brace_controller"),
        DeclareLaunchArgument("planner_params", default_value=str(CONFIG / "erecap_planner.yaml"),
                              description="ros__parameters file of erecap_planner"),
        DeclareLaunchArgument("planner_sim_params", default_value=str(CONFIG / "erecap_planner_sim.yaml"),
                              description="erecap_planner overrides for the warehouse (schema, decoding)"),
        DeclareLaunchArgument("recorder_params", default_value=str(CONFIG / "audit_recorder.yaml"),
                              description="ros__parameters file of audit_recorder"),
        DeclareLaunchArgument("bag", default_value="", description="audit bag directory ('' = ./brace_audit_<time>)"),
        Node(package="sim_bridges", executable="embedded_sim", name="embedded_sim",
             parameters=[LaunchConfiguration("sim_params")], output="screen"),
        Node(package="brace_controller", executable="trigger_monitor", name="trigger_monitor",
             parameters=[LaunchConfiguration("monitor_params"), {"periodic_stagger_steps": 1}], output="screen"),
        Node(package="brace_controller", executable="brace_controller", name="brace_controller",
             parameters=[LaunchConfiguration("controller_params"),
                         {"budget_profile": "embedded", "max_consecutive_deferrals": 2}],
             output="screen"),
        Node(package="erecap_planner", executable="erecap_planner", name="erecap_planner",
             parameters=[LaunchConfiguration("planner_params"), LaunchConfiguration("planner_sim_params")],
             output="screen"),
        Node(package="brace_controller", executable="audit_recorder", name="audit_recorder",
             parameters=[LaunchConfiguration("recorder_params"), {"output_dir": LaunchConfiguration("bag")}],
             output="screen"),
    ])
