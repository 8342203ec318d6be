"""Test setup: the `ros` fixture (a fresh rclpy context with a spinning executor)."""

from brace_common.testing import ros  # noqa: F401
