"""Entry-point helper shared by the nodes: init, build, spin, clean shutdown."""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node

from .config import ConfigError


def spin_node(factory: Callable[[], Node], name: str, args=None,
              until: Optional[Callable[[Node], bool]] = None,
              on_exit: Optional[Callable[[Node], None]] = None) -> int:
    """Run one node until Ctrl-C / shutdown (or `until(node)`); exit code 2 when its configuration is invalid.

    `on_exit(node)` runs however spinning ended (shutdown, SIGINT, SIGTERM), e.g. to finish a file.
    """
    node = None
    try:
        with rclpy.init(args=args):
            try:
                node = factory()
            except ConfigError as exc:
                rclpy.logging.get_logger(name).fatal(f"invalid configuration: {exc}")
                return 2
            if until is None:
                rclpy.spin(node)
            else:
                while rclpy.ok() and not until(node):
                    rclpy.spin_once(node, timeout_sec=0.1)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None and on_exit is not None:
            on_exit(node)
    return 0
