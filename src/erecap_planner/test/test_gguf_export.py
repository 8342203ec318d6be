"""The packaged SmolLM2 GGUF rewritten with other weights: llama.cpp's layout, read back by transformers unchanged."""

from __future__ import annotations

import pytest
import torch

from erecap_planner.gguf_export import export_gguf, interleave_rotary, merged_gguf
from erecap_planner.models import SMOLLM2, gguf_source, load_model


def test_interleave_rotary_pairs_each_heads_halves():
    # one head of 4 rows: transformers' halves [0, 1 | 2, 3] become llama.cpp's pairs (0, 2), (1, 3)
    weight = torch.arange(8.0).reshape(4, 2)
    assert interleave_rotary(weight, heads=1)[:, 0].tolist() == [0.0, 4.0, 2.0, 6.0]
    two = torch.arange(16.0).reshape(8, 2)
    assert interleave_rotary(two, heads=2)[4:, 0].tolist() == [8.0, 12.0, 10.0, 14.0]  # heads stay apart


@pytest.mark.parametrize("weights, tolerance", [("f16", 0.05), ("q8_0", 0.15)])
def test_exported_weights_round_trip_through_transformers(tmp_path, weights, tolerance):
    from transformers import AutoModelForCausalLM

    model, tokenizer = load_model(SMOLLM2, "cpu", "float32")
    with torch.no_grad():  # other weights than the file's: a change the export has to carry over
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(1.05)
            layer.self_attn.k_proj.weight.add_(0.001)
    target = export_gguf(model, gguf_source(), tmp_path / f"model.{weights}.gguf", weights)
    back = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=target.name, dtype=torch.float32).eval()
    ids = tokenizer("<|im_start|>user\nPlan the next step for agent_0.<|im_end|>\n", return_tensors="pt").input_ids
    with torch.no_grad():
        ours, theirs = model(ids).logits, back(ids).logits
    # float16 or 8-bit weights: the same next tokens, logits within their rounding
    assert torch.equal(ours.argmax(-1), theirs.argmax(-1))
    assert (ours - theirs).abs().max() < tolerance * ours.abs().max()


def test_an_unknown_weight_type_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="q8_0"):
        merged_gguf(SMOLLM2, "", "q4_k")
