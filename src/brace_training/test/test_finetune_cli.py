"""warehouse-finetune on a tiny model: pruning-aware examples are trained under E-RECAP with the given predictor."""

from __future__ import annotations

import pytest
from safetensors.torch import load_file
from transformers import AutoConfig

from brace_training import finetune_cli
from erecap_planner.models import load_model
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
            "--seed", "3", "--pruned", "1.0", "--predictor", str(predictor), "--output", str(out)]
    assert finetune_cli.main(args) == 0
    assert "3 pruned to their B_t" in capsys.readouterr().err  # every sampled prompt is longer than its B_t
    tensors = load_file(str(out))
    assert tensors and any(name.endswith(".lora_b") and t.abs().sum() > 0 for name, t in tensors.items())


def test_pruned_share_outside_0_1_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        finetune_cli.main(["--pruned", "1.5", "--output", str(tmp_path / "a.safetensors")])
    assert "--pruned 1.5" in capsys.readouterr().err


def test_memory_examples_read_the_memory_a_call_would_retrieve(tmp_path, monkeypatch):
    import random

    from brace_common.vocabulary import Mode
    from erecap_planner.models import load_model

    # the tiny tokenizer writes a line in many tokens: a B_t that leaves the MEMORY block room for one
    monkeypatch.setattr(finetune_cli, "mode_budgets", lambda: ({m: 8192 for m in Mode}, 64))
    model, tok = load_model(saved_tiny_llama(tmp_path / "tiny"), device="cpu", dtype="float32")
    flat = finetune_cli.build_examples(tok, 2, (2,), 5, 100_000, random.Random(0), memory_share=0.0)
    memory = finetune_cli.build_examples(tok, 2, (2,), 5, 100_000, random.Random(0), memory_share=1.0)
    texts = [tok.decode(e.prompt_ids) for e in memory]
    assert len(memory) == len(flat)  # the same decision points, rendered with memory
    assert all("MEMORY:" not in tok.decode(e.prompt_ids) for e in flat)
    assert any("MEMORY:" in t for t in texts)
    assert [e.target_ids for e in memory] == [e.target_ids for e in flat]
    # every example says which plan tokens the decoder chooses: the action and entity ids, not the JSON around them
    for e in flat:
        assert len(e.choice) == len(e.target_ids) and any(e.choice) and not all(e.choice)
        chosen = tok.decode([t for t, c in zip(e.target_ids, e.choice, strict=True) if c])
        assert '"plan"' not in chosen and '"action"' not in chosen


def test_invalid_training_options_stop_the_command_naming_them(tmp_path, capsys):
    with pytest.raises(SystemExit):
        finetune_cli.main(["--batch-size", "0", "--output", str(tmp_path / "a.safetensors")])
    assert "batch_size must be >= 1" in capsys.readouterr().err


def test_memory_share_outside_0_1_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        finetune_cli.main(["--memory", "-0.1", "--output", str(tmp_path / "a.safetensors")])
    assert "--memory -0.1" in capsys.readouterr().err


def test_on_policy_examples_come_from_the_planners_own_states(tmp_path):
    import random

    from brace_common.action_schema import Step

    _, tok = load_model(saved_tiny_llama(tmp_path / "tiny"), device="cpu", dtype="float32")
    asked = []

    def policy_for(schema):
        assert schema.max_steps > 0  # the K's own schema
        return lambda point: asked.append(point) or [Step("wait")]

    oracle = finetune_cli.build_examples(tok, 1, (2,), 5, 100_000, random.Random(0))
    on_policy = finetune_cli.build_examples(tok, 1, (2,), 5, 100_000, random.Random(0), policy_for=policy_for,
                                            on_policy=1.0)
    assert len(asked) == len(on_policy) > 0  # asked at every decision point
    # idle plans lead elsewhere than the oracle's: other prompts, still the oracle's labels
    assert [e.prompt_ids for e in on_policy] != [e.prompt_ids for e in oracle]
    assert on_policy[0].target_ids == oracle[0].target_ids


