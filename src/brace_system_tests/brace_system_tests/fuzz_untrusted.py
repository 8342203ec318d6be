"""The fuzz harness's attacks on what a node takes from its peers as given: a plan's spelling, a world's state and a
world's schema.

- respelled plan: the planner on an OpenAI-protocol server (the scripted one, erecap_planner.openai_fault_server)
  that names "Shelf-3" where the schema says shelf_3: every goal must end SUCCEEDED with the respelled plan and a
  ReplanCall record, the respellings counted and no internal error.
- world-state flood: the trigger monitor gets a state of 40,000 entities with one repeated id and one of 4,000 (under
  the size bound) with one repeated id: both refused and counted by reason, then a failed outcome must still raise
  its failure trigger (it came 39.5 s late when naming the repeats was quadratic).
- hostile world info: the planner with no schema file takes the world's WorldInfo: schemas of the wrong shape,
  nested 100,000 deep, 300 KB long, and 3 x 40 choices (64,000 skill calls) must be refused and counted while it
  plans on with the last good one; a schema exactly at the cap (4,096 skill calls) is taken, its cost measured; the
  planner killed and started again under a latched hostile schema must come up and count it, not die again.
"""

from __future__ import annotations

import json
import math
import os
import signal
import time
from pathlib import Path

from action_msgs.msg import GoalStatus
from brace_msgs.action import Replan
from brace_msgs.msg import Entity, ExecutionOutcome, ReplanCall, TriggerEvent, WorldInfo, WorldState
from rclpy.action import ActionClient

from brace_bringup.run_config import params_dir
from brace_common import names, qos
from brace_common.vocabulary import CallStatus
from erecap_planner.openai_fault_server import FaultServer
from erecap_planner.scoring import MAX_CANDIDATES
from erecap_planner.testing import saved_tiny_llama

from .fuzz import ATTACK_WRITER as WRITER
from .fuzz import diagnostics_sum as _sum
from .fuzz_scenarios import AGENT, START_LIMIT_S, Graph, ScenarioResult, _int, _rss_mb

RESPELLED_PLAN = json.dumps({"plan": [{"action": "move_to", "parameters": {"target": "Shelf-3"}}]})
"""The server's answer: an id spelled another way than the schema's shelf_3."""


