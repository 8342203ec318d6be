"""The layouts for viewers other than ours name what the stack records: the Foxglove layout (generated, installed
with brace_bringup) is current and every topic and field it plots or tables is recorded; the RViz config lists every
marker namespace the worlds draw."""

from __future__ import annotations

import json
import re
from pathlib import Path

from brace_audit.audit_recorder_node import TOPICS, message_class
from brace_audit.foxglove_layout import layout_json
from brace_bringup.run_config import share
from brace_common import names

SRC = Path(__file__).resolve().parents[2]


def message_paths(node) -> list[str]:
    """Every message path in a layout: plotted values, table / raw-message topics, 3-D topics."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("value", "topicPath") and isinstance(value, str):
                found.append(value)
            elif key == "topics" and isinstance(value, dict):
                found += list(value)
            else:
                found += message_paths(value)
    elif isinstance(node, list):
        for item in node:
            found += message_paths(item)
    return found


def test_the_foxglove_layout_is_current_and_names_recorded_fields():
    installed = share() / "foxglove" / "brace_layout.json"
    assert installed.read_text() == layout_json(), "regenerate: python -m brace_audit.foxglove_layout > " \
                                                   "src/brace_bringup/foxglove/brace_layout.json"
    paths = message_paths(json.loads(installed.read_text()))
    assert len(paths) >= 8, paths
    prefix = names.DEFAULT_NAMESPACE + "/"
    for path in paths:
        assert path.startswith(prefix), path
        topic, _, field = path.removeprefix(prefix).partition(".")
        assert topic in TOPICS, f"{path}: {topic} is not recorded"
        if field:
            fields = message_class(TOPICS[topic][0]).get_fields_and_field_types()
            assert field in fields, f"{path}: {TOPICS[topic][0]} has no field {field}"


def test_the_rviz_config_lists_every_marker_namespace_the_worlds_draw():
    drawn = set()
    for source in SRC.glob("*/*/**/*.py"):
        drawn |= set(re.findall(r'\bmarker\("([a-z_]+)"', source.read_text()))
    assert {"shelves", "drones", "loops"} <= drawn, drawn      # the search itself finds the worlds' markers
    config = (share() / "rviz" / "brace.rviz").read_text()
    listed = set(re.findall(r"^\s+([a-z_]+): true$", config.split("Namespaces:", 1)[1].split("Tools:", 1)[0], re.M))
    assert drawn <= listed, f"brace.rviz lacks {sorted(drawn - listed)}"
    assert f"Value: {names.DEFAULT_NAMESPACE}/{names.MARKERS}" in config
