"""Entry-point helper shared by the nodes: init, build, (autostart,) spin, and an orderly, quiet shutdown.

A node ends on SIGINT or SIGTERM, or when its `until` holds, in one order: the spin stops, the callbacks still
running finish (a call in flight is answered) with the context still valid, the node is destroyed, then the context
is shut down. docs/hardening.md ("Shutdown and idle") says why rclpy's own signal handlers are not used.
"""

from __future__ import annotations

import faulthandler
import inspect
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Optional

import rclpy
from rclpy._rclpy_pybind11 import RCLError
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.exceptions import InvalidHandle
from rclpy.executors import Executor, ExternalShutdownException, MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions

from .config import ConfigError

AUTOSTART = "autostart"
"""Parameter of a lifecycle node: configure and activate itself at start (no lifecycle manager needed)."""
HARDWARE_FAULT = "hardware_fault"
"""Attribute a lifecycle node sets true when its last transition failed on its hardware (a CAN bus, a device), not
its configuration: a failed autostart then leaves it running, unconfigured or inactive, instead of exiting 2."""
SPIN_TIMEOUT_S = 1.0
"""The longest one spin waits with nothing to do: a signal or a callback ends it sooner, so this only bounds how
often an idle node's spin loop wakes up."""
STACKS_SIGNAL = signal.SIGUSR1
"""Signal on which a node's process writes every thread's Python stack to stderr and runs on (faulthandler): what a
process that does not stop was doing, before it is killed (`testing.stop_processes` sends it)."""
CALLBACKS_WAIT_S = 3.0
"""How long a stopping node waits for its running callbacks (a call in flight) with its context still valid; then
the context goes down so that they abort. Below `ros2 launch`'s 5 s between SIGINT and SIGTERM."""


_STOPPING = threading.Event()


def stopping() -> bool:
    """True once this process's nodes are being stopped (a shutdown signal, or a node's `until`), before their
    context goes down: work in progress (a call) ends at its next check while the node can still answer and log."""
    return _STOPPING.is_set()


def autostart(node: LifecycleNode) -> Optional[str]:
    """Configure then activate `node`; the reason when a transition failed, else None."""
    if node.trigger_configure() != TransitionCallbackReturn.SUCCESS:
        return getattr(node, "last_error", "") or "configure failed"
    if node.trigger_activate() != TransitionCallbackReturn.SUCCESS:
        return getattr(node, "last_error", "") or "activate failed"
    return None


def spin_once(executor: Executor, timeout_sec: float) -> None:
    """One `executor.spin_once`, spinning on when an entity was destroyed while the wait set was being built.

    A transition (cleanup) on another thread of a multi-threaded executor may destroy a subscription while the spinning
    thread adds its event handlers to the wait set; rclpy then raises InvalidHandle there. The next wait set no longer
    holds the destroyed entity, so nothing is lost by waiting again.
    """
    try:
        executor.spin_once(timeout_sec=timeout_sec)
    except InvalidHandle:
        pass


