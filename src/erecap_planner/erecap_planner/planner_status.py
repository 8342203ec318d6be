"""The planner's /diagnostics status: its lifecycle state and configuration, then what each of its owners reports.

ROS-free: the node hands in its state, its config and its owners' Health; this merges them (docs/nodes.md names
the keys).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Optional, Protocol

from brace_common.counters import Health

from .config import PlannerConfig

if TYPE_CHECKING:
    from brace_memory.system import MemorySystem


class Reporting(Protocol):
    """An owner of counters or state that reports them (inputs, calls, schema, backend, lookahead)."""

    def health(self) -> Health:
        """What it reports on /diagnostics."""


def reported(*owners: Optional[Reporting]) -> list[Health]:
    """The Health of each owner there is (None: one this configuration has not)."""
    return [owner.health() for owner in owners if owner is not None]


def planner_health(state: str, cfg: Optional[PlannerConfig], schema_source: str, configure_error: str,
                   owners: Iterable[Health]) -> Health:
    """The state, model, action schema and compressor (all "" before a configure), an error while a failed
    configure stands (`configure_error`, "" when none), then `owners` merged. A schema from the world is named by
    `schema_source` (the WorldInfo in use), "none yet" before the first."""
    schema = ((schema_source or "none yet") if cfg.schema_from_world() else cfg.action_schema_file) if cfg else ""
    health = Health({"state": state, "model": cfg.model_path if cfg else "", "action_schema": schema,
                     "compressor": cfg.compressor if cfg else ""},
                    errors=(f"configure failed: {configure_error}",) if configure_error else ())
    for part in owners:
        health += part
    return health


def memory_health(memory: MemorySystem, summariser_url: str) -> Health:
    """The memory modules composed, what summarises episodic records (`summariser_url`, "": the templates) and
    what the memory system reports."""
    return Health({"memory.modules": ",".join(memory.modules) or "none",
                   "memory.summariser": summariser_url or "templates"}) + memory.health()
