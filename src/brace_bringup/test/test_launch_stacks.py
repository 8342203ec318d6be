"""Every launch file as `ros2 launch brace_bringup <file>` starts it, from the installed workspace, every process at once.

The launch tool is not installed here, so the test renders what each
installed launch file renders: its run plan (run_plan.plan_for_launch with
the launch file's own run configuration and variant, read from the file,
under a small overlay), and starts every process of the plan at once as a
subprocess: the plan's processes (the AirSim peer) and one process per node
(the installed executable with the plan's parameter file, in the plan's
namespace under the node's name, as launch_ros's Node starts it). A stack
with a world (sim, piper_twin, airsim) runs a short episode to its end and
the bag holds its plans; a stack whose world is outside (control: a robot's
bridge; isaac: a running Isaac Sim; piper_real: the arm, cameras and VLA
server) must come up: every node in the graph, then SIGINT, every process
exits 0 — a node whose hardware this machine lacks (the PiPER arm without its
CAN port) too: it stays up, unconfigured, naming what is missing.
test_launch_stacks.launch.py runs the same files through the launch tool where ROS 2 is installed (colcon test).
"""

from __future__ import annotations

import ast
import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
import rclpy
import yaml
from rclpy.executors import SingleThreadedExecutor
from rerun.chunk import RrdReader

from brace_audit.audit import records_from_bag
from brace_bringup.run_config import share
from brace_bringup.run_plan import AIRSIM_LAUNCH_ARGUMENTS, LAUNCH_ARGUMENTS, RunPlan, plan_for_launch
from brace_common.domain_leases import fresh_domain
from brace_common.spin import spin_once
from brace_common.testing import installed_executable, stop_processes, wait_for, worst_order
from erecap_planner.testing import saved_tiny_llama

LAUNCH_FILES = sorted((share() / "launch").glob("*.launch.py"))
WORLD_TIMEOUT_S = 300.0
UP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
SHORT_EPISODE = {"episodes": 1, "shutdown_when_done": True, "wait_timeout_s": 240.0}
TWIN_EPISODE_S = 15.0  # the tiny planner never finishes the pick: the episode ends on its limit, plans recorded


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A free TCP (SOCK_STREAM) or UDP (SOCK_DGRAM) port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, kind) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch_file_arguments(path: Path) -> tuple[str, str, bool]:
    """The run configuration, variant and AirSim flag an installed launch file passes to stack_launch_description."""
    call = next(c for c in ast.walk(ast.parse(path.read_text()))
                if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "stack_launch_description")
    airsim = any(k.arg == "airsim" and k.value.value for k in call.keywords)
    return call.args[0].value, call.args[1].value, airsim


def small_run(run: str, folder: Path, env: dict[str, str], more: dict[str, dict] | None = None) -> Path:
    """`run` (an installed run configuration) with a tiny planner and one short episode of its world (and `more`
    node parameters); its path."""
    overrides: dict[str, dict] = {"erecap_planner": {"model_path": saved_tiny_llama(folder / "tiny_llama"),
                                                     "pruning_layers": [1, 3], "predictor_path": "", "adapter_path": ""},
                                  **(more or {})}
    extra: dict = {}
    if run == "demo.yaml":
        overrides["embedded_sim"] = {**SHORT_EPISODE, "num_agents": 2, "max_steps": 10, "step_period_s": 0.01,
                                     "hold_while_planning": True}  # lockstep: the bag gets plans on any CPU
    elif run == "airsim_k8.yaml":
        overrides["airsim_bridge"] = {**SHORT_EPISODE, "num_agents": 2, "max_steps": 12, "step_period_s": 0.01}
        overrides["airsim_monitor"] = {"port": free_port()}   # its proxy's port (brace-run picks a free one too)
        extra["airsim_peer"] = {"port": free_port()}
    elif run == "piper_twin_launch.yaml":
        group, act_port = f"ff01::74:{(os.getpid() + 11) % 0xFFFF:x}", free_port()  # interface-local multicast
        overrides["twin_world"] = {**SHORT_EPISODE, "max_episode_s": TWIN_EPISODE_S, "can_port": group, "act_port": act_port}
        overrides["piper_arm"] = {"can_port": group}
        overrides["openvla_executor"] = {"server_url": f"http://127.0.0.1:{act_port}/act"}
        env["CAN_CONFIG"] = json.dumps({"port": free_port(socket.SOCK_DGRAM)})  # udp_multicast: one port per bus
    path = folder / f"small_{run}"
    path.write_text(yaml.safe_dump({"run": {"extends": run, "overrides": overrides, **extra}}))
    return path


def start_all(run_plan: RunPlan, env: dict[str, str], logs: Path, world: str) -> dict[str, subprocess.Popen]:
    """Every process of the plan at once, back to back: its processes, then one per node of the stack in the worst
    order, the world first (it must wait for its peers) and the planner (seconds of imports and loading) last."""
    commands = {p.name: (p.command(), dict(p.environment)) for p in run_plan.processes}
    for spec in worst_order(run_plan.nodes, world):
        commands[spec.name] = ([str(installed_executable(spec.package, spec.executable)), "--ros-args",
                                "-r", f"__ns:={run_plan.namespace}", "-r", f"__node:={spec.name}",
                                "--params-file", str(run_plan.parameters)], {})
    procs = {}
    for name, (command, extra_env) in commands.items():
        with (logs / f"{name}.log").open("w") as log:
            procs[name] = subprocess.Popen(command, env={**env, **extra_env}, stdout=log, stderr=subprocess.STDOUT)
    return procs


