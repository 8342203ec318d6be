"""log_either: one call site per severity."""

from __future__ import annotations

import pytest

from brace_common.log_sites import log_either


class Logger:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def info(self, text: str) -> None:
        self.lines.append(("info", text))

    def warning(self, text: str) -> None:
        self.lines.append(("warning", text))

    def error(self, text: str) -> None:
        self.lines.append(("error", text))


def test_ok_logs_info_and_otherwise_the_severity_named():
    logger = Logger()
    log_either(logger, True, "a", "error")
    log_either(logger, False, "b", "error")
    log_either(logger, False, "c", "warning")
    assert logger.lines == [("info", "a"), ("error", "b"), ("warning", "c")]
    with pytest.raises(ValueError, match="'fatal'"):
        log_either(logger, False, "d", "fatal")
