"""Test setup for sim_bridges: this folder and erecap_planner's tiny-model helpers importable."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "erecap_planner" / "test"))
