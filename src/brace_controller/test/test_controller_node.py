"""brace_controller node over real DDS: triggers in, decisions out, Replan goals, deadlines."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ament_index_python.packages import get_package_share_directory
from brace_msgs.msg import Episode, Plan, ReplanCall, ReplanDecision, TriggerEvent
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from rclpy.parameter import Parameter

from brace_common import qos
from brace_common.config import ConfigError
from brace_common.names import DEFAULT_NAMESPACE as NS
from brace_common.testing import PlannerDouble, wait_for
from brace_controller.controller_node import BraceControllerNode


class Probe(Node):
    """Publishes triggers; collects decisions, plans and diagnostics."""

    def __init__(self) -> None:
        super().__init__("probe")
        self.triggers = self.create_publisher(TriggerEvent, "/brace/triggers", qos.EVENTS)
        self.decisions: list[ReplanDecision] = []
        self.plans: list[Plan] = []
        self.diagnostics: list[DiagnosticArray] = []
        self.create_subscription(ReplanDecision, "/brace/decisions", self.decisions.append, qos.EVENTS)
        self.create_subscription(Plan, "/brace/plan", self.plans.append, qos.PLANS)
        self.create_subscription(DiagnosticArray, "/diagnostics", self.diagnostics.append, qos.DIAGNOSTICS)

    def send(self, step: int, agent: str = "a", kind: int = TriggerEvent.KIND_PERIODIC, failures: int = 0,
             severity: float = 1.0) -> None:
        self.triggers.publish(TriggerEvent(trigger_id=f"t{step}", agent_id=agent, kind=kind, step=step,
                                           severity=severity, consecutive_failures=failures))

    def diag_value(self, key: str):
        for array in reversed(self.diagnostics):
            for status in array.status:
                if status.name.startswith("brace_controller"):
                    return {kv.key: kv.value for kv in status.values}.get(key)
        return None


def controller(**params) -> BraceControllerNode:
    params.setdefault("adaptive_budget", False)
    params.setdefault("defer_when_infeasible", False)
    params.setdefault("diagnostics_period_s", 0.1)
    return BraceControllerNode(namespace=NS, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])


def connect(ros, node: BraceControllerNode, planner: PlannerDouble | None = None) -> Probe:
    probe = ros.add(Probe())
    ros.add(node)
    if planner is not None:
        ros.add(planner)
        wait_for(node.replan_client.server_is_ready, what="Replan server")
    wait_for(lambda: probe.triggers.get_subscription_count() > 0, what="controller subscription")
    wait_for(lambda: node.decisions_pub.get_subscription_count() > 0, what="probe subscription")
    return probe


def warm(node: BraceControllerNode) -> None:
    """A ready latency model: calls cost 20 ms + 2 ms per planner-input token; this episode's calls read 2,000
    tokens."""
    import random

    from brace_common.replanning import CallRecord
    from brace_common.vocabulary import CallStatus
    from brace_controller.latency_model import CallSample

    rng = random.Random(0)
    with node.transition_lock:
        for _ in range(node.config.adaptive_window):
            tokens, kept = rng.randint(500, 3000), rng.randint(64, 500)
            cost = 20.0 + 2.0 * kept
            node.core.observe_latency(CallSample(tokens, kept, 0, 0.0, cost, 0.0, cost))
        node.core.record_call(CallRecord("z", 0, CallStatus.OK, False, 10.0, 100, tokens_before=2000))


def settle(node: BraceControllerNode) -> None:
    wait_for(lambda: not node.pending and not any(c.call_in_flight for c in node.core.agents.values()),
             what="in-flight calls to finish")


def test_cooldown_suppresses_then_admits_after_delta(ros):
    node = controller(cooldown_steps=3, commit_steps=0)
    planner = PlannerDouble()
    probe = connect(ros, node, planner)

    probe.send(10, kind=TriggerEvent.KIND_HAZARD)
    wait_for(lambda: len(planner.goals) == 1, what="first goal")
    settle(node)
    probe.send(11)
    probe.send(13)
    wait_for(lambda: len(probe.decisions) == 3, what="three decisions")

    first, second, third = probe.decisions
    assert first.admitted and first.reason == ReplanDecision.REASON_GATE_OPEN
    assert first.trigger.trigger_id == "t10"
    assert not second.admitted and second.reason == ReplanDecision.REASON_COOLDOWN
    assert second.mode == ReplanDecision.MODE_DEFER_REPLAN and second.steps_since_call == 1
    assert third.admitted and third.steps_since_call == 3

    # Default profile: hazard -> full_replan 1024 tokens x 0.5, SLO 2500 ms x 0.5, deadline x 2.
    goal = planner.goals[0]
    assert (goal.agent_id, goal.step, goal.mode) == ("a", 10, ReplanDecision.MODE_FULL_REPLAN)
    assert goal.trigger_kind == TriggerEvent.KIND_HAZARD
    assert (goal.token_budget, goal.slo_ms, goal.hard_deadline_ms) == (512, 1250.0, 2500.0)
    assert goal.decision_id == first.decision_id
    wait_for(lambda: len(planner.goals) == 2, what="second goal")
    wait_for(lambda: len(probe.plans) >= 1, what="plan on /brace/plan")
    assert probe.plans[0].agent_id == "a" and probe.plans[0].steps[0].action == "move_to"


def test_override_after_k_failures_bypasses_cooldown(ros):
    node = controller(cooldown_steps=100, commit_steps=100, override_after_failures=3)
    planner = PlannerDouble()
    probe = connect(ros, node, planner)

    probe.send(1, kind=TriggerEvent.KIND_FAILURE, failures=2)
    wait_for(lambda: len(planner.goals) == 1, what="first goal")
    settle(node)
    probe.send(2, kind=TriggerEvent.KIND_FAILURE, failures=2)
    probe.send(3, kind=TriggerEvent.KIND_FAILURE, failures=3)
    wait_for(lambda: len(probe.decisions) == 3 and len(planner.goals) == 2, what="override goal")

    blocked, override = probe.decisions[1], probe.decisions[2]
    assert not blocked.admitted and blocked.reason == ReplanDecision.REASON_COOLDOWN
    assert override.admitted and override.override and override.reason == ReplanDecision.REASON_OVERRIDE
    assert override.mode == ReplanDecision.MODE_FULL_REPLAN
    assert planner.goals[1].token_budget == 1536 > planner.goals[0].token_budget  # 1024 x 1.5, bounded


def test_call_past_hard_deadline_is_cancelled(ros, tmp_path):
    profiles = tmp_path / "fast.yaml"
    profiles.write_text(
        "profiles:\n  fast:\n    min_token_budget: 16\n    max_token_budget: 512\n    hard_deadline_factor: 2.0\n"
        "    modes:\n" + "".join(f"      {m}: {{token_budget: 64, slo_ms: 100.0}}\n"
                                for m in ("full_replan", "partial_replan", "reuse_subplan"))
    )
    node = controller(cooldown_steps=1, commit_steps=0, budget_profile="fast", budget_profiles_file=str(profiles))
    planner = PlannerDouble(hold=True)
    probe = connect(ros, node, planner)

    probe.send(1)
    wait_for(lambda: len(planner.goals) == 1, what="goal")
    assert planner.goals[0].hard_deadline_ms == 200.0
    wait_for(lambda: len(planner.cancelled) == 1, what="planner to see the cancel")
    wait_for(lambda: node.counts["deadline_cancellations"] == 1 and not node.core.agents["a"].call_in_flight,
             what="deadline recorded")
    probe.send(2)
    wait_for(lambda: len(probe.decisions) == 2, what="decision after the deadline")
    assert probe.decisions[1].admitted  # not blocked by a hung call
    wait_for(lambda: probe.diag_value("deadline_cancellations") not in (None, "0"), what="diagnostics")


def test_a_new_episode_cancels_the_calls_in_flight_and_the_commit_window_follows_its_steps(ros):
    node = controller(cooldown_steps=0, commit_steps=5)
    planner = PlannerDouble(hold=True)
    probe = connect(ros, node, planner)
    episodes = probe.create_publisher(Episode, "/brace/episode", qos.EVENTS)
    wait_for(lambda: episodes.get_subscription_count() > 0, what="the controller's episode subscription")
    probe.send(300)                                          # late in an episode: its call is still running ...
    wait_for(lambda: len(planner.goals) == 1, what="the held goal")
    episodes.publish(Episode(event=Episode.EVENT_START, episode=1))   # ... when the next episode starts
    wait_for(lambda: planner.cancelled == [planner.goals[0].decision_id], what="the planner to see the cancel")
    assert node.counts["calls_cancelled_by_episode"] == 1 and not node.pending and not probe.plans
    planner.hold = False
    probe.send(10)                                           # the new episode's steps start again at 0
    wait_for(lambda: len(probe.plans) == 1, what="the new episode's plan")
    settle(node)
    probe.send(16)                                           # 6 steps after the change: past omega = 5
    wait_for(lambda: len(probe.decisions) == 3, what="the decision after the commit window")
    assert probe.decisions[2].admitted, probe.decisions[2].reason


def test_plans_naming_unknown_entities_raise_the_quality_floor(ros):
    node = controller(cooldown_steps=0, commit_steps=0, quality_floor_window=2, quality_floor_step=64)
    planner = PlannerDouble(error="hallucinated_value: step 0: 'dock_9' is not one of dock_1, dock_2", tokens_after=20)
    probe = connect(ros, node, planner)
    start = node.core.quality.floor
    for step in (1, 2):
        probe.send(step)
        wait_for(lambda step=step: len(planner.goals) == step, what=f"call {step}")
        settle(node)
    assert node.core.quality.floor == start + 64 and node.core.quality.raised == 1
    wait_for(lambda: probe.diag_value("quality_floor_tokens") == str(start + 64), what="the floor in diagnostics")
    assert probe.diag_value("quality_floor_raised") == "1"


def test_a_goal_the_planner_aborts_is_recorded_with_its_error(ros):
    node = controller(cooldown_steps=0, commit_steps=0)
    planner = PlannerDouble(raises=True)
    probe = connect(ros, node, planner)
    calls: list[ReplanCall] = []
    probe.create_subscription(ReplanCall, "/brace/replan_calls", calls.append, qos.EVENTS)
    wait_for(lambda: node.calls_pub.get_subscription_count() >= 2, what="the probe's replan_calls subscription")
    probe.send(1)
    wait_for(lambda: calls, what="the controller's record of the aborted call")
    assert calls[0].status == ReplanCall.STATUS_PLANNER_ERROR, calls[0].status
    assert calls[0].error.startswith("aborted_by_planner:") and calls[0].decision_id == probe.decisions[0].decision_id
    assert node.counts["calls_aborted_by_planner"] == 1 and not probe.plans
    settle(node)
    wait_for(lambda: probe.diag_value("calls_aborted_by_planner") == "1", what="the count on /diagnostics")


def test_malformed_triggers_are_counted_not_fatal(ros):
    node = controller()
    probe = connect(ros, node)
    probe.send(1, severity=math.nan)
    probe.send(2, kind=42)
    probe.send(3, agent="")
    probe.send(4)
    wait_for(lambda: len(probe.decisions) == 1, what="decision for the valid trigger")
    assert probe.decisions[0].trigger.step == 4
    assert node.counts["malformed_triggers"] == 3
    # No planner is running: the admitted call waits for one until its hard deadline (5 s), then is recorded as
    # unavailable, not left in flight.
    assert node.counts["calls_waited_for_planner"] == 1
    wait_for(lambda: node.counts["planner_unavailable"] == 1 and not node.core.agents["a"].call_in_flight,
             what="call recorded as unavailable")
    wait_for(lambda: probe.diag_value("malformed_triggers") == "3", what="diagnostics count")


def test_a_call_admitted_before_the_planner_is_up_is_sent_when_it_comes(ros):
    node = controller()
    probe = connect(ros, node)
    probe.send(1)
    wait_for(lambda: len(probe.decisions) == 1 and node.counts["calls_waited_for_planner"] == 1,
             what="admitted call waiting for a server")
    assert probe.decisions[0].admitted and not node.replan_client.server_is_ready()
    planner = ros.add(PlannerDouble())  # the planner comes up after the decision (launch starts in no order)
    wait_for(lambda: len(planner.goals) == 1, what="the waiting call sent to the new server")
    wait_for(lambda: len(probe.plans) == 1, what="its plan")
    assert node.counts["planner_unavailable"] == 0


@pytest.mark.parametrize("params,parameter", [
    ({"cooldown_steps": -1}, "cooldown_steps"),
    ({"budget_profile": "nope"}, "budget_profile"),
    ({"adaptive_guard_ratio": 1.5}, "adaptive_guard_ratio"),
    ({"replan_action": ""}, "replan_action"),
])
def test_bad_parameters_stop_the_node_naming_them(ros, params, parameter):
    with pytest.raises(ConfigError) as err:
        controller(**params)
    assert err.value.parameter == parameter


def test_bad_profile_slo_is_rejected(ros, tmp_path):
    profiles = tmp_path / "bad.yaml"
    profiles.write_text("profiles:\n  p:\n    modes:\n" + "".join(
        f"      {m}: {{token_budget: 64, slo_ms: 0.0}}\n" for m in ("full_replan", "partial_replan", "reuse_subplan")))
    with pytest.raises(ConfigError, match="slo_ms must be > 0"):
        controller(budget_profile="p", budget_profiles_file=str(profiles))


def test_executable_exits_with_message_on_bad_parameter():
    proc = subprocess.run(
        [sys.executable, "-m", "brace_controller.controller_node", "--ros-args", "-p", "cooldown_steps:=-2"],
        capture_output=True, text=True, timeout=60, env=os.environ.copy(),
    )
    assert proc.returncode == 2
    assert "cooldown_steps" in proc.stderr + proc.stdout


def test_workspace_parameter_file_configures_the_node(ros):
    params = Path(get_package_share_directory("brace_bringup")) / "params" / "brace_controller.yaml"
    node = ros.add(BraceControllerNode(namespace=NS, cli_args=["--ros-args", "--params-file", str(params)]))
    assert node.config.cooldown_steps == 3 and node.config.budget_profile == "default"
    assert node.node_config.replan_action == "replan"  # relative: the server in the node's namespace
    assert node.get_parameter("cooldown_steps").value == 3


def test_a_call_closed_by_its_result_while_the_watchdog_scans_is_skipped(ros):
    # Action futures run their callbacks outside the node's callback group: a result may close a call between the
    # watchdog's snapshot of the pending calls and its pop (seen as a KeyError that stopped a K = 8 run).
    from brace_common.replanning import Trigger
    from brace_common.vocabulary import TriggerKind
    from brace_controller.pending_calls import PendingCall

    node = ros.add(controller())
    decision = node.core.decide(Trigger(TriggerKind.PERIODIC, "a", 0))

    class ClosedDuringScan(dict):
        def items(self):
            snapshot = list(super().items())
            self.clear()  # the result arrives right after the snapshot
            return snapshot

    node.pending.calls = ClosedDuringScan({decision.decision_id: PendingCall(decision, deadline=0.0)})
    node.check_deadlines()
    assert node.counts["deadline_cancellations"] == 0


def test_a_trigger_held_for_the_backlog_is_decided_again_when_a_call_finishes(ros):
    node = controller(defer_when_infeasible=True)
    planner = PlannerDouble(hold=True)  # a's call runs until the controller cancels it at its hard deadline
    probe = connect(ros, node, planner)
    warm(node)
    probe.send(1)  # a: admitted (B 512, ~1 s), the planner is free
    wait_for(lambda: len(planner.goals) == 1, what="a's call")
    probe.send(1, agent="b")  # b has no plan: behind a's call it would miss its SLO, so it is held
    wait_for(lambda: len(probe.decisions) == 2, what="b's first decision")
    held = probe.decisions[1]
    assert not held.admitted and held.reason == ReplanDecision.REASON_SLO_INFEASIBLE
    wait_for(lambda: len(probe.decisions) == 3, timeout=20.0, what="b decided again when a's call ended")
    again = probe.decisions[2]
    assert again.admitted and again.trigger.agent_id == "b" and again.trigger.trigger_id == held.trigger.trigger_id
    wait_for(lambda: len(planner.goals) == 2 and planner.goals[1].agent_id == "b", what="b's call")
    assert node.counts["held_decided_again"] == 1


def test_a_shared_servers_other_requests_hold_a_trigger_until_they_fall(ros):
    from brace_msgs.msg import ServerLoad

    node = controller(defer_when_infeasible=True, server_release_jitter_s=0.0, server_load_stale_after_s=30.0)
    planner = PlannerDouble()
    probe = connect(ros, node, planner)
    load = probe.create_publisher(ServerLoad, "/brace/server_load", qos.STATE)
    warm(node)
    # Another robot's call at the server (ours: none): the controller counts it ahead of its own.
    wait_for(lambda: load.get_subscription_count() > 0, what="controller's server_load subscription")
    busy = ServerLoad(reported=True, engine="llama.cpp", requests_running=2, requests_waiting=1, own_requests=1)
    wait_for(lambda: load.publish(busy) or node.core.server_calls == 2, what="server load seen")
    probe.send(1)  # a has no plan: held while the server's other requests would make it miss its SLO
    wait_for(lambda: len(probe.decisions) == 1, what="a's first decision")
    held = probe.decisions[0]
    assert not held.admitted and held.reason == ReplanDecision.REASON_SLO_INFEASIBLE and not planner.goals
    load.publish(ServerLoad(reported=True, engine="llama.cpp", requests_running=0, requests_waiting=0))
    wait_for(lambda: len(probe.decisions) == 2, what="a decided again once the server's load fell")
    assert probe.decisions[1].admitted and probe.decisions[1].trigger.trigger_id == held.trigger.trigger_id
    wait_for(lambda: len(planner.goals) == 1, what="a's call")
    # A server that reports no load, or none for longer than server_load_stale_after_s, counts as none.
    wait_for(lambda: load.publish(busy) or node.core.server_calls == 2, what="busy again")
    load.publish(ServerLoad(reported=False))
    wait_for(lambda: node.core.server_calls == 0, what="an unreported load counts as none")
    node.node_config.server_load_stale_after_s = 0.05
    wait_for(lambda: load.publish(busy) or node.core.server_calls == 2, what="busy again")
    wait_for(lambda: node.counts["server_load_stale"] >= 1 and node.core.server_calls == 0, what="a stale load dropped")
    wait_for(lambda: probe.diag_value("server_calls") == "0", what="server_calls on /diagnostics")


def test_a_misspelt_parameter_stops_the_node_naming_it(ros, tmp_path):
    params = tmp_path / "typo.yaml"
    params.write_text("/**/brace_controller:\n  ros__parameters:\n    cooldown_stpes: 5\n")
    with pytest.raises(ConfigError) as err:
        BraceControllerNode(namespace=NS, cli_args=["--ros-args", "--params-file", str(params)])
    assert err.value.parameter == "cooldown_stpes"


def test_two_controllers_on_one_graph_never_issue_the_same_decision_id(ros):
    from brace_common.replanning import Trigger
    from brace_common.vocabulary import TriggerKind

    first, second = controller(), controller()
    trigger = Trigger(TriggerKind.PERIODIC, "a", 1)
    assert first.core.decide(trigger).decision_id != second.core.decide(trigger).decision_id
    first.destroy_node()
    second.destroy_node()
