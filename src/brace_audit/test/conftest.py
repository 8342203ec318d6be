"""Test setup for brace_audit: this folder's helpers importable (view_samples), the `ros` fixture."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from brace_common.testing import ros  # noqa: E402, F401
