"""E-RECAP planner: progressive token pruning inside the transformer (paper Sec. 3.3),
predictor training, budget-matched context compressors and the Replan action server."""

from brace_common.startup import quiet_until_spinning

# A stop while one of the node executables still imports its modules: exit 0, no trace.
NODE_EXECUTABLES = ("erecap_planner",)
quiet_until_spinning("erecap_planner", NODE_EXECUTABLES)
