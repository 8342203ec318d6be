"""ReCAP's recursion over DDS: a two-level task planned by π / ρ calls that the BRACE controller gates and budgets.

The real nodes: the trigger monitor (recap_refine), the BRACE controller and the E-RECAP planner (recap_recursion, on
a scripted OpenAI-protocol server: the LLM's edge). The test node plays the world at the topic level: it states the
agent's task, executes each plan's steps one at a time (an AgentState, then the step's outcome), and goes on with a
plan's next step when the controller suppresses the refine trigger of the last one.

Task: deliver the cup to dock_1, then wait. π at the root answers [deliver(cup, dock_1)], wait; the composite opens a
child frame and the controller asks π for it (a SUBTASK trigger, depth 1); its pick and move_to run.
- With the cooldown off every step's REFINE is admitted: ρ refines the child twice, its empty S closes it, and the
  controller's follow-up REFINE asks ρ at the root, whose [wait] runs; a last ρ closes the root.
- With a long cooldown the refinements are suppressed: the frame's S runs on, and where the agent has nothing left
  the controller admits the REFINE as a reuse (no model call): two model calls in all. (Whether a refine finds the
  agent with steps left depends on which of its AgentState and outcome the monitor reads first; either way the
  frame's S runs and no model call is made.)
"""

from __future__ import annotations

import json
import threading

import pytest
import yaml
from brace_msgs.msg import AgentState, ContextEntry, ExecutionOutcome, Plan, ReplanCall, ReplanDecision, TriggerEvent
from rclpy.node import Node
from rclpy.parameter import Parameter

from brace_common import names, qos
from brace_common.names import DEFAULT_NAMESPACE as NS
from brace_common.testing import wait_for
from brace_controller.config import default_profiles_path, load_profiles
from brace_controller.controller_node import BraceControllerNode
from brace_controller.trigger_monitor_node import TriggerMonitorNode
from erecap_planner.openai_fault_server import FaultServer
from erecap_planner.planner_node import ErecapPlannerNode
from erecap_planner.testing import saved_tiny_llama

SCHEMA = {"max_steps": 4,
          "actions": {"pick": {"object": {"choices": ["cup"]}}, "move_to": {"target": {"choices": ["dock_1"]}},
                      "wait": {}},
          "subtasks": {"deliver": {"object": {"choices": ["cup"]}, "dock": {"choices": ["dock_1"]}}}}
DELIVER = {"subtask": "deliver", "parameters": {"object": "cup", "dock": "dock_1"}}
PICK = {"action": "pick", "parameters": {"object": "cup"}}
MOVE = {"action": "move_to", "parameters": {"target": "dock_1"}}
WAIT = {"action": "wait", "parameters": {}}


class World(Node):
    """The agent's world at the topic level: its task, each plan's steps run one by one, their outcomes."""

    def __init__(self) -> None:
        super().__init__("recap_world", namespace=NS)
        self.lock = threading.Lock()
        self.steps: list[str] = []
        self.step = 0
        self.executed: list[str] = []
        self.plans: list[Plan] = []
        self.decisions: list[ReplanDecision] = []
        self.calls: list[ReplanCall] = []
        self.context_pub = self.create_publisher(ContextEntry, names.CONTEXT, qos.EVENTS)
        self.state_pub = self.create_publisher(AgentState, names.AGENT_STATES, qos.STATE)
        self.outcome_pub = self.create_publisher(ExecutionOutcome, names.OUTCOMES, qos.EVENTS)
        self.trigger_pub = self.create_publisher(TriggerEvent, names.TRIGGERS, qos.EVENTS)
        self.create_subscription(Plan, names.PLAN, self.on_plan, qos.PLANS)
        self.create_subscription(ReplanDecision, names.DECISIONS, self.on_decision, qos.EVENTS)
        self.create_subscription(ReplanCall, names.REPLAN_CALLS, self.calls.append, qos.EVENTS)

    def on_plan(self, msg: Plan) -> None:
        with self.lock:
            self.plans.append(msg)
            self.steps = [s.action for s in msg.steps]
        self.run_next()

    def on_decision(self, msg: ReplanDecision) -> None:
        self.decisions.append(msg)
        if msg.trigger.kind == TriggerEvent.KIND_REFINE and not msg.admitted:
            self.run_next()   # no ρ now: the plan's next step runs

    def run_next(self) -> None:
        with self.lock:
            if not self.steps:
                return
            action = self.steps.pop(0)
            self.step += 1
            self.executed.append(action)
            step, more = self.step, bool(self.steps)
        self.state_pub.publish(AgentState(agent_id="a", step=step, has_goal=more))
        self.outcome_pub.publish(ExecutionOutcome(agent_id="a", step=step, action=action, success=True,
                                                  detail=f"{action} done"))


def node(cls, **params):
    return cls(namespace=NS, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])


