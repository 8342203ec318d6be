"""Every test process's own DDS domain (serial, or one per xdist worker), and a test's fresh domains given back after it.

Loaded by pytest before any package's conftest, so ROS_DOMAIN_ID is set before rclpy starts (docs/testing.md).
"""

from __future__ import annotations

import os

import pytest

from brace_common.domain_leases import claim_process_domain, leases, worker_start


def pytest_configure(config: pytest.Config) -> None:
    """Choose the run's first domain (the xdist workers inherit it); a process that runs tests leases its own; an
    xdist worker also gets its share of the CPUs for torch's threads."""
    worker_start(os.environ)
    distributing = bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")
    if not distributing:
        claim_process_domain()
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        # N workers each running torch on every CPU oversubscribe them, and OpenMP's spinning threads then wait for
        # each other: a benchmark's quick run took 11x its time. Each worker's processes get its share (a user's
        # OMP_NUM_THREADS wins); torch reads it when it first loads, after this.
        os.environ.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) // workers)))


@pytest.fixture(autouse=True)
def _fresh_domains_given_back():
    """Give back, after each test, the domains it leased with `fresh_domain` (those held before it stay)."""
    held = set(leases().held)
    yield
    leases().release_all_but(held)
