"""Logging where one event logs at one of two severities: rclpy refuses a call site that logs at two."""

from __future__ import annotations

from typing import Any


def log_either(logger: Any, ok: bool, text: str, otherwise: str) -> None:
    """Log `text` at INFO when `ok`, else at `otherwise` ("warning" or "error"), each from a call site of its own."""
    if ok:
        logger.info(text)
    elif otherwise == "error":
        logger.error(text)
    elif otherwise == "warning":
        logger.warning(text)
    else:
        raise ValueError(f"'{otherwise}' is not 'warning' or 'error'")
