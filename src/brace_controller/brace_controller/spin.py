"""Entry-point helper shared by the nodes: init, build, spin, clean shutdown."""

from __future__ import annotations

from collections.abc import Callable

import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node

from .config import ConfigError


def spin_node(factory: Callable[[], Node], name: str, args=None) -> int:
    """Run one node until Ctrl-C / shutdown; exit code 2 when its configuration is invalid."""
    try:
        with rclpy.init(args=args):
            try:
                node = factory()
            except ConfigError as exc:
                rclpy.logging.get_logger(name).fatal(f"invalid configuration: {exc}")
                return 2
            rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    return 0
