"""The launch tool's rendering of a run plan ends the launch with its world or a failed process (where launch is
installed; the PyPI wheels do not ship it, and test_run_plan.py checks the rule itself everywhere)."""

from __future__ import annotations

import pytest

pytest.importorskip("launch")
pytest.importorskip("launch_ros")

from launch import LaunchContext  # noqa: E402
from launch.actions import ExecuteProcess, RegisterEventHandler, Shutdown  # noqa: E402
from launch.event_handlers import OnProcessExit  # noqa: E402
from launch.events.process import ProcessExited  # noqa: E402

from brace_bringup.launch_description import render  # noqa: E402
from brace_bringup.run_config import RunConfig  # noqa: E402
from brace_bringup.run_plan import RunEnded, plan  # noqa: E402


def exited(action: ExecuteProcess, returncode: int) -> ProcessExited:
    return ProcessExited(returncode=returncode, action=action, name=action.name, cmd=["x"], cwd=None, env=None,
                         pid=1)


def test_every_process_has_a_handler_its_exit_ends_the_run(tmp_path):
    run_plan = plan(RunConfig.load("demo"), "brace_erecap", tmp_path)
    actions = render(run_plan)
    names = [p.name for p in run_plan.processes] + [spec.name for spec in run_plan.nodes]
    started = [a for a in actions if isinstance(a, ExecuteProcess)]
    handlers = [a.event_handler for a in actions if isinstance(a, RegisterEventHandler)]
    assert len(started) == len(handlers) == len(names) and all(isinstance(h, OnProcessExit) for h in handlers)
    assert all(actions.index(h) < actions.index(started[0]) for h in actions if isinstance(h, RegisterEventHandler))
    assert [[h.matches(exited(a, 0)) for a in started] for h in handlers] == \
        [[i == j for j in range(len(started))] for i in range(len(handlers))], "one handler per process, its own"
    context = LaunchContext()
    world, controller = names.index("embedded_sim"), names.index("brace_controller")
    entities = handlers[world].handle(exited(started[world], 0), context)
    assert [type(e) for e in entities] == [Shutdown], entities
    with pytest.raises(RunEnded, match="brace_controller exited with 2: invalid configuration") as ended:
        handlers[controller].handle(exited(started[controller], 2), context)
    assert ended.value.end.code == 2
    context._set_is_shutdown(True)  # the exits of the processes a shutdown stops end nothing more
    assert not handlers[controller].handle(exited(started[controller], 2), context)
