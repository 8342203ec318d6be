"""Test setup: the `ros` fixture."""

from brace_common.testing import ros  # noqa: F401
