"""brace_sim.launch.py through the real launch tool (launch_testing; runs under `colcon test` on a ROS 2 install).

The same check as test_graph.py, but the processes are the ones the launch
file starts: every node of the sim stack at once. Skipped where launch_testing
is not installed (the PyPI wheels do not ship it).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

pytest.importorskip("launch_testing")
pytest.importorskip("launch")

import launch  # noqa: E402
import launch_testing  # noqa: E402
import launch_testing.actions  # noqa: E402
from graph_run import VARIANT, check_bag, tiny_run_config  # noqa: E402
from launch.actions import IncludeLaunchDescription  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402

from brace_bringup.run_config import share  # noqa: E402

FOLDER = Path(tempfile.mkdtemp(prefix="brace_sim_launch_"))


@pytest.mark.launch_test
def generate_test_description():
    """The sim launch file with the tiny run configuration; the test ends when the simulator exits."""
    sim = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(str(share() / "launch" / "brace_sim.launch.py")),
        launch_arguments={"run": str(tiny_run_config(FOLDER)), "variant": VARIANT,
                          "output": str(FOLDER / "run")}.items())
    return launch.LaunchDescription([sim, launch_testing.actions.ReadyToTest()]), {}


class TestSimulatorFinishes:
    """While the stack runs."""

    def test_the_simulator_exits_after_its_episodes(self, proc_info):
        proc_info.assertWaitForShutdown(process="embedded_sim", timeout=300)


@launch_testing.post_shutdown_test()
class TestBag:
    """After the stack stopped."""

    def test_every_episode_received_plans_and_the_bag_holds_them(self):
        check_bag(FOLDER / "run" / VARIANT / "bag")
