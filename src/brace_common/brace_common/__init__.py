"""Shared plumbing of the BRACE-ROS packages (uses none of them)."""
