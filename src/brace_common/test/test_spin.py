"""spin_node: the exit code of a node that fails to start, and of one shut down while it starts or is built."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.node import Node

from brace_common.spin import AUTOSTART, spin_node
from brace_common.testing import stop_processes, wait_for


class FailingStart(LifecycleNode):
    """A node whose configure fails; with `shut_down`, because its context went down meanwhile (what SIGINT or
    SIGTERM does to a node that is still loading its model)."""

    def __init__(self, shut_down: bool) -> None:
        super().__init__("failing_start")
        self.declare_parameter(AUTOSTART, True)
        self.shut_down = shut_down

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Fail (after shutting the context down when asked)."""
        if self.shut_down:
            self.context.try_shutdown()
        return TransitionCallbackReturn.FAILURE


@pytest.mark.parametrize("shut_down, code", [(False, 2), (True, 0)])
def test_a_failed_start_exits_2_unless_the_node_was_shut_down_meanwhile(shut_down, code):
    assert spin_node(lambda: FailingStart(shut_down), "failing_start", args=[]) == code


class ShutDownWhileBuilt(Node):
    """A node whose context goes down between its creation and its first publisher (a slow constructor on a busy
    machine, SIGINT in between); with `shut_down` False the constructor fails for its own reason."""

    def __init__(self, shut_down: bool) -> None:
        super().__init__("shut_down_while_built")
        if shut_down:
            self.context.try_shutdown()
            self.create_publisher(LifecycleState, "late", 1)
        else:
            raise RuntimeError("a constructor's own fault")


def test_a_node_shut_down_while_it_is_built_exits_0_and_another_fault_still_raises():
    assert spin_node(lambda: ShutDownWhileBuilt(True), "shut_down_while_built", args=[]) == 0
    with pytest.raises(RuntimeError, match="own fault"):
        spin_node(lambda: ShutDownWhileBuilt(False), "shut_down_while_built", args=[])


def test_a_signal_while_the_handlers_are_set_up_ends_the_start_quietly(monkeypatch):
    """SIGINT between installing the handlers and starting their wake thread (a busy machine's `ros2 launch` stopping
    a run): no KeyboardInterrupt out of spin_node, nothing built, exit 0."""
    start = threading.Thread.start

    def start_after_a_signal(thread: threading.Thread) -> None:
        if thread.name == "shutdown_signals":
            os.kill(os.getpid(), signal.SIGINT)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", start_after_a_signal)
    handler = signal.getsignal(signal.SIGINT)
    built = []
    try:
        assert spin_node(lambda: built.append("node"), "never_built", args=[]) == 0
    finally:
        signal.signal(signal.SIGINT, handler)  # a stopped node's process ignores SIGINT from then on
    assert built == []


class SignalledWhileBuilt(Node):
    """A node that gets SIGTERM half way through its constructor (a recorder whose first subscription already
    takes messages in when `ros2 launch` stops the run)."""

    def __init__(self) -> None:
        super().__init__("signalled_while_built")
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, before the next line
        self.built = True


@pytest.mark.parametrize("interrupt_start", [True, False])
def test_a_signal_while_a_node_is_built_aborts_the_build_unless_the_node_asks_to_be_finished(interrupt_start):
    finished = []
    code = spin_node(SignalledWhileBuilt, "signalled_while_built", args=[],
                     on_exit=lambda node: finished.append(node.built), interrupt_start=interrupt_start)
    assert code == 0
    assert finished == ([] if interrupt_start else [True])


def test_a_process_that_does_not_stop_writes_its_stacks_before_it_is_killed(tmp_path):
    """stop_processes: SIGINT, then (past the timeout) STACKS_SIGNAL, whose faulthandler dump names where the process
    waits, then SIGKILL."""
    script = ("import time\nfrom brace_common.spin import ShutdownSignals\nwith ShutdownSignals() as signals:\n"
              "    signals.stopping()\n    print('stopping', flush=True)\n    while True:\n"
              "        time.sleep(0.05)  # stuck_in_teardown\n")
    log = tmp_path / "stuck.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=out, stderr=subprocess.STDOUT)
    wait_for(lambda: "stopping" in log.read_text(), 60.0, "the process in its stop")
    assert stop_processes({"stuck": proc}, timeout_s=1.0) == ["stuck"]
    assert proc.returncode == -signal.SIGKILL
    text = log.read_text()
    assert "most recent call first" in text and 'File "<string>", line 7' in text, text
