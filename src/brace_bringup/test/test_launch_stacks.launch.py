"""Every installed launch file through the real launch tool (launch_testing; `colcon test` on a ROS 2 install).

`ros2 launch brace_bringup <file>` as a user starts it, from the installed
share, with the small overlay of test_launch_stacks.py (a tiny planner, one
short episode): a stack with a world runs its episode to the end and the bag
holds its plans; the others come up (every node in the graph) and stop
cleanly. Skipped where launch_testing is not installed (the PyPI wheels do not
ship it): test_launch_stacks.py starts the same processes itself there.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("launch_testing")
pytest.importorskip("launch")

import launch  # noqa: E402
import launch_testing  # noqa: E402
import launch_testing.actions  # noqa: E402
import launch_testing.asserts  # noqa: E402
from launch.actions import IncludeLaunchDescription, SetEnvironmentVariable  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402
from test_launch_stacks import LAUNCH_FILES, launch_file_arguments, nodes_up, small_run  # noqa: E402

from brace_audit.audit import records_from_bag  # noqa: E402
from brace_bringup.run_config import RunConfig  # noqa: E402
from brace_common.names import DEFAULT_NAMESPACE  # noqa: E402

WORLDS = {"demo.yaml": "embedded_sim", "airsim_k8.yaml": "airsim_bridge", "piper_twin_launch.yaml": "twin_world"}
FOLDER = Path(tempfile.mkdtemp(prefix="brace_launch_stacks_"))


@pytest.mark.launch_test
@launch_testing.parametrize("launch_file", LAUNCH_FILES)
def generate_test_description(launch_file):
    """The installed launch file with its run configuration's small overlay, in its own run folder."""
    run, variant, _ = launch_file_arguments(launch_file)
    folder = FOLDER / launch_file.name
    folder.mkdir(parents=True, exist_ok=True)
    env: dict[str, str] = {}
    path = small_run(run, folder, env)
    stack = launch.LaunchDescription([
        *(SetEnvironmentVariable(name, value) for name, value in env.items()),
        IncludeLaunchDescription(PythonLaunchDescriptionSource(str(launch_file)),
                                 launch_arguments={"run": str(path), "variant": variant,
                                                   "output": str(folder / "run")}.items()),
        launch_testing.actions.ReadyToTest()])
    return stack, {"run": run, "variant": variant, "folder": folder, "config": path}


class TestStackRuns:
    """While the stack runs."""

    def test_the_world_ends_its_episode_or_every_node_comes_up(self, proc_info, run, variant, config):
        if run in WORLDS:
            proc_info.assertWaitForShutdown(process=WORLDS[run], timeout=300)
        else:
            nodes_up(int(os.environ.get("ROS_DOMAIN_ID", "0")), list(RunConfig.load(config).stack.names),
                     DEFAULT_NAMESPACE)


@launch_testing.post_shutdown_test()
class TestAfterShutdown:
    """After the stack stopped."""

    def test_every_process_exited_cleanly(self, proc_info):
        launch_testing.asserts.assertExitCodes(proc_info)

    def test_a_world_recorded_its_episode(self, run, variant, folder):
        if run in WORLDS:
            records, note = records_from_bag(folder / "run" / variant / "bag")
            assert note == "", note
            assert len(records.episodes) == 1 and records.calls and records.plans
