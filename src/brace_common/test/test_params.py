"""Parameters after every file and the command line are merged: an empty list given last wins."""

from __future__ import annotations

from brace_common.params import emptied_lists


def _write(path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_an_empty_list_in_a_later_file_or_on_the_command_line_wins(tmp_path):
    base = _write(tmp_path / "base.yaml", "/**:\n  ros__parameters:\n    agents: [a, b]\n    names: [x]\n")
    overlay = _write(tmp_path / "overlay.yaml", "/**/monitor:\n  ros__parameters:\n    agents: []\n")
    refill = _write(tmp_path / "refill.yaml", "/brace/monitor:\n  ros__parameters:\n    agents: [c]\n")
    ros = ["prog", "--ros-args", "--params-file", base, "--params-file", overlay]
    assert emptied_lists(ros, "monitor", "/brace/monitor") == {"agents"}
    assert emptied_lists([*ros, "--params-file", refill], "monitor", "/brace/monitor") == set()  # last wins
    assert emptied_lists([*ros, "-p", "names:=[]"], "monitor", "/brace/monitor") == {"agents", "names"}
    assert emptied_lists(["prog", "--ros-args", "--params-file", overlay], "other", "/brace/other") == set()
    assert emptied_lists(["prog", "--params-file", overlay], "monitor", "/monitor") == set()  # not a ROS argument


def test_nested_names_and_unreadable_files_are_handled(tmp_path):
    nested = _write(tmp_path / "nested.yaml", "/**:\n  ros__parameters:\n    group:\n      ids: []\n")
    broken = _write(tmp_path / "broken.yaml", "/**: [unclosed\n")
    args = ["prog", "--ros-args", "--params-file", nested, "--params-file", broken,
            "--params-file", str(tmp_path / "missing.yaml"), "-p", "bad:=[unclosed"]
    assert emptied_lists(args, "n", "/n") == {"group.ids"}
