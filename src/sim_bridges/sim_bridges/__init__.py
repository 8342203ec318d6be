"""Simulator bridges: the embedded multi-agent warehouse (default), AirSim and Isaac Sim adapters."""

from brace_common.startup import quiet_until_spinning

# A stop while one of the node executables still imports its modules: exit 0, no trace.
NODE_EXECUTABLES = ("embedded_sim", "airsim_bridge", "isaac_bridge", "textworld_world")
quiet_until_spinning("sim_bridges", NODE_EXECUTABLES)
