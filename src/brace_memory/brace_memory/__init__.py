"""Memory modules on the replanning call path (DESIGN 3b) and their store."""
