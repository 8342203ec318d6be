#!/usr/bin/env bash
# Run every package's tests with pytest inside the sourced workspace (see Makefile), in parallel: one pytest-xdist
# worker per CPU (BRACE_TEST_WORKERS overrides; 0 runs them serially in this process), whole files per worker, in
# collection order (conftest.py puts the longest files first; xdist's default order, by test count, put them last).
# Each worker leases its own DDS domains (conftest.py, brace_common.domain_leases; docs/testing.md), so graph tests
# of different workers, or of another run on this host, never see each other.
# pytest exits 5 when it collects no tests; that is not a failure of the
# workspace, so it is mapped to 0. pytest's summary line stays the last output.
set -uo pipefail
cd "$(dirname "$0")/.."
export ROS_AUTOMATIC_DISCOVERY_RANGE="${ROS_AUTOMATIC_DISCOVERY_RANGE:-LOCALHOST}"
workers="${BRACE_TEST_WORKERS:-$(nproc)}"
python -m pytest -n "$workers" --dist loadfile --no-loadscope-reorder "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  exit 0
fi
exit "$rc"
