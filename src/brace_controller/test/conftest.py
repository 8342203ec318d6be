"""Test setup for brace_controller: make the shared helpers importable."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


import pytest  # noqa: E402
from ros_harness import RosHarness  # noqa: E402


@pytest.fixture
def ros():
    """A fresh rclpy context with a spinning executor, torn down after the test."""
    harness = RosHarness()
    yield harness
    harness.close()
