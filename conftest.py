"""Every test process's own DDS domain (serial, or one per xdist worker), and a test's fresh domains given back after it.

Loaded by pytest before any package's conftest, so ROS_DOMAIN_ID is set before rclpy starts (docs/testing.md).
"""

from __future__ import annotations

import os

import pytest

from brace_common.domain_leases import claim_process_domain, leases, worker_start


def pytest_configure(config: pytest.Config) -> None:
    """Choose the run's first domain (the xdist workers inherit it); a process that runs tests leases its own."""
    worker_start(os.environ)
    distributing = bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")
    if not distributing:
        claim_process_domain()


@pytest.fixture(autouse=True)
def _fresh_domains_given_back():
    """Give back, after each test, the domains it leased with `fresh_domain` (those held before it stay)."""
    held = set(leases().held)
    yield
    leases().release_all_but(held)