class ShutdownSignals:
    """SIGINT and SIGTERM of a process that spins nodes: the first one stops it, every later one is ignored.

    A context manager (in the main thread; elsewhere it does nothing). Use rclpy without its signal handlers
    (`SignalHandlerOptions.NO`): they shut the context down inside the handler, before anything is cleaned up.
    While the node `starting` (built, configured: a model loading) the first signal raises KeyboardInterrupt; while
    it `spins`, the signal wakes the executor and `received` ends the loop; while `stopping`, signals are ignored,
    and after a signal SIGINT stays ignored for the rest of the process: `ros2 launch` sends SIGINT to a node the
    terminal's Ctrl-C reached already (the whole process group gets it), so every node sees two.
    """

    def __init__(self) -> None:
        self.received: Optional[int] = None
        self._spinning = False
        self._stopping = False
        self._interrupt = True  # a signal while the node is being built raises KeyboardInterrupt there
        self._armed = False  # set up: until then a signal is only recorded (starting() raises it)
        self._wake: Optional[Callable[[], None]] = None
        self._previous: dict[int, object] = {}
        self._pipe: Optional[tuple[int, int]] = None
        self._previous_wakeup_fd = -1

    def __enter__(self) -> ShutdownSignals:
        _STOPPING.clear()
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._on_signal)
        try:   # the process's own stderr (a node's log); none to write to (stderr closed): no stacks, the rest works
            faulthandler.register(STACKS_SIGNAL, file=sys.__stderr__, all_threads=True)
        except (AttributeError, OSError, ValueError):
            pass
        # The handler above runs only when the main thread is back in Python, not while it waits in rcl: the wakeup
        # fd, written by the interpreter's C handler at once, lets a thread wake the executor.
        read, write = os.pipe()
        os.set_blocking(write, False)
        self._pipe = (read, write)
        self._previous_wakeup_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        threading.Thread(target=self._wake_on_signal, args=(read,), name="shutdown_signals", daemon=True).start()
        self._armed = True
        return self

    def __exit__(self, *exc) -> None:
        _STOPPING.clear()  # the nodes are gone: whatever the process runs next starts afresh
        if self._pipe is None:
            return
        signal.set_wakeup_fd(self._previous_wakeup_fd)
        os.close(self._pipe[1])  # the thread reads end-of-file and ends (it closes the read end)
        self._pipe = None
        for sig, previous in self._previous.items():
            signal.signal(sig, signal.SIG_IGN if sig == signal.SIGINT and self.received is not None else previous)

    def starting(self, interrupt: bool = True) -> None:
        """From now on (the state at entry) nodes are being built: the first signal raises KeyboardInterrupt, or
        with `interrupt` false is only recorded (the spin then ends before it begins). A signal that came while the
        handlers were being set up raises it here."""
        self._spinning = self._stopping = False
        self._interrupt = interrupt
        _STOPPING.clear()
        if self.received is not None and interrupt:
            raise KeyboardInterrupt

    def spinning(self, wake: Callable[[], None]) -> None:
        """From now on a signal ends the spin: `wake` makes the spinning thread's wait return."""
        self._wake = wake
        self._spinning, self._stopping = True, False

    def stopping(self) -> None:
        """From now on every signal is ignored, and `stopping()` is true: the nodes are on their way out."""
        self._stopping = True
        self._wake = None
        _STOPPING.set()

    def _on_signal(self, signum: int, frame) -> None:
        if self.received is not None or self._stopping:
            return
        self.received = signum
        # Not while __enter__ runs: a KeyboardInterrupt there, in the wake thread's start, escaped spin_node (a
        # traceback and exit -2; a half-started thread could abort the interpreter's exit)
        if self._armed and self._interrupt and not self._spinning:
            raise KeyboardInterrupt

    def _wake_on_signal(self, read: int) -> None:
        try:
            while os.read(read, 64):
                wake = self._wake
                if wake is not None:
                    wake()
        finally:
            os.close(read)


def retire(executor: Executor) -> None:
    """After the last spin: the tasks `executor` will never look at again, settled without a word.

    Workaround of rclpy (Kilted), which checks a finished callback's exception and starts a queued coroutine (an
    action goal's execution) only in a later spin: after the last one, a task that raised prints "The following
    exception was never retrieved" when it is collected, and one never started "coroutine ... was never awaited".
    Reads the executors' private task lists.
    """
    for task in [entry[0] for entry in getattr(executor, "_tasks", [])] + list(getattr(executor, "_futures", [])):
        if task.done():
            task.exception()  # retrieved: the node is shutting down, a callback that failed then has nothing to add
        elif inspect.iscoroutine(getattr(task, "_handler", None)) and not getattr(task, "_executing", False):
            task._handler.close()
            task.cancel()


def _finish(node: Node, executor: Optional[Executor], on_exit: Optional[Callable[[Node], None]]) -> None:
    """Stop `executor` (its running callbacks finish, at most CALLBACKS_WAIT_S with the context valid), run
    `on_exit`, destroy `node`."""
    if executor is not None:
        stopper = threading.Thread(target=executor.shutdown, name="executor_shutdown", daemon=True)
        stopper.start()
        stopper.join(CALLBACKS_WAIT_S)
        if stopper.is_alive():  # a callback that does not end by itself: the context goes down under it
            node.get_logger().warning(f"callbacks still running {CALLBACKS_WAIT_S:.0f} s after the stop: ending them")
            node.context.try_shutdown()
            stopper.join(CALLBACKS_WAIT_S)
        retire(executor)
    if on_exit is not None:
        on_exit(node)
    node.destroy_node()


