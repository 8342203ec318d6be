"""The launch tool's rendering of a run plan: every process and every node of the stack its own process, at once.

`ros2 launch brace_bringup brace_sim.launch.py [run:=...] [variant:=...] [namespace:=...] [output:=...]`

A launch file names its run configuration and variant; the plan
(brace_bringup.run_plan: the processes beside the stack and the one
parameter file) is the one brace-run renders for the same run and variant,
so both start the same system. Nothing is set inline here. Every process
starts at once, in no order: readiness is the graph's (the world waits for
its peers, the controller for a Replan server, the planner configures and
activates itself and waits for its server).
"""

from __future__ import annotations

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, ExecuteProcess, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from .run_plan import AIRSIM_LAUNCH_ARGUMENTS, LAUNCH_ARGUMENTS, RunPlan, plan_for_launch


def render(run_plan: RunPlan) -> list:
    """ExecuteProcess actions of the plan's processes and Node actions of its stack (the one parameter file)."""
    processes = [ExecuteProcess(cmd=p.command(), name=p.name, additional_env=dict(p.environment), output="screen")
                 for p in run_plan.processes]
    return processes + [Node(package=spec.package, executable=spec.executable, name=spec.name,
                             namespace=run_plan.namespace, parameters=[str(run_plan.parameters)], output="screen")
                        for spec in run_plan.nodes]


def stack_launch_description(run: str, variant: str, airsim: bool = False) -> LaunchDescription:
    """A launch file's description: its arguments (defaults: run configuration `run`, `variant`; with `airsim` the
    AirSim arguments) and the rendered plan for the arguments given."""
    arguments = {**LAUNCH_ARGUMENTS, **(AIRSIM_LAUNCH_ARGUMENTS if airsim else {})}
    defaults = {name: default for name, (default, _) in arguments.items()} | {"run": run, "variant": variant}

    def actions(context) -> list:
        return render(plan_for_launch({name: LaunchConfiguration(name).perform(context) for name in arguments}))

    return LaunchDescription([*(DeclareLaunchArgument(name, default_value=defaults[name], description=text)
                                for name, (_, text) in arguments.items()),
                              OpaqueFunction(function=actions)])
