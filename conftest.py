"""Every test process's own DDS domain (serial, or one per xdist worker), and a test's fresh domains given back after it.

Loaded by pytest before any package's conftest, so ROS_DOMAIN_ID is set before rclpy starts (docs/testing.md).
"""

from __future__ import annotations

import os

import pytest

from brace_common.domain_leases import claim_process_domain, leases, worker_start

LONGEST_FIRST = ("test_bench_quick.py", "test_fuzz_graph.py", "test_launch_stacks.py", "test_runner.py",
                 "test_piper_twin_graph.py", "test_planner_server.py", "test_piper_arm_node.py", "test_gguf_export.py",
                 "test_launch_shutdown.py", "test_report_from_bags.py", "test_viewer_browser.py")
"""The test files that take longest (docs/testing.md), collected first: a worker takes whole files in collection order
(scripts/run_tests.sh), so the short files fill both workers at the end instead of one long file running alone."""


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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of LONGEST_FIRST first, in that order; every other file after them, in its collected order."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(autouse=True)
def _fresh_domains_given_back():
    """Give back, after each test, the domains it leased with `fresh_domain` (those held before it stay)."""
    held = set(leases().held)
    yield
    leases().release_all_but(held)
