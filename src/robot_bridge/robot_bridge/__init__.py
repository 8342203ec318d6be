"""Robot bridges: the AgileX PiPER arm and its CAN twin, Orbbec cameras, the OpenVLA executor (ROS-free cores, thin nodes)."""
