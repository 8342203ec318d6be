"""The planner as its own process: SIGTERM in the middle of a call ends it cleanly (no RCLError traceback)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import rclpy
from brace_msgs.action import Replan
from brace_msgs.msg import ContextEntry
from rclpy.action import ActionClient
from rclpy.executors import SingleThreadedExecutor

from brace_common import names, qos
from brace_common.domain_leases import fresh_domain
from brace_common.testing import installed_executable
from erecap_planner.testing import saved_tiny_llama


def test_sigterm_in_the_middle_of_a_call_exits_cleanly(tmp_path):
    model = saved_tiny_llama(tmp_path / "tiny")
    domain = fresh_domain()
    # a namespace of its own as well: a graph on the same domain (a run beside the tests) has a planner too, and its
    # action server must not pass for this one before this process is up
    namespace = f"/sigterm_test_{os.getpid()}"
    log = (tmp_path / "planner.log").open("w")
    proc = subprocess.Popen(
        [str(installed_executable("erecap_planner", "erecap_planner")), "--ros-args",
         "-r", f"__ns:={namespace}", "-p", f"model_path:={model}",
         "-p", "pruning_layers:=[1, 3]", "-p", "decoding:=json", "-p", "max_new_tokens:=8000",
         "-p", "compressor:=none"],
        env={**os.environ, "ROS_DOMAIN_ID": str(domain)}, stdout=log, stderr=subprocess.STDOUT)
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain)
    try:
        node = rclpy.create_node("client", namespace=namespace, context=context)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        client = ActionClient(node, Replan, names.REPLAN)
        pub = node.create_publisher(ContextEntry, names.CONTEXT, qos.EVENTS)
        end = time.monotonic() + 120
        while not client.server_is_ready() and time.monotonic() < end:
            executor.spin_once(timeout_sec=0.1)
        assert client.server_is_ready(), (tmp_path / "planner.log").read_text()[-2000:]
        for t in range(200):
            pub.publish(ContextEntry(agent_id="a", step=t, block=ContextEntry.BLOCK_HISTORY, text=f"event {t} " * 20))
        phases = []
        goal = Replan.Goal(agent_id="a", token_budget=4096, slo_ms=600_000.0, hard_deadline_ms=600_000.0)
        future = client.send_goal_async(goal, feedback_callback=lambda f: phases.append(f.feedback.phase))
        while "decode" not in phases and time.monotonic() < end:  # the call is decoding (8,000 tokens at most)
            executor.spin_once(timeout_sec=0.05)
        assert future.done() and future.result().accepted and "decode" in phases
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        assert code == 0, (tmp_path / "planner.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        context.try_shutdown()
        log.close()
    output = (tmp_path / "planner.log").read_text()
    assert "Traceback" not in output and "RCLError" not in output, output[-3000:]
