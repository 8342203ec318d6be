"""One way every node reports on /diagnostics: a status with counters, its level from what went wrong."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

from .counters import Health

HARDWARE_ID = "brace"


def diagnostic_array(name: str, values: Mapping[str, Any], stamp, warnings: Iterable[str] = (),
                     errors: Iterable[str] = (), message: str = "") -> DiagnosticArray:
    """A DiagnosticArray of one status `name`: ERROR when `errors`, WARN when `warnings`, else OK.

    The message lists what is wrong ("counted: ..." for warnings) unless `message` is given.
    """
    errors, warnings = list(errors), list(warnings)
    if errors:
        level, text = DiagnosticStatus.ERROR, "; ".join(errors)
    elif warnings:
        level, text = DiagnosticStatus.WARN, "counted: " + ", ".join(warnings)
    else:
        level, text = DiagnosticStatus.OK, "ok"
    status = DiagnosticStatus(name=name, hardware_id=HARDWARE_ID, level=level, message=message or text)
    status.values = [KeyValue(key=str(k), value=str(v)) for k, v in values.items()]
    array = DiagnosticArray(status=[status])
    array.header.stamp = stamp
    return array


def nonzero(counts: Mapping[str, int], keys: Iterable[str]) -> list[str]:
    """The `keys` whose count is not zero (what a diagnostics message names)."""
    return [k for k in keys if counts.get(k)]


def health_array(name: str, health: Health, stamp, message: str = "") -> DiagnosticArray:
    """A DiagnosticArray of one status `name` from the owners' merged `health` (see `diagnostic_array`)."""
    return diagnostic_array(name, health.values, stamp, health.warnings, health.errors, message)
