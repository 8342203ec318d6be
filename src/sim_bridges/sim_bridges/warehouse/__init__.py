"""The embedded multi-agent warehouse: the world, its feed to the planner, the embedded_sim node, RViz markers."""
