"""E-RECAP planner: progressive token pruning inside the transformer (paper Sec. 3.3),
predictor training, budget-matched context compressors and the Replan action server."""
