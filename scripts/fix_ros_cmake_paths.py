"""Rewrite the wheel builder's paths inside the venv's exported ROS CMake targets.

The ROS 2 wheels on PyPI were built under /opt/python/cpXY-cpXY; their exported
CMake targets (share/*/cmake/*.cmake) name that interpreter's include directory
and its numpy headers. colcon builds of interface packages link against those
targets, so the paths must point at this venv's interpreter and numpy instead.
Idempotent: files already rewritten are left alone.
"""

from __future__ import annotations

import re
import sys
import sysconfig
from pathlib import Path

import numpy

_NUMPY_INCLUDE = re.compile(
    r"/opt/python/cp3\d+-cp3\d+/lib/python3\.\d+/site-packages/numpy/(?:_core|core)/include"
)
_PYTHON_INCLUDE = re.compile(r"/opt/python/cp3\d+-cp3\d+/include/python3\.\d+")


def rewrite(prefix: Path) -> int:
    """Rewrite every exported CMake file under prefix/share; return how many changed."""
    python_include = sysconfig.get_paths()["include"]
    numpy_include = numpy.get_include()
    changed = 0
    for cmake_file in sorted((prefix / "share").glob("*/cmake/*.cmake")):
        text = cmake_file.read_text()
        new = _PYTHON_INCLUDE.sub(python_include, _NUMPY_INCLUDE.sub(numpy_include, text))
        if new != text:
            cmake_file.write_text(new)
            changed += 1
    return changed


if __name__ == "__main__":
    count = rewrite(Path(sys.prefix))
    print(f"fix_ros_cmake_paths: rewrote {count} CMake file(s) under {sys.prefix}/share")