def test_the_planner_policy_plans_at_each_decision_point_and_counts_agreement(tmp_path):
    from brace_common.action_schema import ActionSchema
    from brace_training.plan_data import decision_points
    from brace_training.planner_policy import load_policy
    from sim_bridges.warehouse.warehouse_feed import action_schema
    from sim_bridges.warehouse.warehouse_world import Warehouse, WorldConfig

    policy_for = load_policy("", "", 64, "float32", saved_tiny_llama(tmp_path / "tiny"))
    schema = ActionSchema.from_dict(action_schema(Warehouse(WorldConfig(num_agents=1))))
    policy = policy_for(schema)
    with pytest.raises(ValueError, match="no call"):
        policy.scores()
    points = list(decision_points(range(1), num_agents=1, max_steps=6, policy=policy, on_policy=1.0))
    assert policy.calls == len(points) > 0 and policy.errors == 0  # constrained decoding: always a valid plan
    assert 0.0 <= policy.first_step_agreement <= 1.0
    scores = policy.scores()
    assert scores["points"] == policy.calls and scores["valid_plans"] == 1.0
    assert scores["plan_agreement"] <= scores["first_step_agreement"]  # a whole plan agrees only with its first step
    assert 0.0 <= scores["full_replan_agreement"] <= 1.0  # the first point is an initial plan
    assert scores["tokens_after"] <= scores["tokens_before"]
    # a line per call: the point, the oracle's first step and the plan's, agreeing as the count does
    assert [(r["seed"], r["step"], r["agent_id"]) for r in policy.records] == [(p.seed, p.step, p.agent_id)
                                                                               for p in points]
    assert sum(r["agreed"] for r in policy.records) == policy.agreed
    assert all(r["oracle_first"] == (p.oracle[0].text() if p.oracle else "") for r, p in zip(policy.records, points, strict=True))
    assert all(r["agreed"] == (r["chosen_first"] == r["oracle_first"]) for r in policy.records)
    assert {r["mode"] for r in policy.records} <= {"full_replan", "partial_replan", "reuse_subplan", "defer_replan"}
    other = policy_for(ActionSchema.from_dict(action_schema(Warehouse(WorldConfig(num_agents=2)))))
    assert other.path.tokenizer is policy.path.tokenizer  # loaded once, a call path per schema
    with pytest.raises(ValueError, match="token_budget"):
        type(policy)(policy.path, 0)


def test_on_policy_share_and_budget_are_checked(tmp_path, capsys):
    for args in (["--on-policy", "1.5"], ["--policy-budget", "0"]):
        with pytest.raises(SystemExit):
            finetune_cli.main([*args, "--output", str(tmp_path / "a.safetensors")])
        assert args[0] in capsys.readouterr().err


def test_training_prompts_are_the_sim_planner_s_own(tmp_path):
    """No second prompt format: a flat example's prompt is what the sim planner's call path (its layout, its mode's
    request, the B_t the example was built at) reads before compression."""
    import random

    from brace_common.action_schema import ActionSchema
    from brace_common.config import load_ros_parameters, resolve_path
    from brace_training import prompts
    from brace_training.plan_data import context_buffer, decision_points
    from erecap_planner.call_path import CallOptions, CallRequest, LocalModel, PlannerCallPath
    from erecap_planner.pruning import PruneSchedule
    from sim_bridges.warehouse.warehouse_feed import action_schema
    from sim_bridges.warehouse.warehouse_world import Warehouse, WorldConfig

    sim = load_ros_parameters(resolve_path("package://brace_bringup/params/erecap_planner_sim.yaml"), "erecap_planner")
    assert prompts.LAYOUT == sim["context_layout"] and sim["decoding"] == "constrained"
    model, tok = load_model(saved_tiny_llama(tmp_path / "tiny"), device="cpu", dtype="float32")
    built = finetune_cli.build_examples(tok, 1, (2,), 5, 100_000, random.Random(0))
    schema = ActionSchema.from_dict(action_schema(Warehouse(WorldConfig(num_agents=2))))
    planner = PlannerCallPath(LocalModel(model, tok, PruneSchedule((), 1.0)),
                              CallOptions(compressor="none", decoding="constrained", layout=sim["context_layout"]),
                              schema)
    points = list(decision_points(range(5, 6), 2, observe_every=random.Random(0).choice([4, 6, 8])))
    assert len(points) == len(built)
    for point, example in zip(points, built, strict=True):
        ids, protect = planner.prompt(context_buffer(point.entries), CallRequest(point.agent_id, 384, 0.0, 0.0,
                                                                                 int(point.mode), point.step))
        assert (ids, protect) == (example.prompt_ids, example.protect)
