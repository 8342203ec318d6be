"""A node executable's first moments: a stop signal while it still imports its modules ends it quietly.

`ros2 launch` stops every process of a run as soon as the run ends; a node that ended it within seconds of the start
(an invalid parameter) leaves the others importing (the planner's torch takes seconds), and Python answers SIGINT
there with a KeyboardInterrupt trace and exit -2 beside the real error. Each package's `__init__` calls
`quiet_until_spinning` with its node executables: only when the process is one of them (argv[0] is
lib/<package>/<executable>, as `ros2 run` and launch_ros start it) SIGINT and SIGTERM end it with 0 and no trace,
until spin_node installs its own handlers (brace_common.spin.ShutdownSignals). Standard library only, so it costs
nothing before the heavy imports it guards.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterable
from pathlib import Path


def _exit_quietly(signum: int, frame) -> None:
    raise SystemExit(0)


def running_as(package: str, executables: Iterable[str]) -> bool:
    """True when this process is one of `package`'s installed `executables` (lib/<package>/<name>)."""
    path = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    return path is not None and path.parent.name == package and path.name in set(executables)


def quiet_until_spinning(package: str, executables: Iterable[str]) -> None:
    """When this process is one of `package`'s node `executables`: SIGINT / SIGTERM exit 0 without a trace from now
    until spin_node takes the signals over."""
    if running_as(package, executables) and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _exit_quietly)
