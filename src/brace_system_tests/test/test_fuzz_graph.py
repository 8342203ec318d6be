"""The graph fuzz harness, short (bench/fuzz_graph.py runs it at full size): hostile input, then a real run."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from brace_system_tests.fuzz import run

WORKSPACE = Path(__file__).resolve().parents[3]


def test_hostile_input_is_counted_and_the_graph_still_closes_the_loop(tmp_path):
    result = run(tmp_path, per_topic=200, goals=40, seed=1, log=lambda *_: None)
    assert not result.crashed and not result.hung, (result.crashed, result.hung)
    for attack in result.attacks:
        assert attack.malformed > 0 or "Decision" in attack.name, attack.row  # the generators do send bad input
        assert attack.fully_counted, attack.row
    goals = result.goals
    assert goals["unanswered"] == 0 and goals["rejected"] > 0 and goals["accepted"] > 0, goals
    assert goals["finished"] == goals["accepted"], goals  # every accepted goal got its result (cancelled or not)
    assert result.episodes == 1 and result.episodes_with_plans == 1
    assert result.calls_over_deadline == 0, result.worst_overrun_ms


@pytest.mark.timeout(900)  # the harness's own limit, not pyproject's 300 s
def test_every_node_refuses_a_bad_value_in_an_overlay_parameter_file(tmp_path):
    """bench/fuzz_graph.py's overlay attack, quick: each node of the sim and twin stacks with one broken parameter."""
    table = tmp_path / "fuzz.csv"
    proc = subprocess.run([sys.executable, str(WORKSPACE / "bench" / "fuzz_graph.py"), "--quick", "--skip", "topics",
                           "scenarios", "--out", str(table)], capture_output=True, text=True, timeout=900, cwd=tmp_path)
    rows = list(csv.DictReader(table.open()))
    assert {r["node"] for r in rows} >= {"embedded_sim", "trigger_monitor", "brace_controller", "erecap_planner",
                                         "audit_recorder", "piper_arm", "openvla_executor", "twin_world"}, rows
    # an agent list whose id is not a ROS name token (an empty list is valid: the monitor learns the world's agents)
    assert any(r["node"] == "trigger_monitor" and r["attack"].startswith("overlay agents=") for r in rows)
    # values of another type than the shipped files' (rcl's merge would keep those) and ids ending in a newline
    attacks = {(r["node"], r["attack"]) for r in rows}
    assert {("piper_arm", "overlay max_joint_step_rad='0.05'"), ("piper_arm", "overlay workspace_max_m='[0.3, 0.3, 0.3]'"),
            ("piper_arm", "overlay agent_id='arm_0\\n'"), ("trigger_monitor", "overlay loop_cell_m='abc'")} <= attacks
    assert [r for r in rows if not r["note"].startswith("refused")] == [], proc.stdout[-6000:]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.timeout(900)  # the harness's own limit, not pyproject's 300 s
def test_every_scenario_attack_holds(tmp_path):
    """bench/fuzz_graph.py's scenario attacks, quick: a protected context flood ends within 250 ms of its
    hard deadline with the planner's context bounded, a dripping /act server fails the step EXECUTOR counted by
    reason and a new plan's commands flow once it answers, a recorder killed mid-episode leaves a bag brace-audit
    reports damaged and recovers for every reader, a killed CAN twin faults the arm without a flap or an accepted
    command until it is back; a respelled plan over a server is planned and recorded, world states with a repeated
    id (40,000 entities) are refused with the failure trigger on time, hostile world info is refused and counted
    (a restart under a latched one included), a run ends with its world's exit or a node's exit 2."""
    table = tmp_path / "fuzz.csv"
    proc = subprocess.run([sys.executable, str(WORKSPACE / "bench" / "fuzz_graph.py"), "--quick", "--skip", "topics",
                           "overlays", "--out", str(table)], capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert table.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = list(csv.DictReader(table.open()))
    assert [r["node"] for r in rows] == ["erecap_planner", "openvla_executor", "audit_recorder", "piper_arm",
                                         "erecap_planner", "trigger_monitor", "erecap_planner", "every node"], rows
    assert [r for r in rows if r["ok"] != "True"] == [], proc.stdout[-3000:]
    assert all(int(r["sent"]) > 0 and r["counted"] == r["expected"] != "0" for r in rows if r["node"] != "audit_recorder")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