def stop_all(procs: dict[str, subprocess.Popen]) -> dict[str, int]:
    """SIGINT every running process (the recorder finishes its bag on SIGINT); their exit codes."""
    stop_processes(procs, STOP_TIMEOUT_S)
    return {name: proc.returncode for name, proc in procs.items()}


def nodes_up(domain: int, nodes: list[str], namespace: str) -> None:
    """Wait until every node in `nodes` is in the graph of DDS domain `domain`, in `namespace`."""
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain)
    try:
        observer = rclpy.create_node("launch_stacks_observer", context=context)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(observer)
        wanted = {(name, namespace) for name in nodes}

        def up() -> bool:
            spin_once(executor, 0.1)
            return wanted <= set(observer.get_node_names_and_namespaces())

        wait_for(up, UP_TIMEOUT_S, f"{sorted(wanted - set(observer.get_node_names_and_namespaces()))} in the graph")
        observer.destroy_node()
    finally:
        context.try_shutdown()


def test_the_viewer_starts_with_the_sim_stack_at_once_and_shows_its_run(tmp_path):
    """viewer:=true: brace_viewer starts with every other process at once, in no order, serves on 127.0.0.1, shows
    what the stack publishes (it also saves the live recording here, read back) and stops with the launch."""
    domain = fresh_domain()
    env = {**os.environ, "ROS_DOMAIN_ID": str(domain)}
    web, saved = free_port(), tmp_path / "live.rrd"
    viewer = {"brace_viewer": {"port": web, "grpc_port": free_port(), "save_path": str(saved)}}
    arguments = {name: default for name, (default, _) in LAUNCH_ARGUMENTS.items()}
    arguments.update(run=str(small_run("demo.yaml", tmp_path, env, viewer)), variant="brace_erecap",
                     output=str(tmp_path / "run"), viewer="true")
    run_plan = plan_for_launch(arguments)
    assert run_plan.stack.names[-1] == "brace_viewer"
    procs = start_all(run_plan, env, tmp_path, run_plan.stack.world)
    try:
        procs[run_plan.stack.world].wait(timeout=WORLD_TIMEOUT_S)
    finally:
        codes = stop_all(procs)
    log = (tmp_path / "brace_viewer.log").read_text()
    assert all(code == 0 for code in codes.values()), (codes, log[-3000:])
    assert f"viewer: http://127.0.0.1:{web}/?url=rerun%2Bhttp" in log, log[-3000:]
    shown = {chunk.entity_path for chunk in RrdReader(str(saved)).stream()}
    assert {"/world/robot/agent_0", "/latency/slo", "/events/episode"} <= shown, sorted(shown)


HARDWARE_ABSENT = {"piper_real.launch.py": {"piper_arm": "cannot open CAN port 'can0'"}}
"""Per launch file, the nodes whose hardware this machine lacks and what each must log while it stays up: the arm's
configure fails without its CAN port (the cameras stay up too, retrying, and say so on /diagnostics)."""


def running_naming(proc: subprocess.Popen, log: Path, reason: str) -> bool:
    """True once `reason` is in `proc`'s log; AssertionError when `proc` exited (a hardware fault must not stop it)."""
    assert proc.poll() is None, f"exited {proc.returncode}: {log.read_text()[-2000:]}"
    return reason in log.read_text()


@pytest.mark.parametrize("launch_file", LAUNCH_FILES, ids=lambda p: p.name.removesuffix(".launch.py"))
def test_every_process_of_the_launch_file_at_once(launch_file, tmp_path):
    run, variant, airsim = launch_file_arguments(launch_file)
    domain = fresh_domain()
    env = {**os.environ, "ROS_DOMAIN_ID": str(domain)}
    arguments = {name: default for name, (default, _) in {**LAUNCH_ARGUMENTS,
                                                           **(AIRSIM_LAUNCH_ARGUMENTS if airsim else {})}.items()}
    arguments.update(run=str(small_run(run, tmp_path, env)), variant=variant, output=str(tmp_path / "run"))
    run_plan = plan_for_launch(arguments)
    assert run_plan.parameters.is_file() and run_plan.folder == tmp_path / "run" / variant
    assert [p.name for p in run_plan.processes] == (["airsim_peer"] if airsim else [])
    world = run_plan.stack.world if run_plan.stack.name in ("sim", "piper_twin", "airsim") else ""
    procs = start_all(run_plan, env, tmp_path, world)
    try:
        if world:
            procs[world].wait(timeout=WORLD_TIMEOUT_S)
        else:
            for name, reason in HARDWARE_ABSENT.get(launch_file.name, {}).items():
                wait_for(lambda n=name, r=reason: running_naming(procs[n], tmp_path / f"{n}.log", r), UP_TIMEOUT_S,
                         f"{name} to name {reason!r}")
            nodes_up(domain, list(run_plan.stack.names), run_plan.namespace)
            assert all(p.poll() is None for p in procs.values()), {n: p.returncode for n, p in procs.items()}
    finally:
        codes = stop_all(procs)
    tails = {name: (tmp_path / f"{name}.log").read_text()[-3000:] for name in procs}
    assert all(code == 0 for code in codes.values()), {n: (c, tails[n]) for n, c in codes.items() if c != 0}
    if world:
        assert "waiting for" in (tmp_path / f"{world}.log").read_text(), f"{world} began before its peers were up"
        records, note = records_from_bag(run_plan.folder / "bag")
        assert note == "", note
        assert len(records.episodes) == 1 and records.calls and records.plans, (records.episodes, records.calls)
    if world == "twin_world":
        assert "plan '" in (tmp_path / "openvla_executor.log").read_text(), "no plan reached the executor"