def _cpu_s(pid: int) -> float:
    """A process's user + system CPU time (s; 0 when it cannot be read)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _replan_client(graph: Graph) -> ActionClient:
    return ActionClient(graph.node, Replan, names.REPLAN, **qos.REPLAN_ACTION)


def _call(graph: Graph, client: ActionClient, decision_id: str):
    """One Replan goal for AGENT answered: (goal status, result), or None when it was not accepted or answered."""
    goal = Replan.Goal(agent_id=AGENT, step=1, mode=0, token_budget=512, slo_ms=20_000.0, hard_deadline_ms=60_000.0,
                       decision_id=decision_id)
    goal.header.stamp = graph.node.get_clock().now().to_msg()
    sent = client.send_goal_async(goal)
    if not graph.wait(sent.done) or not sent.result().accepted:
        return None
    answer = sent.result().get_result_async()
    if not graph.wait(answer.done, 120.0):
        return None
    return answer.result().status, answer.result().result


def _planner_up(graph: Graph, client: ActionClient) -> bool:
    return graph.wait(lambda: graph.values("erecap_planner").get("state") == "active" and client.server_is_ready(),
                      START_LIMIT_S)


# ------------------------------------------------------------------------------------------ respelled plan


def respelled_plan(folder: Path, domain: int, quick: bool = False) -> ScenarioResult:
    """Replan goals to a planner whose server answers with an id spelled another way."""
    goals = 5 if quick else 50
    result = ScenarioResult(f"respelled plan over a server: {goals} goals answered 'Shelf-3' (schema: shelf_3)",
                            "erecap_planner")
    schema = folder / "schema.yaml"
    folder.mkdir(parents=True, exist_ok=True)
    schema.write_text("max_steps: 2\nactions:\n  move_to:\n    target: {choices: [dock_1, shelf_3]}\n")
    with FaultServer(text=RESPELLED_PLAN) as server, Graph(folder, domain) as graph:
        graph.start("erecap_planner", "erecap_planner", "erecap_planner", [params_dir() / "erecap_planner.yaml"], {
            "model_path": saved_tiny_llama(folder / "tiny_llama"), "backend": "openai", "server_url": server.base_url,
            "compressor": "recency", "decoding": "json", "action_schema_file": str(schema),
            "diagnostics_period_s": 0.5})
        client = _replan_client(graph)
        records: list[ReplanCall] = []
        graph.node.create_subscription(ReplanCall, names.REPLAN_CALLS, records.append, qos.EVENTS)
        if not _planner_up(graph, client):
            result.outcome = f"the planner never came up: {graph.log_tail('erecap_planner')}"
            return result
        answers = []
        for i in range(goals):
            answers.append(_call(graph, client, f"fuzz_untrusted/respelled/{i}"))
            result.sent += 1
        graph.wait(lambda: len(records) >= goals)
        graph.wait(lambda: _int(graph.values("erecap_planner"), "calls") >= goals)
        values = graph.values("erecap_planner")
    planned = [a for a in answers if a is not None and a[0] == GoalStatus.STATUS_SUCCEEDED
               and a[1].call.status == CallStatus.OK
               and [json.loads(s.parameters_json).get("target") for s in a[1].plan.steps] == ["shelf_3"]]
    result.counted, result.expected = _int(values, "respelled_values"), goals
    internal = _int(values, "internal_errors")
    result.ok = len(planned) == goals == len(records) == result.counted and internal == 0
    result.outcome = (f"{len(planned)} of {goals} goals SUCCEEDED with plan move_to(shelf_3); {len(records)} ReplanCall "
                      f"records; respelled_values {result.counted}, status.ok {_int(values, 'status.ok')}, "
                      f"internal_errors {internal}")
    return result


# ------------------------------------------------------------------------------------------ world-state flood


def _entities(count: int, repeated: str) -> list[Entity]:
    return [Entity(id=f"e{i}", type="object") for i in range(count)] + [Entity(id=repeated, type="object")]


def world_state_flood(folder: Path, domain: int, quick: bool = False) -> ScenarioResult:
    """Two world states with a repeated id (40,000 and 4,000 entities), then a failed outcome."""
    large = 40_000
    result = ScenarioResult(f"world states with a repeated id: {large:,} and 4,000 entities, then a failure",
                            "trigger_monitor")
    with Graph(folder, domain) as graph:
        proc = graph.start("brace_controller", "trigger_monitor", "trigger_monitor",
                           [params_dir() / "trigger_monitor.yaml"],
                           {"agents": [AGENT], "loop_detection": True, "failure_threshold": 1, "wait_for_episode": False,
                            "diagnostics_period_s": 0.2})
        states = graph.node.create_publisher(WorldState, names.WORLD_STATE, qos.WORLD_STATE)
        outcomes = graph.node.create_publisher(ExecutionOutcome, names.OUTCOMES, WRITER)
        triggers: list[tuple[float, TriggerEvent]] = []
        graph.node.create_subscription(TriggerEvent, names.TRIGGERS, lambda m: triggers.append((time.monotonic(), m)),
                                       qos.EVENTS)
        if not graph.wait(lambda: states.get_subscription_count() > 0 and outcomes.get_subscription_count() > 0
                          and graph.latest("trigger_monitor") is not None, START_LIMIT_S):
            result.outcome = f"the monitor never came up: {graph.log_tail('trigger_monitor')}"
            return result
        flood = [WorldState(world="fuzz", entities=_entities(count, "e7")) for count in (large, 4000)]
        cpu_before = _cpu_s(proc.pid)
        for state in flood:
            states.publish(state)
            result.sent += 1
        sent_at = time.monotonic()  # the outcome right behind the states: its trigger waits for whatever they cost
        outcomes.publish(ExecutionOutcome(agent_id=AGENT, step=1, action="pick", success=False,
                                          failure=ExecutionOutcome.FAILURE_GRASP, detail="fuzz"))
        triggered = graph.wait(lambda: any(m.kind == TriggerEvent.KIND_FAILURE for _, m in triggers), 120.0)
        refused = graph.wait(lambda: _sum(graph.values("trigger_monitor"), "rejected.world_state.") >= 2)
        delay_ms = (next(t for t, m in triggers if m.kind == TriggerEvent.KIND_FAILURE) - sent_at) * 1000.0 \
            if triggered else math.nan
        values = graph.values("trigger_monitor")
        cpu_s = _cpu_s(proc.pid) - cpu_before
        alive = proc.poll() is None
    reasons = {k.removeprefix("rejected.world_state."): int(v) for k, v in values.items()
               if k.startswith("rejected.world_state.") and int(v)}
    result.counted, result.expected = sum(reasons.values()), result.sent
    result.ok = refused and triggered and alive and result.counted == result.expected
    result.outcome = (f"refused by reason {reasons}; monitor CPU {cpu_s:.2f} s for both states and the outcome; "
                      f"the failure trigger {delay_ms:,.0f} ms after its outcome, which came right behind them")
    return result


# ------------------------------------------------------------------------------------------ hostile world info


def _choices_schema(counts: tuple[int, ...]) -> str:
    """A schema of one action whose parameters have `counts` choices each (their product of skill calls)."""
    return json.dumps({"max_steps": 1, "actions": {"go": {f"p{k}": {"choices": [f"p{k}v{i}" for i in range(n)]}
                                                          for k, n in enumerate(counts)}}})


HOSTILE_SCHEMAS = {
    "entities a number": '{"actions":{"go":{}},"entities":5}',
    "kinds a list": '{"actions":{"go":{}},"kinds":["go"]}',
    "a choice an object": '{"actions":{"go":{"p":{"choices":[{"x":1}]}}}}',
    "nested 100,000 deep": "[" * 100_000,
    "300 KB long": '{"actions": {}}' + " " * 300_000,
    "3 x 40 choices (64,000 skill calls)": _choices_schema((40, 40, 40)),
}
"""What a world might publish that no planner can use (each must be refused and counted)."""


def hostile_world_info(folder: Path, domain: int, quick: bool = False) -> ScenarioResult:
    """Hostile WorldInfo to a planner that takes the world's schema; one at the cap; a restart under a latched one."""
    result = ScenarioResult(f"hostile world info: {len(HOSTILE_SCHEMAS)} unusable schemas, one at the cap of "
                            f"{MAX_CANDIDATES:,} skill calls, a restart under a latched hostile one", "erecap_planner")
    model = saved_tiny_llama(folder / "tiny_llama")
    overrides = {"model_path": model, "pruning_layers": [1, 3], "predictor_path": "", "max_new_tokens": 8,
                 "action_schema_file": "", "decoding": "constrained", "diagnostics_period_s": 0.2}
    shipped = [params_dir() / "erecap_planner.yaml"]
    good = json.dumps({"max_steps": 1, "actions": {"move_to": {"target": {"choices": ["dock_1", "shelf_3"]}}}})
    at_cap = _choices_schema((64, MAX_CANDIDATES // 64))
    with Graph(folder, domain) as graph:
        proc = graph.start("erecap_planner", "erecap_planner", "erecap_planner", shipped, overrides)
        info = graph.node.create_publisher(WorldInfo, names.WORLD_INFO, qos.WORLD_INFO)
        client = _replan_client(graph)
        if not _planner_up(graph, client) or not graph.wait(lambda: info.get_subscription_count() > 0):
            result.outcome = f"the planner never came up: {graph.log_tail('erecap_planner')}"
            return result

        def announce(episode: int, text: str) -> None:
            info.publish(WorldInfo(world="fuzz", episode=episode, agents=[AGENT], action_schema_json=text))

        def seen() -> int:  # schemas taken or refused so far
            values = graph.values("erecap_planner")
            return _int(values, "schema_updates") + _sum(values, "rejected.world_info.")

        announce(0, good)
        graph.wait(lambda: seen() >= 1)
        for episode, text in enumerate(HOSTILE_SCHEMAS.values(), start=1):
            announce(episode, text)
            result.sent += 1
            graph.wait(lambda episode=episode: seen() >= episode + 1)
        cpu_before, rss_before = _cpu_s(proc.pid), _rss_mb(proc.pid)
        announce(len(HOSTILE_SCHEMAS) + 1, at_cap)
        took_cap = graph.wait(lambda: _int(graph.values("erecap_planner"), "schema_updates") >= 2)
        cap_cpu_s, cap_rss = _cpu_s(proc.pid) - cpu_before, _rss_mb(proc.pid)
        answer = _call(graph, client, "fuzz_untrusted/at_cap")
        call_cpu_s = _cpu_s(proc.pid) - cpu_before - cap_cpu_s
        values = graph.values("erecap_planner")
        refused = {k.removeprefix("rejected.world_info."): int(v) for k, v in values.items()
                   if k.startswith("rejected.world_info.") and int(v)}
        # the last word latched: a hostile schema; the planner killed and started again must take it and live
        announce(len(HOSTILE_SCHEMAS) + 2, HOSTILE_SCHEMAS["entities a number"])
        result.sent += 1
        graph.wait(lambda: _sum(graph.values("erecap_planner"), "rejected.world_info.") > sum(refused.values()))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30.0)
        graph.statuses.pop("erecap_planner", None)
        proc = graph.start("erecap_planner", "erecap_planner", "erecap_planner", shipped, overrides)
        restarted = _planner_up(graph, client) and graph.wait(
            lambda: _sum(graph.values("erecap_planner"), "rejected.world_info.") >= 1)
        alive = restarted and proc.poll() is None
        after_restart = _sum(graph.values("erecap_planner"), "rejected.world_info.")
    planned = answer is not None and answer[0] == GoalStatus.STATUS_SUCCEEDED and answer[1].call.status == CallStatus.OK
    result.counted = sum(refused.values()) + after_restart
    result.expected = result.sent
    result.ok = took_cap and planned and alive and result.counted == result.expected
    call = (f"a call with it {answer[1].call.latency_ms:,.0f} ms ({call_cpu_s:.1f} s CPU, "
            f"{CallStatus(answer[1].call.status).label})" if answer is not None else "no answer to a call with it")
    result.outcome = (f"refused by reason {refused}; at the cap: taken {took_cap}, {cap_cpu_s:.2f} s of the "
                      f"planner's CPU, RSS {rss_before:,.0f} -> {cap_rss:,.0f} MB, {call}; killed and started again "
                      f"under the latched hostile schema: {'up, refused it' if alive else 'DID NOT COME UP'}")
    return result


ATTACKS = {
    "respelled_plan": ("erecap_planner", respelled_plan),
    "world_state_flood": ("trigger_monitor", world_state_flood),
    "hostile_world_info": ("erecap_planner", hostile_world_info),
}
"""This module's attacks (fuzz_scenarios.run_scenarios runs them after its own)."""
