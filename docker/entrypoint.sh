#!/usr/bin/env bash
# Entry point of the robot image (docker/Dockerfile): the workspace's environment, then the command.
#
# scripts/env.sh activates the venv (ROS 2 from the PyPI wheels) and sources the colcon install space; the
# packages' executables (install/<pkg>/lib/<pkg>/: robot_preflight, piper_arm, brace-run ...) go on PATH, as
# `ros2 run` would find them, so a command names them directly.
# With BRACE_PREFLIGHT set to parameter files (a glob is expanded, e.g. "src/brace_bringup/params/robot/*.yaml"), the command
# starts only when robot_preflight passes on them: no arm is driven without its CAN link, cameras and servers. A
# shell (bash, sh) or robot_preflight itself starts without the gate.
set -eo pipefail
cd /opt/brace
# shellcheck source=/dev/null
source /opt/brace/scripts/env.sh
for folder in /opt/brace/install/*/lib/*/; do
  case "${folder}" in */lib/python3*) ;; *) PATH="${PATH}:${folder%/}" ;; esac
done
export PATH
case "${1:-}" in
  bash|sh|robot_preflight) BRACE_PREFLIGHT="" ;;  # a shell or the checks themselves: nothing is driven by them
esac
if [ -n "${BRACE_PREFLIGHT:-}" ]; then
  # shellcheck disable=SC2086  # word splitting and globbing of the file list are wanted
  robot_preflight ${BRACE_PREFLIGHT} || {
    status=$?
    echo "entrypoint: robot_preflight failed (exit ${status}); fix the lines above (docs/robot.md)" >&2
    exit "${status}"
  }
fi
exec "$@"
