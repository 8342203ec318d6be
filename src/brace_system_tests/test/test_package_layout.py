"""The workspace's layout rules, read from the source with `ast`: who may import whom, declared dependencies, lazy imports.

- A peer (every package but the ones named below) imports only brace_msgs, brace_common and its own modules.
  brace_bringup (stacks, launch, brace-run) and brace_system_tests (tests of the whole graph) may import any package.
  brace_training builds the planner's weights offline: it imports erecap_planner (the model, its pruning and
  predictor, the plan parser and context it trains for), the worlds whose episodes are its data (sim_bridges'
  warehouse and AirSim intersection, robot_bridge's PickFruit) and brace_controller's budget profiles (the B_t
  its examples are rendered at). No package imports brace_training.
  erecap_planner uses brace_memory (the memory modules on its call path) as a library.
- Every workspace package a package imports (its modules or its tests) is one of its package.xml dependencies.
- An import inside a function says why on its line or on the comment line above its run of imports (a heavy or
  optional dependency, an import cycle); every other import sits at the top of its module.
"""

from __future__ import annotations

import ast
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2]
PACKAGES = sorted(p.name for p in SRC.iterdir() if (p / "package.xml").is_file())
PYTHON_PACKAGES = [name for name in PACKAGES if (SRC / name / "setup.py").is_file()]
COMMON = {"brace_msgs", "brace_common"}
MAY_IMPORT_ANY = {"brace_bringup", "brace_system_tests"}
MAY_IMPORT = {"brace_training": {"erecap_planner", "brace_memory", "sim_bridges", "robot_bridge", "brace_controller"},
              "erecap_planner": {"brace_memory"}}
PEERS = [name for name in PYTHON_PACKAGES if name not in MAY_IMPORT_ANY]
DEPENDENCY_TAGS = ("depend", "exec_depend", "test_depend")


def python_files(package: str) -> list[Path]:
    """Every Python file of a package: its modules, its tests and setup.py."""
    return sorted(p for p in (SRC / package).rglob("*.py") if not {"build", "install"} & set(p.parts))


def imported_packages(path: Path) -> dict[str, int]:
    """Workspace packages `path` imports (absolute imports), each with the line of its first import."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        else:
            continue
        for module in modules:
            top = module.split(".")[0]
            if top in PACKAGES:
                found.setdefault(top, node.lineno)
    return found


def dependencies(package: str) -> set[str]:
    """The packages package.xml names as a dependency (build, exec or test)."""
    root = ET.parse(SRC / package / "package.xml").getroot()
    return {element.text.strip() for tag in DEPENDENCY_TAGS for element in root.iter(tag) if element.text}


def lazy_imports_without_reason(path: Path) -> list[str]:
    """Imports inside a function with no comment on their line or above their run of imports."""
    lines = path.read_text().splitlines()
    tree = ast.parse("\n".join(lines), str(path))
    nested = {node for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
              for node in ast.walk(fn) if isinstance(node, (ast.Import, ast.ImportFrom))}
    import_lines = {line for node in nested for line in range(node.lineno, node.end_lineno + 1)}
    bad = []
    for node in sorted(nested, key=lambda n: n.lineno):
        if "#" in lines[node.lineno - 1]:
            continue
        above = node.lineno - 1
        while above in import_lines and "#" not in lines[above - 1]:
            above -= 1
        if above >= 1 and lines[above - 1].strip().startswith("#"):
            continue
        if above in import_lines:  # the run's first import carries the comment on its line
            continue
        bad.append(f"{path}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    return bad


def test_the_workspace_has_the_packages_this_test_knows():
    assert {"brace_msgs", "brace_common", "brace_bringup", "brace_system_tests", "brace_audit"} <= set(PACKAGES)
    assert set(MAY_IMPORT) <= set(PACKAGES)


@pytest.mark.parametrize("package", PEERS)
def test_a_peer_imports_only_the_common_packages_and_itself(package):
    allowed = COMMON | {package} | MAY_IMPORT.get(package, set())
    wrong = [f"{path.relative_to(SRC)}:{line}: imports {other}"
             for path in python_files(package) for other, line in imported_packages(path).items()
             if other not in allowed]
    assert wrong == [], "\n".join(wrong)


@pytest.mark.parametrize("package", [name for name in PEERS if name != "brace_training"])
def test_nobody_imports_the_training_tools(package):
    wrong = [str(path.relative_to(SRC)) for path in python_files(package) if "brace_training" in imported_packages(path)]
    assert wrong == []


@pytest.mark.parametrize("package", PYTHON_PACKAGES)
def test_every_imported_workspace_package_is_a_declared_dependency(package):
    declared = dependencies(package)
    missing = sorted({f"{other} (first in {path.relative_to(SRC)}:{line})"
                      for path in python_files(package) for other, line in imported_packages(path).items()
                      if other != package and other not in declared})
    assert missing == [], f"{package}/package.xml lacks: " + ", ".join(missing)


@pytest.mark.parametrize("package", PYTHON_PACKAGES)
def test_imports_inside_functions_say_why(package):
    bad = [entry for path in python_files(package) if "test" not in path.relative_to(SRC / package).parts[:1]
           for entry in lazy_imports_without_reason(path)]
    assert bad == [], "imports inside functions without a reason (move them to the top or say why):\n" + "\n".join(bad)


def test_the_checks_find_what_they_look_for(tmp_path):
    """The checks themselves: a peer import, a missing dependency and an unexplained lazy import are found."""
    module = tmp_path / "module.py"
    module.write_text("import os\n\nfrom sim_bridges.warehouse import warehouse_world\n\n\ndef f():\n"
                      "    import json\n\n    # optional: an SDK\n    import piper_sdk\n    import can\n\n"
                      "    return json, piper_sdk, can\n")
    assert imported_packages(module) == {"sim_bridges": 3}
    assert [entry.split(": ", 1)[1] for entry in lazy_imports_without_reason(module)] == ["import json"]

