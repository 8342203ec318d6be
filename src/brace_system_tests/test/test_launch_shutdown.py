"""A run ends with its world, a failed node ends it with its code, and Ctrl-C stops every node quietly.

The sim stack's nodes start as `ros2 launch` starts them (every node its own
process, all at once) and the run plan's rule (RunPlan.first_end, which the
launch files render as OnProcessExit handlers) says when and how the run
ended; the rest are then stopped with SIGINT twice, as a Ctrl-C under
`ros2 launch` reaches them (the terminal's, and launch's own). brace-run,
with nodes in processes of their own, returns the code of the process that
ended its run. Nothing here waits on time: each step waits for an exit or a
log line, with generous limits for a slow, busy machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import rclpy
from brace_msgs.action import Replan
from brace_msgs.msg import ContextEntry, ReplanCall
from graph_run import VARIANT
from rclpy.action import ActionClient
from rclpy.executors import SingleThreadedExecutor

from brace_bringup.run_config import RunConfig
from brace_bringup.run_plan import plan
from brace_common import names, qos
from brace_common.domain_leases import fresh_domain
from brace_common.spin import spin_once
from brace_common.testing import installed_executable, wait_for
from brace_common.vocabulary import CallStatus
from brace_system_tests.process_graph import (
    NOISE,
    RUN_TIMEOUT_S,
    STOP_TIMEOUT_S,
    ctrl_c,
    noise,
    run_end,
    small_run,
    start_every_node,
)
from erecap_planner.testing import saved_tiny_llama

UP_TIMEOUT_S = 120.0


def domain() -> str:
    return str(fresh_domain())  # this test's own, given back after it


def logged(path: Path, text: str) -> bool:
    return path.is_file() and text in path.read_text()


def test_the_worlds_exit_ends_the_run_and_every_other_node_stops_quietly(tmp_path):
    run_plan = plan(RunConfig.load(small_run(tmp_path)), VARIANT, tmp_path / "run" / VARIANT)
    procs = start_every_node(run_plan, {**os.environ, "ROS_DOMAIN_ID": domain()}, tmp_path)
    try:
        end = run_end(run_plan, procs)
        assert (end.code, end.process) == (0, "embedded_sim"), (end, (tmp_path / f"{end.process}.log").read_text())
    finally:
        codes = ctrl_c(procs)
    assert all(code == 0 for code in codes.values()), codes
    assert not noise(tmp_path, procs), {n: (w, (tmp_path / f"{n}.log").read_text()[-2000:])
                                        for n, w in noise(tmp_path, procs).items()}
    assert logged(tmp_path / "audit_recorder.log", "closed:"), "the recorder finished its bag"


def test_a_node_with_an_invalid_parameter_ends_the_run_with_2(tmp_path):
    run_plan = plan(RunConfig.load(small_run(tmp_path, {"brace_controller": {"cooldown_steps": -3}})), VARIANT,
                    tmp_path / "run" / VARIANT)
    procs = start_every_node(run_plan, {**os.environ, "ROS_DOMAIN_ID": domain()}, tmp_path)
    try:
        end = run_end(run_plan, procs)
        assert (end.code, end.process) == (2, "brace_controller"), end
        assert "cooldown_steps" in (tmp_path / "brace_controller.log").read_text()
        # the others are stopped at once, as launch stops them: some still import (brace_common.startup)
    finally:
        codes = ctrl_c(procs)
    assert codes.pop("brace_controller") == 2 and all(code == 0 for code in codes.values()), codes
    assert not noise(tmp_path, procs), noise(tmp_path, procs)


def test_ctrl_c_during_a_call_ends_it_with_its_record_and_the_planner_exits_0_quietly(tmp_path):
    model = saved_tiny_llama(tmp_path / "tiny")
    namespace = f"/ctrl_c_{os.getpid()}"  # a graph beside the tests on this domain has a planner of its own
    graph_domain = domain()
    with (tmp_path / "erecap_planner.log").open("w") as log:
        proc = subprocess.Popen(
            [str(installed_executable("erecap_planner", "erecap_planner")), "--ros-args", "-r", f"__ns:={namespace}",
             "-p", f"model_path:={model}", "-p", "pruning_layers:=[1, 3]", "-p", "decoding:=json",
             "-p", "max_new_tokens:=8000", "-p", "compressor:=none"],
            env={**os.environ, "ROS_DOMAIN_ID": graph_domain}, stdout=log, stderr=subprocess.STDOUT)
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=int(graph_domain))
    try:
        node = rclpy.create_node("client", namespace=namespace, context=context)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        client = ActionClient(node, Replan, names.REPLAN)
        context_pub = node.create_publisher(ContextEntry, names.CONTEXT, qos.EVENTS)
        records: list[ReplanCall] = []
        node.create_subscription(ReplanCall, names.REPLAN_CALLS, records.append, qos.EVENTS)
        wait_for(lambda: spin_once(executor, 0.1) or client.server_is_ready(), UP_TIMEOUT_S, "the Replan server")
        for t in range(200):
            context_pub.publish(ContextEntry(agent_id="agent_0", step=t, block=ContextEntry.BLOCK_HISTORY,
                                             text=f"event {t} " * 20))
        phases: list[str] = []
        goal = Replan.Goal(agent_id="agent_0", token_budget=4096, slo_ms=600_000.0, hard_deadline_ms=600_000.0)
        sent = client.send_goal_async(goal, feedback_callback=lambda f: phases.append(f.feedback.phase))
        wait_for(lambda: spin_once(executor, 0.05) or "decode" in phases, RUN_TIMEOUT_S, "the call to decode")
        assert sent.result().accepted
        codes = ctrl_c({"erecap_planner": proc})
        wait_for(lambda: spin_once(executor, 0.05) or records, STOP_TIMEOUT_S, "the call's record")
    finally:
        if proc.poll() is None:
            proc.kill()
        context.try_shutdown()
    output = (tmp_path / "erecap_planner.log").read_text()
    assert codes == {"erecap_planner": 0}, output[-3000:]
    assert not [n for n in NOISE if n in output], output[-3000:]
    assert [r.status for r in records] == [CallStatus.CANCELLED], "the call in flight ends with its record"


def brace_run(run: Path, output: Path) -> subprocess.CompletedProcess:
    """`brace-run <run> --quiet` as a user runs it; its exit code and output."""
    return subprocess.run([sys.executable, "-m", "brace_bringup.runner", str(run), "--variants", VARIANT, "--quiet",
                           "--output", str(output)], env={**os.environ, "ROS_DOMAIN_ID": domain()},
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S)


def test_brace_run_returns_2_when_a_node_of_its_own_has_an_invalid_parameter(tmp_path):
    run = small_run(tmp_path, {"brace_controller": {"cooldown_steps": -3}}, own_process=["brace_controller"])
    done = brace_run(run, tmp_path / "runs")
    assert done.returncode == 2, (done.stdout[-2000:], done.stderr[-3000:])
    assert "brace_controller exited with 2" in done.stderr and "cooldown_steps" in done.stderr, done.stderr[-3000:]


def test_brace_run_with_nodes_of_their_own_ends_with_its_world_and_returns_0(tmp_path):
    run = small_run(tmp_path, own_process=["trigger_monitor", "brace_controller"])
    started = time.monotonic()
    done = brace_run(run, tmp_path / "runs")
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:], time.monotonic() - started)
    assert "run folder:" in done.stdout
    (folder,) = (tmp_path / "runs").iterdir()
    logs = {name: (folder / f"{name}.log").read_text() for name in ("trigger_monitor", "brace_controller")}
    assert not {n: [w for w in NOISE if w in text] for n, text in logs.items() if any(w in text for w in NOISE)}, logs
