"""Test setup for erecap_planner: make the shared helpers importable."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
