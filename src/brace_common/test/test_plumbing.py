"""brace_common's small helpers: parameter files in any namespace, stamps, diagnostics levels."""

from __future__ import annotations

import pytest
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticStatus

from brace_common.clock import seconds_of, stamp_after, stamp_of
from brace_common.config import ConfigError, load_ros_parameters, resolve_path
from brace_common.diagnostics import diagnostic_array, nonzero
from brace_common.readiness import PeerWait


def test_parameter_files_apply_in_any_namespace(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("/**:\n  ros__parameters: {a: 1, b: 1}\n/**/node:\n  ros__parameters: {b: 2}\n"
                    "other:\n  ros__parameters: {c: 3}\n")
    assert load_ros_parameters(path, "node") == {"a": 1, "b": 2}  # its own section over the wildcard
    other = tmp_path / "q.yaml"
    other.write_text("other:\n  ros__parameters: {c: 3}\n")
    with pytest.raises(ConfigError) as err:
        load_ros_parameters(other, "node")
    assert err.value.parameter == "ros__parameters"


def test_package_paths_resolve_to_the_package_and_plain_paths_stay():
    assert resolve_path("/tmp/x.yaml") == "/tmp/x.yaml"
    assert resolve_path("package://sim_bridges/config/warehouse_actions.yaml").endswith(
        "sim_bridges/config/warehouse_actions.yaml")


def test_stamps_add_milliseconds_exactly():
    base = Time(sec=10, nanosec=999_999_000)
    later = stamp_after(base, 0.002)
    assert (later.sec, later.nanosec) == (11, 1_000)
    assert seconds_of(stamp_of(12.5)) == 12.5


def test_diagnostics_level_follows_what_went_wrong():
    stamp = Time(sec=1)
    ok = diagnostic_array("n", {"x": 1}, stamp).status[0]
    warn = diagnostic_array("n", {}, stamp, warnings=["malformed"]).status[0]
    error = diagnostic_array("n", {}, stamp, warnings=["malformed"], errors=["no planner"]).status[0]
    assert (ok.level, ok.message, ok.values[0].value) == (DiagnosticStatus.OK, "ok", "1")
    assert (warn.level, warn.message) == (DiagnosticStatus.WARN, "counted: malformed")
    assert (error.level, error.message) == (DiagnosticStatus.ERROR, "no planner")
    assert nonzero({"a": 0, "b": 2}, ("a", "b", "c")) == ["b"]


class _GraphView:
    """What PeerWait reads of a node: its namespace and the node names it can see."""

    def __init__(self, present):
        self.present = present

    def get_namespace(self):
        return "/brace"

    def get_node_names_and_namespaces(self):
        return [(name, "/brace") for name in self.present] + [("planner", "/other")]


def test_peer_wait_reports_what_is_missing_once_overdue():
    view = _GraphView(["monitor"])
    wait = PeerWait(view, ["monitor", "planner"], settle_s=0.0, timeout_s=0.0)
    assert wait.missing() == ["planner"] and not wait.ready()        # another namespace's planner does not count
    (line,) = wait.errors("episodes do not start")
    assert line.startswith("peers missing after ") and line.endswith(": planner; episodes do not start")
    view.present.append("planner")
    assert wait.ready() and wait.errors() == []
