"""Counters whose names their owner declares once, and the health each owner reports on /diagnostics.

A misspelt counter name is a KeyError the first time the line runs (in a test), not a silently new key.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Health:
    """What one owner reports: its values, and the names of what is wrong (warnings, errors)."""

    values: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()

    def __add__(self, other: Health) -> Health:
        """Both owners' reports in one status (values of `other` win a shared key)."""
        return Health({**self.values, **other.values}, self.warnings + other.warnings, self.errors + other.errors)


class Counters(Mapping[str, int]):
    """Event counts of one owner, every name declared up front; counting an undeclared name raises KeyError.

    `warn` and `error` name the counters whose non-zero value makes the owner's health WARN or ERROR. Counting is
    thread-safe through `add`; `counters[name] += n` also works (checked) where the owner already holds a lock.
    """

    def __init__(self, names: Iterable[str], *, warn: Iterable[str] = (), error: Iterable[str] = ()) -> None:
        self._counts: dict[str, int] = {}
        self._warn: list[str] = []
        self._error: list[str] = []
        self._lock = threading.Lock()
        self.declare(*names)
        self.mark(warn=warn, error=error)

    def declare(self, *names: str, warn: bool = False, error: bool = False) -> None:
        """Add counters at zero (a family known only at run time, e.g. one per input); declared ones stay."""
        for name in names:
            if not isinstance(name, str) or not name:
                raise ValueError(f"a counter name must be a non-empty string, not {name!r}")
            self._counts.setdefault(name, 0)
        self.mark(warn=names if warn else (), error=names if error else ())

    def mark(self, *, warn: Iterable[str] = (), error: Iterable[str] = ()) -> None:
        """Make declared counters count as warnings or errors when non-zero."""
        for names, into in ((warn, self._warn), (error, self._error)):
            for name in names:
                self._check(name)
                if name not in into:
                    into.append(name)

    def _check(self, name: str) -> None:
        if name not in self._counts:
            raise KeyError(f"undeclared counter {name!r} (declared: {', '.join(self._counts)})")

    def add(self, name: str, n: int = 1) -> None:
        """Count `n` more `name` events."""
        with self._lock:
            self._check(name)
            self._counts[name] += n

    def __getitem__(self, name: str) -> int:
        self._check(name)
        return self._counts[name]

    def __setitem__(self, name: str, value: int) -> None:
        self._check(name)
        self._counts[name] = value

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._counts))

    def __len__(self) -> int:
        return len(self._counts)

    def total(self, names: Iterable[str] | None = None) -> int:
        """The sum of `names` (every counter when None)."""
        return sum(self[n] for n in (self._counts if names is None else names))

    def health(self, prefix: str = "") -> Health:
        """These counts as values (each name after `prefix`), warning / erring on the marked ones that are non-zero."""
        with self._lock:
            counts = dict(self._counts)
        return Health({prefix + k: v for k, v in counts.items()},
                      tuple(prefix + k for k in self._warn if counts[k]),
                      tuple(prefix + k for k in self._error if counts[k]))
