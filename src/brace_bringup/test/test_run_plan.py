"""How a run ends (run_plan.RunPlan.end_on_exit), the rule the launch files and brace-run both render: the world's
exit ends it with the world's code, any other process's exit ends it with its own (2: an invalid configuration)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from brace_bringup.run_config import RunConfig
from brace_bringup.run_plan import RunPlan, plan


@pytest.fixture(scope="module")
def sim_plan(tmp_path_factory) -> RunPlan:
    return plan(RunConfig.load("demo"), "brace_erecap", tmp_path_factory.mktemp("run"))


def test_the_world_finishing_its_episodes_ends_the_run_with_0(sim_plan):
    end = sim_plan.end_on_exit("embedded_sim", 0)
    assert (end.code, end.process) == (0, "embedded_sim") and "finished its episodes" in end.reason


@pytest.mark.parametrize("name", ["embedded_sim", "brace_controller", "erecap_planner", "audit_recorder"])
def test_an_invalid_configuration_ends_the_run_with_2_naming_the_node(sim_plan, name):
    end = sim_plan.end_on_exit(name, 2)
    assert end.code == 2 and end.process == name and name in end.reason and "invalid configuration" in end.reason


def test_a_node_that_crashed_or_left_ends_the_run_non_zero(sim_plan):
    assert sim_plan.end_on_exit("erecap_planner", 1).code == 1
    assert sim_plan.end_on_exit("trigger_monitor", -signal.SIGKILL).code == 128 + signal.SIGKILL  # as a shell says
    left = sim_plan.end_on_exit("trigger_monitor", 0)  # a node the run needs is gone: the run is not complete
    assert left.code == 1 and "trigger_monitor" in left.reason


def test_a_stack_without_a_world_ends_only_on_a_fault(tmp_path):
    control = plan(RunConfig.load("control"), "brace_erecap", tmp_path)
    assert control.stack.world == "" and {control.end_on_exit(n, 0).code for n in control.stack.names} == {1}


def test_the_first_process_to_exit_ends_the_run_the_others_still_running(sim_plan):
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    failed = subprocess.Popen([sys.executable, "-c", "raise SystemExit(2)"])
    try:
        assert sim_plan.first_end({"audit_recorder": running}) is None
        failed.wait(timeout=60)
        end = sim_plan.first_end({"audit_recorder": running, "brace_controller": failed})
        assert (end.code, end.process) == (2, "brace_controller")
    finally:
        running.kill()
        running.wait()


def test_the_viewer_runs_in_a_process_of_its_own(tmp_path):
    """brace-run --view starts brace_viewer as launch does: its own process, not composed beside the planner."""
    cfg = RunConfig.load("demo")
    cfg.viewer = True
    viewed = plan(cfg, "brace_erecap", tmp_path)
    assert "brace_viewer" in viewed.stack.names
    assert [p.name for p in viewed.node_processes()] == ["brace_viewer"]
    assert "brace_viewer" not in [spec.name for spec in viewed.composed]
