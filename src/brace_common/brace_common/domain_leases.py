"""DDS domains for tests, leased machine-wide: no two test processes on this host share one at the same time.

Each pytest process (a serial run, or one xdist worker) takes its own domain before rclpy starts and exports it as
ROS_DOMAIN_ID, so every process a test starts inherits it; a test or RosHarness takes a fresh one with `fresh_domain`.
A lease is an flock on a file in DOMAIN_LOCKS, released at the test's end or when the process exits. docs/testing.md
says why.
"""

from __future__ import annotations

import fcntl
import os
import random
import tempfile
from collections.abc import MutableMapping
from pathlib import Path

SAFE_DOMAINS: tuple[int, ...] = (*range(1, 102), *range(215, 233))
"""The domains a test may take: ROS 2's safe ranges on Linux (0-101 and 215-232, whose ports stay clear of the
ephemeral range), less 0, the default of every other ROS program on the machine."""

DOMAIN_LOCKS = Path(tempfile.gettempdir()) / "brace_ros_domains"
"""One lock file per domain; whoever holds its flock holds the domain."""

RUN_START = "BRACE_TEST_DOMAIN_START"
"""The environment variable with the run's first domain: chosen once per run, inherited by its xdist workers."""


class DomainLeases:
    """The domains one process holds; `take` leases the next free one of its order (all of SAFE_DOMAINS, from `start`)."""

    def __init__(self, start: int) -> None:
        first = SAFE_DOMAINS.index(start) if start in SAFE_DOMAINS else start % len(SAFE_DOMAINS)
        self.order = SAFE_DOMAINS[first:] + SAFE_DOMAINS[:first]
        self._next = 0
        self.held: dict[int, int] = {}  # domain -> the descriptor whose flock holds it

    def take(self) -> int:
        """Lease the next domain no process on this host holds (round robin: a fresh one each time); RuntimeError
        when every domain is held."""
        if not DOMAIN_LOCKS.is_dir():
            DOMAIN_LOCKS.mkdir(parents=True, exist_ok=True)
            DOMAIN_LOCKS.chmod(0o1777)  # like /tmp: every user's runs lease here
        for _ in range(len(self.order)):
            domain = self.order[self._next]
            self._next = (self._next + 1) % len(self.order)
            if domain in self.held:
                continue
            fd = os.open(DOMAIN_LOCKS / f"{domain}.lock", os.O_RDONLY | os.O_CREAT, 0o444)  # flock needs no write
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.held[domain] = fd
            return domain
        raise RuntimeError(f"every DDS domain of {len(self.order)} is held by a test process on this host")

    def release(self, domain: int) -> None:
        """Give `domain` back (nothing when it is not held)."""
        fd = self.held.pop(domain, None)
        if fd is not None:
            os.close(fd)  # closing the descriptor drops its flock

    def release_all_but(self, keep: set[int]) -> None:
        """Give back every held domain not in `keep`."""
        for domain in [d for d in self.held if d not in keep]:
            self.release(domain)


def worker_start(environ: MutableMapping[str, str]) -> int:
    """Where this process's order starts: the run's start (chosen at random once and exported in `environ`, or
    ROS_DOMAIN_ID when set), shifted by this xdist worker's share of SAFE_DOMAINS, so workers rarely meet."""
    if RUN_START not in environ:
        chosen = environ.get("ROS_DOMAIN_ID") or str(random.choice(SAFE_DOMAINS))
        environ[RUN_START] = chosen
    start = int(environ[RUN_START])
    first = SAFE_DOMAINS.index(start) if start in SAFE_DOMAINS else start % len(SAFE_DOMAINS)
    worker = int(environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    workers = max(1, int(environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    return SAFE_DOMAINS[(first + worker * len(SAFE_DOMAINS) // workers) % len(SAFE_DOMAINS)]


_leases: DomainLeases | None = None


def leases() -> DomainLeases:
    """This process's leases (started from `worker_start` on first use)."""
    global _leases
    if _leases is None:
        _leases = DomainLeases(worker_start(os.environ))
    return _leases


def claim_process_domain() -> int:
    """Lease this process's own domain and export it as ROS_DOMAIN_ID, with ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
    unless set: call before rclpy starts (the root conftest does); every process a test starts inherits both."""
    domain = leases().take()
    os.environ["ROS_DOMAIN_ID"] = str(domain)
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    return domain


def fresh_domain() -> int:
    """A domain for one test's graph, held by this process alone; the root conftest releases it after the test."""
    return leases().take()
