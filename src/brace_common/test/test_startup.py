"""A node executable stopped while it still imports its modules ends quietly; anything else keeps Python's way."""

from __future__ import annotations

import os
import signal as signals
import subprocess
import sys

import pytest

SCRIPT = """\
import os, signal, time
from brace_common.startup import quiet_until_spinning
quiet_until_spinning("demo_pkg", ("demo_node",))
os.kill(os.getpid(), signal.{signal})  # launch stops the run while this node still imports (seconds of torch)
time.sleep(60)
"""


@pytest.mark.parametrize("signal", ["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("executable, quiet", [("demo_node", True), ("demo_tool", False)])
def test_a_stop_while_importing_ends_a_node_executable_quietly(tmp_path, signal, executable, quiet):
    folder = tmp_path / "lib" / "demo_pkg"
    folder.mkdir(parents=True)
    path = folder / executable
    path.write_text(SCRIPT.format(signal=signal))
    # A pytest-xdist worker ignores SIGINT, and its children would inherit that: the script gets Python's default,
    # as a process started from a shell or by launch has.
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120,
                          env=os.environ.copy(), preexec_fn=lambda: signals.signal(signals.SIGINT, signals.SIG_DFL))
    if quiet:
        assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    else:  # not one of the package's node executables: Python's own answer
        assert proc.returncode != 0, proc.stderr
