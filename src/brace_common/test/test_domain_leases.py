"""Domain leases: a domain held by one process (or one lease set) is never handed out again until given back."""

import os
import subprocess
import sys

import pytest

from brace_common.domain_leases import RUN_START, SAFE_DOMAINS, DomainLeases, fresh_domain, leases, worker_start


def test_safe_domains_are_ros_linux_ranges_without_the_default():
    assert 0 not in SAFE_DOMAINS and min(SAFE_DOMAINS) == 1
    assert all(d <= 101 or 215 <= d <= 232 for d in SAFE_DOMAINS) and len(SAFE_DOMAINS) == 101 + 18


def test_two_lease_sets_never_share_a_domain_and_a_given_back_one_is_free_again():
    a, b = DomainLeases(SAFE_DOMAINS[5]), DomainLeases(SAFE_DOMAINS[5])
    try:
        first = a.take()
        second = b.take()  # the same start: the first is held, so b skips it
        assert first != second
        a.release(first)
        b.release(second)
        assert DomainLeases(first).take() == first  # the closed descriptor dropped its lock (and the new one's too)
    finally:
        a.release_all_but(set())
        b.release_all_but(set())


def test_a_domain_held_by_another_process_is_skipped():
    start = SAFE_DOMAINS[40]
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from brace_common.domain_leases import DomainLeases; "
         f"print(DomainLeases({start}).take(), flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        held = int(holder.stdout.readline())  # the holder prints once it holds the lock
        mine = DomainLeases(start)
        taken = mine.take()
        assert taken != held
        mine.release(taken)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def test_each_take_is_a_fresh_domain_in_round_robin():
    lease = DomainLeases(SAFE_DOMAINS[-2])
    try:
        taken = [lease.take() for _ in range(3)]
        assert len(set(taken)) == 3
        lease.release(taken[1])
        assert lease.take() not in taken  # the given-back domain waits its turn; the next one comes first
    finally:
        lease.release_all_but(set())


def test_workers_of_one_run_start_apart_and_the_run_start_is_chosen_once():
    env = {"PYTEST_XDIST_WORKER_COUNT": "2"}
    first = worker_start({**env, "PYTEST_XDIST_WORKER": "gw0", RUN_START: "1"})
    second = worker_start({**env, "PYTEST_XDIST_WORKER": "gw1", RUN_START: "1"})
    assert (first, second) == (1, SAFE_DOMAINS[len(SAFE_DOMAINS) // 2])
    chosen: dict[str, str] = {}
    worker_start(chosen)
    assert int(chosen[RUN_START]) in SAFE_DOMAINS  # exported for the workers, which read it, not a new choice
    assert worker_start({"ROS_DOMAIN_ID": "62"}) == 62


def test_a_fresh_domain_is_held_apart_from_the_process_domain():
    domain = fresh_domain()  # the root conftest gives it back after this test
    assert domain in leases().held and int(os.environ["ROS_DOMAIN_ID"]) in leases().held
    assert domain != int(os.environ["ROS_DOMAIN_ID"])


def test_every_domain_held_is_an_error():
    lease = DomainLeases(1)
    lease.order = lease.order[:1]
    other = DomainLeases(1)
    try:
        lease.take()
        other.order = other.order[:1]
        with pytest.raises(RuntimeError, match="held by a test process"):
            other.take()
    finally:
        lease.release_all_but(set())