def spin_node(factory: Callable[[], Node], name: str, args=None,
              until: Optional[Callable[[Node], bool]] = None,
              on_exit: Optional[Callable[[Node], None]] = None, threads: int = 1,
              interrupt_start: bool = True) -> int:
    """Run one node until SIGINT / SIGTERM / shutdown (or `until(node)`); exit code 2 when its configuration is
    invalid, else 0.

    A lifecycle node whose `autostart` parameter is true is configured and
    activated first (a failed transition exits 2 with its reason, unless the
    node says the fault is its hardware's: HARDWARE_FAULT). `threads` > 1
    spins a multi-threaded executor. However spinning ended (its `until`,
    SIGINT, SIGTERM, a failed start), `on_exit(node)` runs (e.g. to finish a
    file) and the node is destroyed while the context is still valid (their
    log lines reach /rosout), then the context is shut down. With
    `interrupt_start` false a signal while the node is being built does not
    abort the build: the node is built, never spun, and finished as above (a
    recorder whose subscriptions already took messages in writes them).
    """
    with ShutdownSignals() as signals:
        try:
            signals.starting(interrupt_start)
            with rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO):
                node: Optional[Node] = None
                executor: Optional[Executor] = None
                try:
                    try:
                        node = factory()
                    except ConfigError as exc:
                        rclpy.logging.get_logger(name).fatal(f"invalid configuration: {exc}")
                        return 2
                    except Exception as exc:  # noqa: BLE001 - re-raised unless shutdown caused it
                        if rclpy.ok():
                            raise
                        # The node was still being built (its name already in the graph) when the context went
                        # down: its next publisher or timer met the invalid context.
                        rclpy.logging.get_logger(name).info(f"shut down while starting ({exc})")
                        return 0
                    if isinstance(node, LifecycleNode) and node.has_parameter(AUTOSTART) \
                            and node.get_parameter(AUTOSTART).value:
                        error = autostart(node)
                        if error is not None and not rclpy.ok():
                            # The context went down during the start: the transition failed because of that, not
                            # because the configuration is invalid
                            rclpy.logging.get_logger(name).info(f"shut down while starting ({error})")
                            return 0
                        if error is not None and getattr(node, HARDWARE_FAULT, False):
                            node.get_logger().error(f"start failed on the hardware: {error}; the node stays up "
                                                    "(diagnostics ERROR) for a lifecycle manager or `ros2 lifecycle "
                                                    "set` to retry")
                        elif error is not None:
                            node.get_logger().fatal(f"invalid configuration: {error}")
                            return 2
                    executor = MultiThreadedExecutor(num_threads=threads) if threads > 1 else SingleThreadedExecutor()
                    executor.add_node(node)
                    # A signal triggers this guard: its callback (nothing) makes the spin return at once.
                    woken = node.create_guard_condition(lambda: None, MutuallyExclusiveCallbackGroup())
                    signals.spinning(woken.trigger)
                    while signals.received is None and rclpy.ok() and (until is None or not until(node)):
                        try:
                            spin_once(executor, SPIN_TIMEOUT_S)
                        except ExternalShutdownException:
                            break
                        except Exception as exc:  # noqa: BLE001 - re-raised unless shutdown caused it
                            if rclpy.ok():
                                raise
                            # A callback that ran while the context shut down touched a destroyed handle.
                            node.get_logger().info(f"shutting down: a callback met a destroyed handle ({exc})")
                    return 0
                finally:
                    signals.stopping()
                    if node is not None:
                        _finish(node, executor, on_exit)
        except KeyboardInterrupt:  # a signal while the node was being built or configured
            return 0
        except RCLError as exc:  # rcl refused the command line itself: a parameter file it cannot parse
            if "failed to initialize rcl" not in str(exc):
                raise
            rclpy.logging.get_logger(name).fatal(f"invalid configuration: {str(exc).split(', at /')[0]}")
            return 2
