#!/usr/bin/env bash
# Health check of the robot image (docker/Dockerfile HEALTHCHECK): robot_preflight on the parameter files named
# by BRACE_PREFLIGHT (CAN link up at 1 Mbit/s, cameras attached, VLA and planner servers answering); with
# BRACE_PREFLIGHT empty, the workspace's environment and rclpy import. Exit 0 healthy, 1 unhealthy.
set -eo pipefail
cd /opt/brace
# shellcheck source=/dev/null
source /opt/brace/scripts/env.sh
if [ -z "${BRACE_PREFLIGHT:-}" ]; then
  exec python -c "import rclpy, robot_bridge.preflight.robot_preflight"
fi
# shellcheck disable=SC2086  # word splitting and globbing of the file list are wanted
python -m robot_bridge.preflight.robot_preflight ${BRACE_PREFLIGHT} --timeout 5 >/dev/null || exit 1
