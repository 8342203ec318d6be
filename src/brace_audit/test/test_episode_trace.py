"""`brace-audit trace`: one episode of a bag as a timeline, from a bag written the way the recorder writes it."""

from __future__ import annotations

import math

import pytest
from brace_msgs.msg import (
    AgentActivity,
    Entity,
    Episode,
    ExecutionOutcome,
    Plan,
    PlanStep,
    ReplanCall,
    ReplanDecision,
    TriggerEvent,
    VerifierVerdict,
    WorldState,
)
from rclpy.serialization import serialize_message

from brace_audit.audit import EXIT_INTACT, EXIT_UNREADABLE, main
from brace_audit.audit_recorder_node import message_class
from brace_audit.bag import BagWriter, read_bag
from brace_audit.episode_trace import TRACED, TraceError, episode_trace

S = 1_000_000_000


def write_episodes(path) -> None:
    """Two episodes: the first ends by itself, the second has a failed pick, a verdict and a replan."""
    writer = BagWriter(path)
    for role, type_name in TRACED.items():
        writer.add_topic(f"/brace/{role}", type_name)

    def put(role: str, msg, t_s: float) -> None:
        writer.write(f"/brace/{role}", serialize_message(msg), int(t_s * S))

    def state(episode: int, t_s: float, fruit: str) -> None:
        put("world_state", WorldState(world="pickfruit", episode=episode, entities=[Entity(id="apple", state=fruit)],
                                      agents=[AgentActivity(agent_id="arm_0", action="pick", activity=1,
                                                                    tracking_error=math.nan if t_s < 9 else 0.031)]),
            t_s)

    put("episode", Episode(event=0, episode=0, world="pickfruit", seed=7), 1.0)
    state(0, 1.5, "on_table")
    put("outcomes", ExecutionOutcome(agent_id="arm_0", action="pick", success=True), 2.0)
    put("episode", Episode(event=1, episode=0, success=True, steps=10, plans=1), 3.0)
    put("episode", Episode(event=0, episode=1, world="pickfruit", seed=8, variant="brace_erecap"), 4.0)
    for t_s, fruit in ((4.1, "on_table"), (4.2, "held"), (9.5, "on_table")):
        state(1, t_s, fruit)
    trigger = TriggerEvent(agent_id="arm_0", kind=TriggerEvent.KIND_FAILURE, severity=0.5, detail="closed on nothing")
    put("outcomes", ExecutionOutcome(agent_id="arm_0", action="pick", success=False, failure=1,
                                     detail="closed on nothing"), 5.0)
    put("triggers", trigger, 5.01)
    put("decisions", ReplanDecision(trigger=trigger, admitted=True, reason="gate_open", mode=1, token_budget=384,
                                    slo_ms=4500.0), 5.02)
    put("verdicts", VerifierVerdict(agent_id="arm_0", action="pick(object=apple)", violation=True, confidence=0.9,
                                    backend="geometric", detail="the apple is still on the table"), 5.3)
    put("replan_calls", ReplanCall(agent_id="arm_0", status=0, latency_ms=812.0, slo_met=True, tokens_before=329,
                                   tokens_after=300), 5.9)
    put("plan", Plan(plan_id="p2", agent_id="arm_0", trigger_kind=TriggerEvent.KIND_FAILURE,
                     steps=[PlanStep(action="pick", parameters_json='{"object": "apple"}')]), 5.95)
    put("outcomes", ExecutionOutcome(agent_id="arm_1", action="pick", success=True), 6.0)
    writer.close()


def test_the_trace_is_the_episode_in_time_order_and_nothing_of_another_episode(tmp_path):
    write_episodes(tmp_path / "bag")
    lines = episode_trace(read_bag(tmp_path / "bag"), 1, message_class, state_every_s=1.0)
    assert [line.what for line in lines] == ["episode", "world_state", "outcomes", "triggers", "decisions",
                                             "verdicts", "replan_calls", "plan", "outcomes", "world_state"]
    assert lines[0].text == "1 starts (pickfruit, seed 8, brace_erecap)" and lines[0].t_s == 0.0
    assert [round(line.t_s, 2) for line in lines][1:4] == [0.1, 1.0, 1.01]
    assert lines[1].text == "apple=on_table | arm_0 executing pick"       # 4.2 s is within a second of 4.1 s
    assert lines[2].text == "pick failed (grasp): closed on nothing"
    assert lines[3].text == "failure severity 0.50: closed on nothing"
    assert lines[4].text == "failure admitted (gate_open): partial_replan, B_t 384, SLO_t 4500 ms"
    assert lines[5].text.startswith("pick(object=apple) contradicts the step (geometric, confidence 0.90)")
    assert lines[6].text == "ok 812 ms (SLO met), tokens 329 -> 300"
    assert lines[7].text == "p2 for failure: pick(object=apple)"
    assert lines[9].text == "apple=on_table | arm_0 executing pick tracking 0.031 m" and lines[9].t_s == pytest.approx(5.5)
    assert "arm_0" in str(lines[2]) and "5.00 s" not in str(lines[2])     # seconds since the episode's start


def test_one_agent_and_no_states_and_every_state(tmp_path):
    write_episodes(tmp_path / "bag")
    contents = read_bag(tmp_path / "bag")
    arm_1 = episode_trace(contents, 1, message_class, state_every_s=-1.0, agent="arm_1")
    assert [(line.what, line.agent) for line in arm_1] == [("episode", ""), ("outcomes", "arm_1")]
    every = episode_trace(contents, 1, message_class, state_every_s=0.0)
    assert sum(line.what == "world_state" for line in every) == 3
    first = episode_trace(contents, 0, message_class)
    assert first[-1].what == "episode" and first[-1].text == "0 ends: success, 10 steps, 1 plans"
    with pytest.raises(TraceError, match="episode 5"):
        episode_trace(contents, 5, message_class)


def test_the_command_prints_the_trace_and_names_what_it_cannot_trace(tmp_path, capsys):
    write_episodes(tmp_path / "run" / "brace_erecap" / "bag")
    write_episodes(tmp_path / "run" / "no_brace" / "bag")
    assert main(["trace", str(tmp_path / "run"), "--episode", "1", "--variant", "brace_erecap"]) == EXIT_INTACT
    out = capsys.readouterr().out
    assert "p2 for failure: pick(object=apple)" in out and out.count("\n") == 10
    assert main(["trace", str(tmp_path / "run"), "--episode", "1"]) == EXIT_UNREADABLE
    assert "variants: brace_erecap, no_brace" in capsys.readouterr().err
    assert main(["trace", str(tmp_path / "run" / "no_brace" / "bag"), "--episode", "3"]) == EXIT_UNREADABLE
    assert "no start of episode 3" in capsys.readouterr().err
