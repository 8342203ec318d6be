"""Training examples saved to a file, so they are built on one machine and trained on another.

Building warehouse examples runs the world, its oracle and the planner's
renderer (ROS message types included); training needs only the model. A
gzip-compressed JSON-lines file carries the examples between the two: one
line per example with its prompt ids, target ids, token budget and protected
mask. `train_saved_cli` reads it on an accelerator host.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable
from pathlib import Path

from .adapter_training import PlanExample

FORMAT = "brace_training.plan_examples/1"
"""The first line of a saved examples file: what the file holds and its version."""


def save_examples(path: str | Path, examples: Iterable[PlanExample]) -> int:
    """Write `examples` to `path` (gzip JSON lines, written whole before it is renamed into place); return the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    count = 0
    with gzip.open(partial, "wt", encoding="utf-8") as out:
        out.write(json.dumps({"format": FORMAT}) + "\n")
        for ex in examples:
            out.write(json.dumps({"prompt_ids": ex.prompt_ids, "target_ids": ex.target_ids,
                                  "token_budget": ex.token_budget,
                                  "protect": None if ex.protect is None else [int(p) for p in ex.protect],
                                  "choice": None if ex.choice is None else [int(c) for c in ex.choice]}) + "\n")
            count += 1
    partial.replace(path)
    return count


def load_examples(paths: Iterable[str | Path]) -> list[PlanExample]:
    """The examples of every file in `paths`, in order; ValueError naming a file that is not a saved examples file."""
    out: list[PlanExample] = []
    for path in paths:
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            try:
                header = json.loads(next(lines))
            except (StopIteration, json.JSONDecodeError, OSError, EOFError) as exc:
                raise ValueError(f"{path} is not a saved examples file ({exc})") from exc
            if not isinstance(header, dict) or header.get("format") != FORMAT:
                raise ValueError(f"{path} is not a saved examples file (first line {header!r}, expected {FORMAT})")
            for n, line in enumerate(lines, 2):
                row = json.loads(line)
                try:
                    protect, choice = row["protect"], row.get("choice")  # files before the choice mask have none
                    out.append(PlanExample([int(i) for i in row["prompt_ids"]], [int(i) for i in row["target_ids"]],
                                           row["token_budget"], None if protect is None else [bool(p) for p in protect],
                                           None if choice is None else [bool(c) for c in choice]))
                except (KeyError, TypeError, ValueError) as exc:
                    raise ValueError(f"{path}:{n}: malformed example ({exc!r})") from exc
    return out
