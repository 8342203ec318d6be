"""Entry-point helper shared by the nodes: init, build, (autostart,) spin, clean shutdown."""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import rclpy
from rclpy.exceptions import InvalidHandle
from rclpy.executors import Executor, ExternalShutdownException, MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from rclpy.node import Node

from .config import ConfigError

AUTOSTART = "autostart"
"""Parameter of a lifecycle node: configure and activate itself at start (no lifecycle manager needed)."""
HARDWARE_FAULT = "hardware_fault"
"""Attribute a lifecycle node sets true when its last transition failed on its hardware (a CAN bus, a device), not
its configuration: a failed autostart then leaves it running, unconfigured or inactive, instead of exiting 2."""


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


def spin_node(factory: Callable[[], Node], name: str, args=None,
              until: Optional[Callable[[Node], bool]] = None,
              on_exit: Optional[Callable[[Node], None]] = None, threads: int = 1) -> int:
    """Run one node until Ctrl-C / shutdown (or `until(node)`); exit code 2 when its configuration is invalid.

    A lifecycle node whose `autostart` parameter is true is configured and
    activated first (a failed transition exits 2 with its reason, unless the
    node says the fault is its hardware's: HARDWARE_FAULT). `threads` > 1
    spins a multi-threaded executor. `on_exit(node)` runs however spinning
    ended (shutdown, SIGINT, SIGTERM), e.g. to finish a file.
    """
    node = None
    try:
        with rclpy.init(args=args):
            try:
                node = factory()
            except ConfigError as exc:
                rclpy.logging.get_logger(name).fatal(f"invalid configuration: {exc}")
                return 2
            except Exception as exc:  # noqa: BLE001 - re-raised unless shutdown (SIGINT / SIGTERM) caused it
                if rclpy.ok():
                    raise
                # The node was still being built (its name already in the graph) when the context went down: its
                # next publisher or timer met the invalid context.
                rclpy.logging.get_logger(name).info(f"shut down while starting ({exc})")
                return 0
            if isinstance(node, LifecycleNode) and node.has_parameter(AUTOSTART) \
                    and node.get_parameter(AUTOSTART).value:
                error = autostart(node)
                if error is not None and not rclpy.ok():
                    # SIGINT / SIGTERM during the start: the transition failed because the context went down, not
                    # because the configuration is invalid
                    rclpy.logging.get_logger(name).info(f"shut down while starting ({error})")
                    return 0
                if error is not None and getattr(node, HARDWARE_FAULT, False):
                    node.get_logger().error(f"start failed on the hardware: {error}; the node stays up (diagnostics "
                                            "ERROR) for a lifecycle manager or `ros2 lifecycle set` to retry")
                elif error is not None:
                    node.get_logger().fatal(f"invalid configuration: {error}")
                    return 2
            executor = MultiThreadedExecutor(num_threads=threads) if threads > 1 else SingleThreadedExecutor()
            executor.add_node(node)
            while rclpy.ok() and (until is None or not until(node)):
                try:
                    spin_once(executor, 0.1)
                except Exception as exc:  # noqa: BLE001 - re-raised unless shutdown (SIGTERM) caused it
                    if rclpy.ok():
                        raise
                    # A callback that ran while the context shut down touched a destroyed handle.
                    node.get_logger().info(f"shutting down: a callback met a destroyed handle ({exc})")
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None and on_exit is not None:
            on_exit(node)
    return 0
