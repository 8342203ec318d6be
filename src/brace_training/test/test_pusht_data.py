"""PushT decision points (labels are the oracle's part, mistakes are executed) and twin-finetune --task pusht on a
tiny model."""

from __future__ import annotations

from brace_common.vocabulary import Block
from brace_training import twin_finetune_cli
from brace_training.pusht_data import decision_points
from erecap_planner.testing import saved_tiny_llama
from robot_bridge.pusht.pusht_world import BLOCK, GOAL, SKILLS_TEXT
from robot_bridge.pusht.t_block import PARTS


def test_labels_are_one_push_by_a_part_and_the_schema_allows_them():
    points = list(decision_points(range(6), detour=0.0))
    schema = twin_finetune_cli.load_schema(twin_finetune_cli.TASKS["pusht"].schema)
    assert points and all(p.agent_id == "arm_0" for p in points)
    for p in points:
        (step,) = p.oracle
        assert step.action == "push" and step.parameters["object"] == BLOCK and step.parameters["target"] == GOAL
        assert step.parameters["part"] in PARTS
        assert schema.check_step(step.action, step.parameters) == step
        assert any(e.block == Block.CONSTRAINTS and e.text == SKILLS_TEXT for e in p.entries)
    assert {p.oracle[0].parameters["part"] for p in points} == set(PARTS)   # a real choice: both parts are labels
    assert any(e.block == Block.HISTORY for p in points for e in p.entries)  # calls after ended pushes too


def test_detours_push_by_the_other_part_and_keep_the_oracle_labels():
    points = list(decision_points(range(6), detour=1.0, max_calls=3))
    later = [p for p in points if any(e.block == Block.HISTORY for e in p.entries)]
    assert later
    for p in later:
        first = next(e.text for e in p.entries if e.block == Block.HISTORY)
        assert "part=" in first
    assert any(f"part={p.oracle[0].parameters['part']}" not in " ".join(e.text for e in p.entries) for p in later)


def test_finetune_on_pusht_writes_an_adapter_and_reports_part_agreement(tmp_path, capsys):
    model = saved_tiny_llama(tmp_path / "tiny")
    out = tmp_path / "lora.safetensors"
    args = ["--task", "pusht", "--model", model, "--seeds", "2", "--examples", "3", "--eval-seeds", "1",
            "--eval-points", "2", "--budgets", "0", "--init", "", "--output", str(out)]
    assert twin_finetune_cli.main(args) == 0
    captured = capsys.readouterr()
    assert "3 examples from" in captured.err and out.exists()
    assert captured.out.count("part_agreement") == 2
