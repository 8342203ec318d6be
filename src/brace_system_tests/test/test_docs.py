"""The documentation's rules: a short README, links that resolve, no history outside the results pages, every
abbreviation defined (the commands the docs give: test_user_commands.py).

Issue numbers, sessions and training rounds belong to the history of the work (docs/results/ keeps it); code,
configuration, the Makefile and the guides say what a thing is and why, not which issue brought it.
"""

from __future__ import annotations

import re
from pathlib import Path

WORKSPACE = Path(__file__).resolve().parents[3]
SKIP_DIRS = {".git", ".venv", "build", "install", "log", "out", "__pycache__", ".ruff_cache", ".pytest_cache"}
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".xml", ".txt", ".cfg", ".toml", ".sh", ".msg", ".srv", ".action"}
ISSUE_NUMBER = re.compile(r"\bissues? #?\d+|\(issue\b", re.IGNORECASE)
HISTORY = re.compile(r"\b(?:rounds?|sessions?) \d+\b|\bW[12]\b|\bthis issue\b|\bdevelopment machines?\b|"
                     r"\b(?:tested|measured|run|installed|installable|observed) here\b|"
                     r"\b(?:since|as of|until|once in CI,)\s+\d{4}-\d\d-\d\d", re.IGNORECASE)
ABBREVIATION = re.compile(r"(?<![\w_])[A-Z][A-Z0-9]+(?![\w_])")
EVERYDAY = set("""
AMD API BGR CAN CI CLI CPU CRC CSV CUDA DDS DEBUG EPYC ERROR FPS GB GID GPU HTTP ID JPEG JPG JSON KB LAN MB MIT MJPG
NVIDIA OK PATH PEP PNG PYTHONPATH RAM README REST RGB RMW ROS ROS2 RPC RTX SDK SHA SIGABRT SIGINT SIGKILL SIGSEGV SIGTERM TCP TF
TLS UDP URL USB UVC V4L2 WARN YAML YUYV
""".split())
"""Abbreviations a ROS 2 engineer reads without a definition."""
LITERALS = set("""
ABORTED ACTIVE ANY AUTOINCREMENT BLOCKED BUS CANCELLED CMD CONSTRAINTS COORDINATION END ENTRYPOINT EXECUTOR FAILED
FOR FULL GET GOALS HAZARD HEALTHCHECK HISTORY INTEGER KEY LOOP MEMORY MISSED MISSING MOVE NAME NOTE OFF OVERRIDE
PARTIAL PASSIVE POST PREEMPT PREEMPTED PRIMARY REAL REFINE SKIP START STATE SUBTASK SUCCEEDED TASK TEXT TIMEOUT
UNAVAILABLE UP WRONG
""".split())
"""Words the programs print or read, written in the guides as they are (a prompt's section, a state, a SQL type)."""
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


def guides() -> list[Path]:
    """The README and the guides under docs/ (not the results pages: they keep the history as it was)."""
    return [WORKSPACE / "README.md", *sorted((WORKSPACE / "docs").glob("*.md"))]


def prose(text: str) -> str:
    """A page's running text: without code blocks, code spans, link targets and URLs."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)
    text = re.sub(r"`[^`\n]*`", "", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return re.sub(r"<https?://[^>]*>", "", text)


def defined_terms() -> set[str]:
    """The glossary's Terms: each term of its table, and each hyphenated part of one (E-RECAP: E, RECAP)."""
    glossary = (WORKSPACE / "docs" / "glossary.md").read_text()
    table = glossary[glossary.index("## Terms"):glossary.index("\n## ", glossary.index("## Terms") + 1)]
    terms = set()
    for cell in re.findall(r"^\| ([^|]+) \|", table, re.MULTILINE):
        for term in (t.strip() for t in cell.split(",")):
            terms |= {term, *term.split("-")}
    return terms - {"term"}


def test_no_history_words_outside_the_results_pages():
    hits = [f"{page.relative_to(WORKSPACE)}:{number}: {line.strip()[:100]}"
            for page in guides() + sorted(WORKSPACE.glob("src/brace_bringup/*/**/*.yaml"))
            for number, line in enumerate(page.read_text().splitlines(), 1) if HISTORY.search(line)]
    assert not hits, "sessions, rounds, dated changes or 'here' (which machine?) outside docs/results/:\n" + \
        "\n".join(hits)


