"""Launch the AirSim drone intersection: the bridge, triggers, controller, planner, audit bag (and the AirSim peer).

    ros2 launch brace_bringup airsim.launch.py                   # K = 8 on brace-airsim-peer
    ros2 launch brace_bringup airsim.launch.py num_agents:=4 variant:=no_brace
    ros2 launch brace_bringup airsim.launch.py peer:=false host:=192.168.1.20 port:=41451   # a real AirSim

The nodes and parameter files of the 'airsim' stack (brace_bringup/graph.py) with runs/airsim_k8.yaml
(`brace-run airsim_k8` runs the same system in one process). With peer:=true (default) the
protocol-level peer starts beside the nodes with the settings.json of the run's intersection; with peer:=false
the bridge connects to the AirSim at host:port, whose settings.json must name the scenario's vehicles
(`brace-airsim-peer --write-settings FILE --agents K` writes one). Every process starts at once: the bridge
waits for the simulator, its peers and the Replan server.
RViz: `rviz2 -d $(ros2 pkg prefix brace_bringup)/share/brace_bringup/rviz/brace.rviz`.
"""

from launch import LaunchDescription

from brace_bringup.launch_description import stack_launch_description


def generate_launch_description() -> LaunchDescription:
    """airsim_bridge (+ brace-airsim-peer) + trigger_monitor + brace_controller + erecap_planner + audit_recorder."""
    return stack_launch_description("airsim_k8.yaml", "brace_erecap", airsim=True)
