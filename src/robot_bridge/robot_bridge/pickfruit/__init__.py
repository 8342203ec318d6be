"""PickFruit: the world beside the CAN twin, its rollouts, the twin world node and the operator episodes."""
