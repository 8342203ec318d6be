"""A server-backed planner starts, configures and plans in a fresh interpreter without importing torch or
transformers (other tests' imports cannot hide one there)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from erecap_planner.openai_fault_server import FaultServer
from erecap_planner.testing import saved_tiny_llama

PLANNER = textwrap.dedent("""
    import json, sys
    import rclpy
    from rclpy.executors import MultiThreadedExecutor
    from rclpy.parameter import Parameter
    from brace_common.testing import wait_for
    from erecap_planner.call_path import CallRequest
    from erecap_planner.context import ContextBuffer, Entry
    from brace_common.vocabulary import Block
    from erecap_planner.planner_node import ErecapPlannerNode

    url, model = sys.argv[1], sys.argv[2]
    rclpy.init()
    params = {"backend": "openai", "server_url": url, "compressor": "recency", "model_path": model}
    node = ErecapPlannerNode(namespace="/torch_free",
                             parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
    node.trigger_configure()
    assert node.call_path is not None, node.last_error
    buffer = ContextBuffer()
    buffer.add(Entry("a", 0, Block.TASK, "fetch cup_3"))
    out = node.call_path.run(buffer, CallRequest("a", 400, 5000.0, 10000.0))
    print(json.dumps({"status": int(out.status), "steps": [s.action for s in out.steps], "error": out.error,
                      "torch": "torch" in sys.modules, "transformers": "transformers" in sys.modules}))
    node.destroy_node()
    rclpy.shutdown()
""")


def test_an_openai_backed_planner_plans_without_torch_or_transformers(tmp_path):
    model = saved_tiny_llama(tmp_path / "tiny")  # its tokenizer folder; the weights stay unread
    with FaultServer() as server:
        run = subprocess.run([sys.executable, "-c", PLANNER, server.base_url, model], capture_output=True, text=True,
                             timeout=120)
        assert run.returncode == 0, run.stderr[-3000:]
        answer = json.loads(run.stdout.strip().splitlines()[-1])
        assert server.requests and server.requests[0]["path"] == "/v1/chat/completions"
    assert answer["status"] == 0 and answer["steps"] == ["pick"], answer
    assert not answer["torch"] and not answer["transformers"], answer
