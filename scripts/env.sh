# Source this to use the workspace: the venv with ROS 2 from PyPI, then the
# colcon install space. With ROS 2 from apt, source /opt/ros/<distro>/setup.bash
# and install/setup.bash instead.
#   source scripts/env.sh
_brace_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=/dev/null
source "$_brace_root/.venv/bin/activate"
export CMAKE_PREFIX_PATH="$VIRTUAL_ENV${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
export AMENT_PREFIX_PATH="$VIRTUAL_ENV${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}"
export RMW_IMPLEMENTATION="${RMW_IMPLEMENTATION:-rmw_fastrtps_cpp}"
if [ "${1:-}" != "--no-install" ] && [ -f "$_brace_root/install/setup.bash" ]; then
  # shellcheck source=/dev/null
  source "$_brace_root/install/setup.bash"
  # The workspace's command-line tools (brace-run, brace-audit, ...) are installed in install/<pkg>/lib/<pkg>,
  # where `ros2 run <pkg> <tool>` finds them; the PyPI wheels have no ros2 CLI, so they go on PATH as well.
  for _brace_lib in "$_brace_root"/install/*/lib/*/; do
    if compgen -G "${_brace_lib}brace-*" > /dev/null; then
      case ":$PATH:" in *":${_brace_lib%/}:"*) ;; *) PATH="${_brace_lib%/}:$PATH" ;; esac
    fi
  done
  export PATH
  unset _brace_lib
fi
unset _brace_root
