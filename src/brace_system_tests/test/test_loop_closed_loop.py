"""GiG's loop trigger in a closed loop on a tiny world: the embedded warehouse (one agent), the trigger monitor with
loop detection, the BRACE controller and the E-RECAP planner node on a scripted OpenAI-protocol server (the LLM's
edge: its first plan sends the agent to a shelf and back to its park, its next plans keep it waiting).

The agent's revisit of its park raises a LOOP trigger from the world's WorldState; the controller admits it like a
failure (partial_replan); the planner's session graph, fed by the same states, puts the loop warning into that call's
prompt, beside the projections of its candidate steps through the world's lookahead service.
"""

from __future__ import annotations

import json

from brace_msgs.msg import ReplanDecision, TriggerEvent
from rclpy.node import Node
from rclpy.parameter import Parameter

from brace_common import qos
from brace_common.names import DEFAULT_NAMESPACE as NS
from brace_common.testing import wait_for
from brace_controller.controller_node import BraceControllerNode
from brace_controller.trigger_monitor_node import TriggerMonitorNode
from erecap_planner.openai_fault_server import FaultServer
from erecap_planner.planner_node import ErecapPlannerNode
from erecap_planner.testing import saved_tiny_llama
from sim_bridges.warehouse.embedded_sim_node import EmbeddedSimNode

LOOPING_PLAN = {"plan": [{"action": "move_to", "parameters": {"target": "shelf_3"}},
                         {"action": "move_to", "parameters": {"target": "park_0"}}]}
WAITING_PLAN = {"plan": [{"action": "wait", "parameters": {"steps": 1}}]}


class Watcher(Node):
    """Collects the triggers and decisions of the stack."""

    def __init__(self) -> None:
        super().__init__("watcher", namespace=NS)
        self.triggers: list[TriggerEvent] = []
        self.decisions: list[ReplanDecision] = []
        self.create_subscription(TriggerEvent, "triggers", self.triggers.append, qos.EVENTS)
        self.create_subscription(ReplanDecision, "decisions", self.decisions.append, qos.EVENTS)


def node(cls, **params):
    return cls(namespace=NS, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])


def test_a_loop_in_the_world_raises_a_loop_trigger_the_controller_admits_and_the_prompt_warns(ros, tmp_path):
    model = saved_tiny_llama(tmp_path / "tiny_llama")
    with FaultServer(text=json.dumps(LOOPING_PLAN)) as server:
        server.script.clear()
        planner = node(ErecapPlannerNode, model_path=model, backend="openai", server_url=server.base_url,
                       compressor="recency", endpoint="completions", structured_output="json_schema",
                       memory_modules=["state_graph", "lookahead"], memory_share=0.5, action_schema_file="",
                       lookahead_timeout_s=5.0)   # a busy machine answers the world's service late, not never
        planner.trigger_configure()
        assert planner.call_path is not None, planner.last_error
        planner.trigger_activate()
        watcher = ros.add(Watcher())
        ros.add(planner)
        ros.add(node(TriggerMonitorNode, step_source="agent_state", periodic_interval_steps=0, loop_detection=True,
                     loop_repeat_steps=50, hazard_distance_m=0.0, deadlock_window=0))
        ros.add(node(BraceControllerNode, cooldown_steps=1, commit_steps=0))
        # Steps of 0.2 s: the world holds from the controller's decision on, and steps it takes before then (a busy
        # machine delivers the decision late) leave the planner's newest state behind the live one; the lookahead
        # service answers about the last lookahead_states (3) states only (at 20 ms steps, once seen beside make
        # test: no lookahead line in the prompt).
        ros.add(node(EmbeddedSimNode, episodes=1, num_agents=1, max_steps=40, step_period_s=0.2, grasp_failure=0.0,
                     drift=0.0, markers=False, wait_for_nodes=["trigger_monitor", "brace_controller",
                                                                "erecap_planner"], replan_action="replan"))
        wait_for(lambda: any(t.kind == TriggerEvent.KIND_LOOP for t in watcher.triggers), timeout=120,
                 what="a loop trigger")
        server.text = json.dumps(WAITING_PLAN)  # the way out: the agent stays put
        loop = next(t for t in watcher.triggers if t.kind == TriggerEvent.KIND_LOOP)
        assert loop.agent_id == "agent_0" and "again after" in loop.detail
        wait_for(lambda: any(d.trigger.trigger_id == loop.trigger_id for d in watcher.decisions), timeout=60,
                 what="the controller's decision on the loop")
        decision = next(d for d in watcher.decisions if d.trigger.trigger_id == loop.trigger_id)
        # no call in flight (the world holds while one is), the cooldown long past: admitted like a failure
        assert decision.admitted and decision.mode == ReplanDecision.MODE_PARTIAL_REPLAN, decision
        wait_for(lambda: any("loop warning: agent_0" in r["body"].get("prompt", "") for r in server.requests),
                 timeout=60, what="the loop warning in the admitted call's prompt")
        # the world's transition model projected candidate steps for the call (which ones fit beside the warning
        # depends on the agent's activity when the state arrived and on the query's ranking: any of them will do)
        prompt = next(r["body"]["prompt"] for r in server.requests if "loop warning" in r["body"].get("prompt", ""))
        assert "\nlookahead: " in prompt and planner.lookahead.counts["answered"] >= 1, (
            planner.lookahead.health().values, prompt)
