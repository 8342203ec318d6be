"""The launch tool's rendering of a run plan: every process and every node of the stack its own process, at once.

`ros2 launch brace_bringup brace_sim.launch.py [run:=...] [variant:=...] [namespace:=...] [output:=...]`

A launch file names its run configuration and variant; the plan
(brace_bringup.run_plan: the processes beside the stack and the one
parameter file) is the one brace-run renders for the same run and variant,
so both start the same system. Nothing is set inline here. Every process
starts at once, in no order: readiness is the graph's (the world waits for
its peers, the controller for a Replan server, the planner configures and
activates itself and waits for its server).

The run ends with its first process to exit (run_plan.RunPlan.end_on_exit):
the world's exit after its episodes shuts the launch down (every other
process gets SIGINT at once); any process's failure (a node's invalid
configuration exits 2) shuts it down with `ros2 launch` returning 1: launch's
LaunchService.run returns 0, or 1 when an action raised, never a process's
own code, so the failure is raised as run_plan.RunEnded (launch logs "Caught
exception in launch ...: <process> exited with <code> ...: the run ends");
brace-run returns the code itself. Ctrl-C returns 0.
"""

from __future__ import annotations

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, ExecuteProcess, OpaqueFunction, RegisterEventHandler, Shutdown
from launch.event_handlers import OnProcessExit
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from .run_plan import AIRSIM_LAUNCH_ARGUMENTS, LAUNCH_ARGUMENTS, RunEnded, RunPlan, plan_for_launch


def ends_the_run(run_plan: RunPlan, name: str):
    """The OnProcessExit callback of process `name`: its exit ends the run, unless the launch is already shutting
    down (the exits of the processes a shutdown stops)."""

    def on_exit(event, context) -> list:
        if context.is_shutdown:
            return []
        end = run_plan.end_on_exit(name, event.returncode)
        if end.code != 0:
            raise RunEnded(end)  # launch shuts down and returns 1
        return [Shutdown(reason=end.reason)]

    return on_exit


def render(run_plan: RunPlan) -> list:
    """For each of the plan's processes and each node of its stack (the one parameter file) an OnProcessExit handler
    (its exit ends the run), then the ExecuteProcess and Node actions that start them."""
    processes = [(p.name, ExecuteProcess(cmd=p.command(), name=p.name, additional_env=dict(p.environment),
                                         output="screen"))
                 for p in run_plan.processes]
    nodes = [(spec.name, Node(package=spec.package, executable=spec.executable, name=spec.name,
                              namespace=run_plan.namespace, parameters=[str(run_plan.parameters)], output="screen"))
             for spec in run_plan.nodes]
    return [RegisterEventHandler(OnProcessExit(target_action=action, on_exit=ends_the_run(run_plan, name)))
            for name, action in processes + nodes] + [action for _, action in processes + nodes]


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
