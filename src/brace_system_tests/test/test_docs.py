"""The documentation's rules: a short README, links that resolve, and no issue numbers outside the results pages.

Issue numbers belong to the history of the work (docs/results/ keeps it); code, configuration, the Makefile and the
guides say what a thing is and why, not which issue brought it.
"""

from __future__ import annotations

import re
from pathlib import Path

WORKSPACE = Path(__file__).resolve().parents[3]
SKIP_DIRS = {".git", ".venv", "build", "install", "log", "out", "__pycache__", ".ruff_cache", ".pytest_cache"}
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".xml", ".txt", ".cfg", ".toml", ".sh", ".msg", ".srv", ".action"}
ISSUE_NUMBER = re.compile(r"\bissues? #?\d+|\(issue\b", re.IGNORECASE)
LINK = re.compile(r"\]\(([^)\s]+)\)")
README_MAX_LINES = 150


def workspace_files() -> list[Path]:
    """Every text file of the workspace that is the project's own (no virtual environment, build or output)."""
    found = []
    for path in WORKSPACE.rglob("*"):
        relative = path.relative_to(WORKSPACE)
        if SKIP_DIRS & set(relative.parts[:-1]) or not path.is_file():
            continue
        if path.suffix in TEXT_SUFFIXES or path.name in {"Makefile", "Dockerfile"} or path.name.startswith("Dockerfile"):
            found.append(path)
    return sorted(found)


def test_the_readme_is_a_short_guide():
    lines = (WORKSPACE / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"


def test_no_issue_numbers_outside_the_results_pages():
    results = WORKSPACE / "docs" / "results"
    hits = []
    for path in workspace_files():
        if results in path.parents or path == Path(__file__).resolve():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if ISSUE_NUMBER.search(line):
                hits.append(f"{path.relative_to(WORKSPACE)}:{number}: {line.strip()[:100]}")
    assert not hits, "issue numbers outside docs/results/:\n" + "\n".join(hits)


def test_every_relative_link_in_the_docs_resolves():
    broken = []
    for path in workspace_files():
        if path.suffix != ".md":
            continue
        for target in LINK.findall(path.read_text()):
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL, or an anchor in the same page
            if not (path.parent / target.split("#", 1)[0]).exists():
                broken.append(f"{path.relative_to(WORKSPACE)}: {target}")
    assert not broken, "links to files that do not exist:\n" + "\n".join(broken)
