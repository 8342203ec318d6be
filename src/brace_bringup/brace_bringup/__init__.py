"""How BRACE-ROS is brought up: stacks, run configurations, brace-run."""
