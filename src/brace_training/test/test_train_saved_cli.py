"""Examples built on one machine and trained on another: saved files, and train-saved on a tiny model."""

from __future__ import annotations

import gzip

import pytest
from safetensors.torch import load_file
from transformers import AutoConfig

from brace_training import finetune_cli, predictor_cli, train_saved_cli
from brace_training.adapter_training import PlanExample
from brace_training.saved_examples import load_examples, save_examples
from erecap_planner.predictor import PredictorBank
from erecap_planner.testing import saved_tiny_llama


def test_saved_examples_come_back_whole(tmp_path):
    examples = [PlanExample([1, 2, 3], [4, 5]), PlanExample([7, 8], [9], 64, [True, False])]
    assert save_examples(tmp_path / "a.jsonl.gz", examples) == 2
    assert save_examples(tmp_path / "b.jsonl.gz", examples[:1]) == 1
    assert load_examples([tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl.gz"]) == examples + examples[:1]
    assert not (tmp_path / "a.jsonl.gz.partial").exists()


def test_a_file_that_is_not_saved_examples_is_named(tmp_path):
    other = tmp_path / "other.jsonl.gz"
    with gzip.open(other, "wt") as out:
        out.write('{"prompt_ids": [1]}\n')
    with pytest.raises(ValueError, match="other.jsonl.gz is not a saved examples file"):
        load_examples([other])
    broken = tmp_path / "broken.jsonl.gz"
    with gzip.open(broken, "wt") as out:
        out.write('{"format": "brace_training.plan_examples/1"}\n{"prompt_ids": [1]}\n')
    with pytest.raises(ValueError, match="broken.jsonl.gz:2: malformed example"):
        load_examples([broken])


def test_built_here_trained_there(tmp_path):
    model = saved_tiny_llama(tmp_path / "tiny")
    data = ["--model", model, "--episodes", "1", "--agents", "2", "--max-tokens", "100000", "--seed", "3"]
    assert finetune_cli.main([*data, "--examples", "3", "--save-examples", str(tmp_path / "ex.jsonl.gz")]) == 0
    assert len(load_examples([tmp_path / "ex.jsonl.gz"])) == 3
    assert predictor_cli.main([*data, "--adapter", "", "--cases", "2", "--save-examples", str(tmp_path / "cases.jsonl.gz")]) == 0
    assert not list(tmp_path.glob("*.safetensors"))  # building trains nothing

    adapter = tmp_path / "lora.safetensors"
    assert train_saved_cli.main(["adapter", "--model", model, "--examples", str(tmp_path / "ex.jsonl.gz"),
                                 "--output", str(adapter)]) == 0
    assert any(name.endswith(".lora_b") and t.abs().sum() > 0 for name, t in load_file(str(adapter)).items())

    bank = tmp_path / "pred.safetensors"
    assert train_saved_cli.main(["predictor", "--model", model, "--examples", str(tmp_path / "cases.jsonl.gz"),
                                 "--adapter", str(adapter), "--epochs", "1", "--output", str(bank)]) == 0
    assert PredictorBank.load(bank, AutoConfig.from_pretrained(model)).trained


def test_pruning_aware_examples_need_a_predictor(tmp_path):
    model = saved_tiny_llama(tmp_path / "tiny")
    save_examples(tmp_path / "ex.jsonl.gz", [PlanExample(list(range(3, 80)), [5, 6], 16, [False] * 77)])
    with pytest.raises(SystemExit, match="--predictor is needed"):
        train_saved_cli.main(["adapter", "--model", model, "--examples", str(tmp_path / "ex.jsonl.gz"),
                              "--output", str(tmp_path / "a.safetensors")])


def test_predictor_cli_needs_an_output_to_train(tmp_path, capsys):
    with pytest.raises(SystemExit):
        predictor_cli.main(["--episodes", "1"])
    assert "--output is needed" in capsys.readouterr().err
