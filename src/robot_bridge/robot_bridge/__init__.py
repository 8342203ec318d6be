"""Robot bridges: the AgileX PiPER arm and its CAN twin, Orbbec cameras, the OpenVLA executor (ROS-free cores, thin nodes)."""

from brace_common.startup import quiet_until_spinning

# A stop while one of the node executables still imports its modules: exit 0, no trace.
NODE_EXECUTABLES = ("piper_arm", "piper_twin", "twin_world", "orbbec_camera", "openvla_executor", "visual_verifier",
                    "operator_task")
quiet_until_spinning("robot_bridge", NODE_EXECUTABLES)
