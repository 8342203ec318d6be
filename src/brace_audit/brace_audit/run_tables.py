"""Every table of a run, from its RunRecords alone: what brace-run prints and `brace-audit report` recomputes.

The paper's tables (audit_report.report) for every world, then each world's
own table, chosen by the worlds the episodes name (Episode.world): the drone
intersection's for "airsim", Table 32 for "pickfruit".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Optional

from . import drone_report, pickfruit_report
from .audit_report import RunRecords, report

WORLD_TABLES: dict[str, Callable[[Sequence[RunRecords], Optional[Path]], str]] = {
    "airsim": drone_report.report,
    "pickfruit": pickfruit_report.report,
}
"""Episode.world -> its table (text; with a folder, its CSV written there)."""


def world_tables(runs: Sequence[RunRecords], folder: Optional[Path] = None) -> str:
    """The own table of each world among `runs` (its variants' rows), in the order the worlds first appear."""
    worlds = dict.fromkeys(r.world for r in runs if r.world in WORLD_TABLES)
    return "\n\n".join(WORLD_TABLES[w]([r for r in runs if r.world == w], folder) for w in worlds)


def run_tables(runs: Sequence[RunRecords], folder: Optional[Path] = None) -> str:
    """The paper's tables of `runs` as markdown, then each world's own table."""
    own = world_tables(runs, folder)
    return report(list(runs)) + (f"\n{own}\n" if own else "")
