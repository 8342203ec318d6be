"""Every table of a run, from its RunRecords alone: what brace-run prints and `brace-audit report` recomputes.

The paper's tables (audit_report.report) for every world, then each world's
own table, chosen by the worlds the episodes name (Episode.world): the drone
intersection's for "airsim", Table 32 for "pickfruit" and "pusht" (the twin) and for "real" (operator_task's episodes on a
real robot).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Optional

from . import drone_report, pickfruit_report
from .audit_report import RunRecords, report
from .csv_rows import write_rows


@dataclass(frozen=True)
class WorldTable:
    """A world's own table: a row per variant, the text of those rows and the CSV file they are written to."""

    row: Callable[[RunRecords], dict]
    table: Callable[[Sequence[dict]], str]
    csv: str

    def report(self, runs: Sequence[RunRecords], folder: Optional[Path] = None) -> str:
        """The table of `runs` (one row per variant); with `folder`, also the CSV there."""
        rows = [self.row(r) for r in runs]
        if folder is not None:
            write_rows(rows, folder / self.csv)
        return self.table(rows)


WORLD_TABLES: dict[str, WorldTable] = {
    "airsim": WorldTable(drone_report.row, drone_report.table, drone_report.CSV),
    "pickfruit": WorldTable(pickfruit_report.row, pickfruit_report.table, pickfruit_report.CSV),
    "pusht": WorldTable(pickfruit_report.pusht_row, pickfruit_report.pusht_table, pickfruit_report.PUSHT_CSV),
    "real": WorldTable(pickfruit_report.row, partial(pickfruit_report.table, title=pickfruit_report.REAL_TITLE),
                       pickfruit_report.REAL_CSV),
}
"""Episode.world -> its table."""


def world_tables(runs: Sequence[RunRecords], folder: Optional[Path] = None) -> str:
    """The own table of each world among `runs` (its variants' rows), in the order the worlds first appear."""
    worlds = dict.fromkeys(r.world for r in runs if r.world in WORLD_TABLES)
    return "\n\n".join(WORLD_TABLES[w].report([r for r in runs if r.world == w], folder) for w in worlds)


def run_tables(runs: Sequence[RunRecords], folder: Optional[Path] = None) -> str:
    """The paper's tables of `runs` as markdown, then each world's own table."""
    own = world_tables(runs, folder)
    return report(list(runs)) + (f"\n{own}\n" if own else "")
