"""Rows of dicts as a CSV file (every table's CSV is written here)."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path


def write_rows(rows: Sequence[dict], path: Path) -> None:
    """`rows` as CSV at `path` (the columns: every key, in the order first seen); nothing when there are no rows."""
    if not rows:
        return
    columns = list(dict.fromkeys(key for r in rows for key in r))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