def test_every_abbreviation_in_the_guides_is_defined_in_the_glossary():
    terms = defined_terms()
    for term in ("BRACE", "E-RECAP", "ReCAP", "OmniAct", "GiG", "SLO", "SLO_t", "B_t", "K", "EDF", "GGUF", "VLA"):
        assert term in terms, f"docs/glossary.md's Terms do not define {term}"
    undefined: dict[str, str] = {}
    for page in guides():
        for word in ABBREVIATION.findall(prose(page.read_text())):
            if re.fullmatch(r"[A-Z]\d+", word) or sum(c.isdigit() for c in word) >= 3:
                continue  # a name with a number (J1, H100) or a serial number
            if word not in terms | EVERYDAY | LITERALS:
                undefined.setdefault(word, str(page.relative_to(WORKSPACE)))
    assert not undefined, ("abbreviations neither in docs/glossary.md's Terms nor everyday ones (define them there): "
                           + ", ".join(f"{w} ({p})" for w, p in sorted(undefined.items())))


def test_the_license_and_the_citation_match_the_packages():
    import yaml

    licenses = {re.search(r"<license>([^<]+)</license>", p.read_text()).group(1)
                for p in WORKSPACE.glob("src/*/package.xml")}
    assert licenses == {"Apache-2.0"}
    assert "Apache License\n                           Version 2.0" in (WORKSPACE / "LICENSE").read_text()
    citation = yaml.safe_load((WORKSPACE / "CITATION.cff").read_text())
    assert {"cff-version", "message", "title", "authors"} <= set(citation)
    assert citation["license"] == "Apache-2.0"
    versions = {re.search(r"<version>([^<]+)</version>", p.read_text()).group(1)
                for p in WORKSPACE.glob("src/*/package.xml")}
    assert versions == {str(citation["version"])}
    cited = " ".join(r["title"] for r in citation["references"])
    for paper in ("Budgeted Replanning", "ReCAP", "Omnimodal Embodied Agents", "Graph-Informed Action Generation"):
        assert paper in cited and paper.split()[0] in (WORKSPACE / "docs" / "glossary.md").read_text()


def test_the_ros2_guide_lists_every_launch_file_and_argument():
    from brace_bringup.run_plan import AIRSIM_LAUNCH_ARGUMENTS, LAUNCH_ARGUMENTS

    guide = (WORKSPACE / "docs" / "ros2.md").read_text()
    for launch in sorted((WORKSPACE / "src" / "brace_bringup" / "launch").glob("*.launch.py")):
        default = re.search(r'stack_launch_description\("([^"]+)"', launch.read_text()).group(1)
        assert re.search(rf"^\| `{re.escape(launch.name)}` \|.*\| `{re.escape(default)}` \|", guide, re.MULTILINE), (
            f"docs/ros2.md does not list {launch.name} with its run {default}")
    for argument in (*LAUNCH_ARGUMENTS, *AIRSIM_LAUNCH_ARGUMENTS):
        assert f"`{argument}`" in guide, f"docs/ros2.md does not describe the launch argument {argument}"


def test_the_guides_name_every_budget_profile_and_stack():
    """A list in the guides that falls behind the code (nodes.md once named four of eight budget profiles)."""
    import yaml

    from brace_bringup.graph import STACKS

    profiles = yaml.safe_load((WORKSPACE / "src/brace_controller/config/budget_profiles.yaml").read_text())["profiles"]
    nodes = (WORKSPACE / "docs" / "nodes.md").read_text()
    assert [p for p in profiles if f"`{p}`" not in nodes] == [], "budget profiles docs/nodes.md does not name"
    assert [s for s in STACKS if f"`{s}`" not in nodes] == [], "stacks docs/nodes.md does not name"


def test_the_robot_guide_names_every_row_of_the_twin_run():
    """robot.md once listed three of the twin run's four rows."""
    import yaml

    variants = yaml.safe_load((WORKSPACE / "src/brace_bringup/runs/piper_twin.yaml").read_text())["run"]["variants"]
    guide = (WORKSPACE / "docs" / "robot.md").read_text()
    twin = guide[guide.index("## 7. Without the arm"):].split("\n\n")[1]  # the section's first paragraph
    named = set(re.findall(r"`([a-z_]+)` \(", twin))
    assert named == set(variants), f"robot.md's twin section names rows {sorted(named)}, the run has {sorted(variants)}"
