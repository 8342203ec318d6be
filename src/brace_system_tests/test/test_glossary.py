"""Every parameter the nodes declare and every CSV column the audit and the benchmarks write is in docs/glossary.md.

The rule (stated in the glossary): a name passes when the table "Names" lists it, or when every part between
underscores is one of the "Words" and only the last part may be a unit suffix of the table "Units"; a retired name
and a name ending in `_hz` (periods, not rates) fail.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from brace_audit import drone_report, pickfruit_report
from brace_audit.audit_report import CallRow, RunRecords, phase_breakdown, summary, suppression_rows, trigger_rows
from brace_bringup.param_docs import NODE_CONFIGS
from brace_common.replanning import Decision, Trigger
from brace_common.vocabulary import CallStatus, Mode, Reason, TriggerKind

ROOT = Path(__file__).resolve().parents[3]
GLOSSARY = ROOT / "docs" / "glossary.md"


@dataclasses.dataclass
class Glossary:
    """What the glossary declares: names, words, unit suffixes and retired names."""

    names: set[str]
    words: set[str]
    units: set[str]
    retired: set[str]


def _section(text: str, title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"docs/glossary.md has no section '## {title}'"
    return match.group(1)


def _first_cells(section: str) -> list[str]:
    return [line.split("|")[1] for line in section.splitlines() if line.startswith("| ") and "---" not in line]


def load_glossary(path: Path = GLOSSARY) -> Glossary:
    """Parse docs/glossary.md."""
    text = path.read_text()
    names = {n for cell in _first_cells(_section(text, "Names")) for n in re.findall(r"`([a-z0-9_]+)`", cell)}
    units = {u.lstrip("_") for cell in _first_cells(_section(text, "Units")) for u in re.findall(r"`(_[a-z][a-z0-9]*)`", cell)}
    block = re.search(r"```\n(.*?)```", _section(text, "Words"), re.S)
    assert block, "the Words section has no code block"
    retired = {n for cell in _first_cells(_section(text, "Retired names")) for n in re.findall(r"`([a-z0-9_]+)`", cell)}
    return Glossary(names, set(block.group(1).split()), units, retired)


def problem(name: str, glossary: Glossary) -> str:
    """Why `name` breaks the glossary's rule, or ''."""
    if name in glossary.retired:
        return "a retired name"
    if name.endswith("_hz"):
        return "a rate: parameters and columns are periods (_period_s)"
    if name in glossary.names:
        return ""
    parts = name.split("_")
    if parts[-1] in glossary.units and len(parts) > 1:
        parts = parts[:-1]
    unknown = [p for p in parts if p not in glossary.words]
    return f"not in the glossary (unknown word(s) {unknown})" if unknown else ""


def parameter_names() -> dict[str, str]:
    """Every parameter a node declares -> the node."""
    return {f.name: node for node, classes in NODE_CONFIGS.items() for cls in classes for f in dataclasses.fields(cls)}


def csv_columns() -> dict[str, str]:
    """Every CSV column the audit report (summary, phases, suppression, Table 25, Table 32, the intersection) and
    bench/reproduce.py write -> the writer."""
    run = RunRecords("v", calls=[CallRow(0, "a", CallStatus.OK, 10.0, 20.0, True, 100, 50, "erecap",
                                         {"decode": (5.0, 10, 2)})],
                     decisions=[(0, Decision("d0", Trigger(TriggerKind.PERIODIC, "a", 0), False, Reason.COOLDOWN,
                                             Mode.DEFER_REPLAN))], duration_s=60.0)
    columns = {c: "summary.csv" for c in summary(run)}
    columns |= {c: "phases.csv" for c in phase_breakdown(run)[0]}
    columns |= {c: "suppression.csv" for c in suppression_rows(run)[0]}
    columns |= {c: "Table 25" for c in trigger_rows(run)}
    columns |= {c: "table32.csv" for c in pickfruit_report.row(run)}
    columns |= {c: "intersection.csv" for c in drone_report.row(run)}
    tree = ast.parse((ROOT / "bench" / "reproduce.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id.endswith("_COLUMNS"):
            columns |= {e.value: "bench/reproduce.py" for e in ast.walk(node.value)
                        if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return columns


def test_every_parameter_is_in_the_glossary():
    glossary = load_glossary()
    bad = {f"{node}.{name}": why for name, node in parameter_names().items() if (why := problem(name, glossary))}
    assert not bad, bad


def test_every_csv_column_is_in_the_glossary():
    glossary = load_glossary()
    bad = {f"{where}: {name}": why for name, where in csv_columns().items() if (why := problem(name, glossary))}
    assert not bad, bad


@pytest.mark.parametrize("name", ["near_miss_m", "hazard_distance", "control_rate_hz", "robots", "hazard_radius_m",
                                  "calls_per_m_episode", "replans_per_episode", "stale_input_s"])
def test_a_name_outside_the_glossary_fails(name):
    assert problem(name, load_glossary())


def test_the_glossary_names_the_renamed_parameters():
    glossary = load_glossary()
    for name in ("hazard_distance_m", "agent_state_period_s", "control_period_s", "feedback_period_s", "stale_after_s",
                 "max_steps", "max_episode_s", "agents", "num_agents", "parameters", "parameters_json"):
        assert name in glossary.names, name
    assert {"m", "s", "ms", "rad", "deg", "mps", "hz"} <= glossary.units
