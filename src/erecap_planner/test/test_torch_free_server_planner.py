"""A server-backed planner starts, configures and answers a Replan goal sent over ROS in a fresh interpreter without
importing torch or transformers (other tests' imports cannot hide one there)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from brace_common.domain_leases import fresh_domain
from erecap_planner.openai_fault_server import FaultServer
from erecap_planner.testing import saved_tiny_llama

PLANNER = textwrap.dedent("""
    import json, sys, threading
    import rclpy
    from brace_msgs.action import Replan
    from brace_msgs.msg import ContextEntry
    from rclpy.action import ActionClient
    from rclpy.executors import MultiThreadedExecutor
    from rclpy.node import Node
    from rclpy.parameter import Parameter
    from brace_common import qos
    from brace_common.testing import wait_for
    from erecap_planner.planner_node import ErecapPlannerNode

    url, model = sys.argv[1], sys.argv[2]
    rclpy.init()
    params = {"backend": "openai", "server_url": url, "compressor": "recency", "model_path": model}
    node = ErecapPlannerNode(namespace="/torch_free",
                             parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
    node.trigger_configure()
    assert node.call_path is not None, node.last_error
    node.trigger_activate()
    client = Node("controller", namespace="/torch_free")
    action = ActionClient(client, Replan, "replan")
    context = client.create_publisher(ContextEntry, "context", qos.EVENTS)
    executor = MultiThreadedExecutor(num_threads=4)
    executor.add_node(node)
    executor.add_node(client)
    spinning = threading.Thread(target=executor.spin)
    spinning.start()
    wait_for(action.server_is_ready, timeout=30, what="Replan served once the planner server answered")
    wait_for(lambda: context.get_subscription_count() > 0, what="context subscription")
    context.publish(ContextEntry(agent_id="a", step=0, block=ContextEntry.BLOCK_TASK, text="fetch cup_3"))
    wait_for(lambda: node.intake.counts["context_entries"] == 1, what="the task entry")
    sent = action.send_goal_async(Replan.Goal(agent_id="a", token_budget=400, slo_ms=5000.0, hard_deadline_ms=10000.0))
    wait_for(sent.done, what="goal response")
    done = sent.result().get_result_async()
    wait_for(done.done, timeout=30, what="result")
    result = done.result().result
    print(json.dumps({"status": result.call.status, "steps": [s.action for s in result.plan.steps],
                      "backend": result.call.backend, "error": result.call.error,
                      "torch": "torch" in sys.modules, "transformers": "transformers" in sys.modules}), flush=True)
    # The spin thread ends before the interpreter does: a thread still in rclpy's wait at exit aborts the process.
    executor.shutdown()
    spinning.join()
    node.destroy_node()
    client.destroy_node()
    rclpy.shutdown()
""")


def test_an_openai_backed_planner_answers_a_goal_without_torch_or_transformers(tmp_path):
    model = saved_tiny_llama(tmp_path / "tiny")  # its tokenizer folder; the weights stay unread
    env = {**os.environ, "ROS_DOMAIN_ID": str(fresh_domain())}  # this test's graph alone
    with FaultServer() as server:
        run = subprocess.run([sys.executable, "-c", PLANNER, server.base_url, model], capture_output=True, text=True,
                             timeout=120, env=env)
        assert run.returncode == 0, run.stderr[-3000:]
        answer = json.loads(run.stdout.strip().splitlines()[-1])
        assert server.requests and server.requests[0]["path"] == "/v1/chat/completions"
    assert (answer["status"], answer["steps"], answer["backend"]) == (0, ["pick"], "openai"), answer
    assert not answer["torch"] and not answer["transformers"], answer
