"""The graph tests' helpers: a small run of the sim stack (a tiny planner model, two agents, two short episodes),
its bag check, and starting a stack's executables all at once as `ros2 launch` does."""

from __future__ import annotations

from pathlib import Path

from brace_audit.audit import records_from_bag
from brace_common.vocabulary import CallStatus
from brace_system_tests.process_graph import EPISODES, VARIANT, run_all_at_once, tiny_run_config  # noqa: F401 - re-exported


def check_bag(bag: Path) -> None:
    """Every episode ended, received plans, and the bag holds them."""
    records, note = records_from_bag(bag)
    assert note == "", note
    assert [e.episode for e in records.episodes] == list(range(EPISODES)), records.episodes
    assert all(e.plans > 0 for e in records.episodes), records.episodes
    assert {episode for episode, _agent, _signature in records.plans} == set(range(EPISODES))
    assert all(c.status == CallStatus.OK for c in records.calls[:2]), "the first calls were served, not refused"
