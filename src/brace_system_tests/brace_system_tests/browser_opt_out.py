"""The user's opt-out of everything that drives a browser (the viewer's test and benchmark): no heavy imports, so a
test module can ask without loading the viewer."""

from __future__ import annotations

import os

NO_BROWSER_ENV = "BRACE_NO_BROWSER"
"""Set to 1 to skip the viewer's browser test (a machine where Chromium cannot be installed); README names it."""


def browser_opted_out() -> bool:
    """Whether the user opted out of the browser test (NO_BROWSER_ENV=1)."""
    return os.environ.get(NO_BROWSER_ENV, "") == "1"
