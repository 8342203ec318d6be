"""A cache folder built once for every process on the host: built under a lock beside it, moved into place whole."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def built_once(target: Path, complete: Callable[[Path], bool], build: Callable[[Path], None]) -> Path:
    """`target`, built by `build(folder)` into a private folder and moved into place, unless `complete(target)`.

    Processes building the same target take turns on `<target>.lock` (test workers on a cold cache): the first
    builds, the others find it complete. A complete target is never removed, so a reader never loses it; an
    incomplete one (an older layout, a crash before this rule) is replaced.
    """
    target = Path(target)
    if complete(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if complete(target):
            return target
        partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
        os.chmod(partial, 0o755)  # a cache folder like any other (mkdtemp makes it private)
        try:
            build(partial)
            shutil.rmtree(target, ignore_errors=True)
            os.replace(partial, target)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return target
