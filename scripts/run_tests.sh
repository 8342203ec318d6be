#!/usr/bin/env bash
# Run every package's tests with pytest inside the sourced workspace (see Makefile).
# pytest exits 5 when it collects no tests; that is not a failure of the
# workspace, so it is mapped to 0. pytest's summary line stays the last output.
set -uo pipefail
cd "$(dirname "$0")/.."
# Isolate this run's DDS traffic from anything else on the machine.
export ROS_DOMAIN_ID="${ROS_DOMAIN_ID:-$(( (RANDOM % 100) + 100 ))}"
export ROS_AUTOMATIC_DISCOVERY_RANGE="${ROS_AUTOMATIC_DISCOVERY_RANGE:-LOCALHOST}"
python -m pytest "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  exit 0
fi
exit "$rc"
