"""How a call stops early: `CallAborted` (deadline passed or call cancelled) and the checkpoint that raises it.

Torch-free, so a server-backed planner can stop its calls without loading the in-process model's modules.
"""

from __future__ import annotations

from collections.abc import Callable


class CallAborted(RuntimeError):
    """A call's work was stopped at a checkpoint (deadline passed or call cancelled)."""


def checkpoint_of(abort: Callable[[], bool], where: str) -> Callable[[], None]:
    """A checkpoint for long work in phase `where`: raises CallAborted once `abort()` is true."""
    def checkpoint() -> None:
        if abort():
            raise CallAborted(f"during {where}")
    return checkpoint