@pytest.mark.parametrize("cooldown, answers, executed, kinds", [
    (0, [{"think": "deliver, then wait", "subtasks": [DELIVER, WAIT]},
         {"think": "fetch it", "subtasks": [PICK, MOVE]},
         {"think": "carry it", "subtasks": [MOVE]},
         {"think": "delivered", "subtasks": []},
         {"think": "now wait", "subtasks": [WAIT]},
         {"think": "done", "subtasks": []}],
     ["pick", "move_to", "wait"],
     [(1, 0), (1, 1), (2, 1), (2, 1), (2, 0), (2, 0)]),
    (1000, [{"think": "deliver, then wait", "subtasks": [DELIVER, WAIT]},
            {"think": "fetch it", "subtasks": [PICK, MOVE]}],
     ["pick", "move_to", "wait"],
     [(1, 0), (1, 1)]),
])
def test_a_two_level_task_runs_through_gated_pi_and_rho_calls(ros, tmp_path, cooldown, answers, executed, kinds):
    schema = tmp_path / "schema.yaml"
    schema.write_text(yaml.safe_dump(SCHEMA, sort_keys=False))
    with FaultServer() as server:
        server.answers.extend(json.dumps(a) for a in answers)
        planner = node(ErecapPlannerNode, model_path=saved_tiny_llama(tmp_path / "tiny"), backend="openai",
                       server_url=server.base_url, compressor="none", endpoint="completions",
                       structured_output="json_schema", context_layout="recap", recap_recursion=True,
                       action_schema_file=str(schema))
        planner.trigger_configure()
        assert planner.call_path is not None, planner.last_error
        planner.trigger_activate()
        world = ros.add(World())
        ros.add(planner)
        ros.add(node(TriggerMonitorNode, agents=["a"], step_source="agent_state", periodic_interval_steps=0,
                     plan_done_idle_steps=0, drift_steps=0, hazard_distance_m=0.0, deadlock_window=0,
                     wait_for_episode=False, initial_plan=False, recap_refine=True))
        ros.add(node(BraceControllerNode, cooldown_steps=cooldown, commit_steps=0, adaptive_budget=False,
                     defer_when_infeasible=False, recap_depth_budget_ratio=0.5))
        wait_for(lambda: world.context_pub.get_subscription_count() >= 1 and world.trigger_pub.get_subscription_count()
                 >= 1 and world.outcome_pub.get_subscription_count() >= 2, timeout=60, what="the graph")
        world.context_pub.publish(ContextEntry(agent_id="a", step=0, block=ContextEntry.BLOCK_TASK, kind="task",
                                               text="deliver the cup to dock_1, then wait"))
        wait_for(lambda: planner.intake.counts["context_entries"] == 1, what="the task at the planner")
        world.trigger_pub.publish(TriggerEvent(trigger_id="world/1", agent_id="a", kind=TriggerEvent.KIND_PERIODIC,
                                               severity=1.0, detail="initial plan"))

        wait_for(lambda: world.executed == executed and planner.memory().recap_need("a").need.label == "nothing",
                 timeout=120, what="the task's steps run and its root frame closed")
        wait_for(lambda: len(world.calls) == sum(d.admitted for d in world.decisions), what="every call's record")
        model_calls = [(c.recap_call, c.depth) for c in world.calls if c.recap_call != ReplanCall.RECAP_REUSE]
        assert model_calls == kinds
        assert all(c.status == ReplanCall.STATUS_OK for c in world.calls), [c.error for c in world.calls]
        assert not server.answers and len(server.requests) == len(answers)   # every model call, and only them

        admitted = [d for d in world.decisions if d.admitted]
        subtask = next(d for d in admitted if d.trigger.kind == TriggerEvent.KIND_SUBTASK)
        assert (subtask.reason, subtask.mode, subtask.depth) == ("recursion", ReplanDecision.MODE_FULL_REPLAN, 1)
        first = admitted[0]
        assert subtask.token_budget == round(first.token_budget * 0.5)   # B_t of depth 1
        child_prompt = server.requests[1]["body"]["prompt"]
        assert "think: deliver, then wait" in child_prompt and "subtask 1: [deliver(cup, dock_1)]" in child_prompt
        if cooldown:
            reuses = [d for d in admitted if d.mode == ReplanDecision.MODE_REUSE_SUBPLAN]
            smallest = load_profiles(default_profiles_path())["default"].min_token_budget
            assert len(reuses) >= 3 and all(d.reason == "recursion" and d.token_budget == smallest for d in reuses)
            assert [(c.recap_call, c.tokens_after) for c in world.calls if c.recap_call == ReplanCall.RECAP_REUSE] \
                == [(ReplanCall.RECAP_REUSE, 0)] * len(reuses)
        else:
            assert "done: [deliver(cup, dock_1)] -> done" in server.requests[4]["body"]["prompt"]   # line 9
        assert [s.action for s in world.plans[-1].steps] == ["wait"] and world.plans[-1].depth == 0
