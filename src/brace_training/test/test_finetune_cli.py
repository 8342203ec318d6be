"""warehouse-finetune on a tiny model: pruning-aware examples are trained under E-RECAP with the given predictor."""

from __future__ import annotations

import pytest
from safetensors.torch import load_file
from transformers import AutoConfig

from brace_training import finetune_cli
from erecap_planner.predictor import PredictorBank
from erecap_planner.pruning import table8_layers
from erecap_planner.testing import saved_tiny_llama


def test_pruning_aware_finetune_writes_an_adapter(tmp_path, capsys):
    model = saved_tiny_llama(tmp_path / "tiny")
    config = AutoConfig.from_pretrained(model)
    predictor = tmp_path / "pred.safetensors"
    PredictorBank.for_model(config, table8_layers(config.num_hidden_layers), seed=1).save(predictor)
    out = tmp_path / "lora.safetensors"
    args = ["--model", model, "--episodes", "1", "--agents", "2", "--examples", "3", "--max-tokens", "100000",
            "--seed", "3", "--pruned", "1.0", "--budget", "64", "--predictor", str(predictor), "--output", str(out)]
    assert finetune_cli.main(args) == 0
    assert "3 pruned to B = 64" in capsys.readouterr().err  # every sampled prompt is longer than 64 tokens
    tensors = load_file(str(out))
    assert tensors and any(name.endswith(".lora_b") and t.abs().sum() > 0 for name, t in tensors.items())


def test_pruned_share_outside_0_1_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        finetune_cli.main(["--pruned", "1.5", "--output", str(tmp_path / "a.safetensors")])
    assert "--pruned 1.5" in capsys.readouterr().err


def test_memory_examples_read_the_memory_a_call_would_retrieve(tmp_path, monkeypatch):
    import random

    from erecap_planner.models import load_model

    monkeypatch.setattr(finetune_cli, "MEMORY_BUDGET", 8192)  # the tiny tokenizer writes a line in many tokens
    model, tok = load_model(saved_tiny_llama(tmp_path / "tiny"), device="cpu", dtype="float32")
    flat = finetune_cli.build_examples(tok, 2, (2,), 5, 100_000, random.Random(0), memory_share=0.0)
    memory = finetune_cli.build_examples(tok, 2, (2,), 5, 100_000, random.Random(0), memory_share=1.0, model=model)
    texts = [tok.decode(e.prompt_ids) for e in memory]
    assert len(memory) == len(flat)  # the same decision points, rendered with memory
    assert all("MEMORY:" not in tok.decode(e.prompt_ids) for e in flat)
    assert any("MEMORY:" in t for t in texts)
    assert [e.target_ids for e in memory] == [e.target_ids for e in flat]


def test_memory_share_outside_0_1_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        finetune_cli.main(["--memory", "-0.1", "--output", str(tmp_path / "a.safetensors")])
    assert "--memory -0.1" in capsys.readouterr().err
