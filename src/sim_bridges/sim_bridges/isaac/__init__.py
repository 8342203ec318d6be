"""Isaac Sim: the bridge node over Isaac's ROS 2 bridge topics, its contract, feed and skill schema."""
