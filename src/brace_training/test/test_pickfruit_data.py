"""PickFruit decision points (labels are the oracle's, mistakes are executed) and pickfruit-finetune on a tiny model."""

from __future__ import annotations

from safetensors.torch import load_file

from brace_common.vocabulary import Block
from brace_training import twin_finetune_cli
from brace_training.pickfruit_data import decision_points
from erecap_planner.testing import saved_tiny_llama
from robot_bridge.pickfruit.pickfruit_world import task_text


def task_fruits(point) -> list[str]:
    return [e.text for e in point.entries if e.block == Block.TASK]


def test_labels_name_the_task_fruit_not_yet_in_the_bowl():
    points = list(decision_points(range(12), detour=0.0))
    assert points and all(p.agent_id == "arm_0" for p in points)
    for p in points:
        fruit = p.oracle[0].parameters["object"]
        assert task_text(fruit) in task_fruits(p)
        assert [s.action for s in p.oracle] == ["pick", "place"]
        assert p.oracle[1].parameters == {"object": fruit, "target": "bowl"}
        assert f"{fruit} in the bowl" not in next(e.text for e in reversed(p.entries) if e.block == Block.STATE)
    # calls come after failed steps too: some contexts hold a failure trace
    assert any(e.kind == "failure_trace" for p in points for e in p.entries)


def test_detours_execute_other_fruits_and_keep_the_oracle_labels():
    points = list(decision_points(range(12), detour=1.0, max_calls=3))
    later = [p for p in points if any(e.block == Block.HISTORY for e in p.entries)]
    assert later
    for p in later:
        fruit = p.oracle[0].parameters["object"]
        executed = " ".join(e.text for e in p.entries if e.block == Block.HISTORY)
        assert executed and f"(object={fruit})" not in executed   # the arm only ever handled other fruits


def test_finetune_writes_an_adapter_and_reports_agreement(tmp_path, capsys):
    model = saved_tiny_llama(tmp_path / "tiny")
    out = tmp_path / "lora.safetensors"
    args = ["--model", model, "--seeds", "2", "--examples", "3", "--eval-seeds", "2", "--eval-points", "2",
            "--budgets", "0", "--init", "", "--output", str(out)]
    assert twin_finetune_cli.main(args) == 0
    captured = capsys.readouterr()
    assert "3 examples from" in captured.err
    assert captured.out.count("plan_agreement") == 2                 # --init ('' = none) and the new adapter
    tensors = load_file(str(out))
    assert any(name.endswith(".lora_b") and t.abs().sum() > 0 for name, t in tensors.items())
