"""The closed loop in one process (brace-run) on a tiny model: graph up, episodes run, bag = live numbers."""

from __future__ import annotations

import math

import pytest
import yaml

from brace_audit.audit import records_from_bag
from brace_audit.audit_report import summary
from brace_bringup.run_config import RunConfig, params_dir, run_file, share
from brace_bringup.run_plan import plan
from brace_bringup.runner import run
from brace_common.domain_leases import fresh_domain
from brace_common.vocabulary import CallStatus
from erecap_planner.testing import saved_tiny_llama


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return saved_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))


def same(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isclose(a, b, rel_tol=1e-9)) or \
        (isinstance(a, float) and math.isnan(a) and isinstance(b, float) and math.isnan(b))


def test_demo_config_loads():
    cfg = RunConfig.load("demo")
    assert cfg.params_dir == params_dir() and set(cfg.variants) == {"no_brace", "brace_erecap"}
    params = cfg.parameters("no_brace", {})
    assert params["erecap_planner"]["compressor"] == "none" and params["brace_controller"]["cooldown_steps"] == 0
    assert params["erecap_planner"]["decoding"] == "constrained"
    # Every BRACE variant runs the adaptive budget (No BRACE has none); no dtype is pinned for one machine.
    assert cfg.parameters("brace_erecap", {})["brace_controller"]["adaptive_budget"] is True
    assert params["brace_controller"]["adaptive_budget"] is False
    assert all(p["erecap_planner"].get("dtype", "auto") == "auto" for p in map(lambda v: cfg.parameters(v, {}),
                                                                                  cfg.variants))


def test_set_overrides_must_name_a_node_and_parameter(capsys):
    from brace_bringup.runner import main

    assert main(["demo", "--set", "max_steps=80"]) == 2
    assert main(["demo.yaml", "--set", "robot.max_steps=80"]) == 2
    assert "NODE.PARAM=VALUE" in capsys.readouterr().err


def test_closed_loop_runs_and_the_bag_reproduces_the_live_numbers(model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("ROS_DOMAIN_ID", str(fresh_domain()))
    cfg = RunConfig.load("demo")
    extra = {"embedded_sim": {"episodes": 2, "num_agents": 2, "max_steps": 6, "step_period_s": 0.01,
                              "hold_while_planning": True},
             "erecap_planner": {"model_path": model_dir, "pruning_layers": [1, 3], "predictor_path": "",
                                "adapter_path": ""}}
    folder, runs = run(cfg, ["no_brace", "brace_erecap"], tmp_path / "runs", extra, quiet=True)
    assert (folder / "summary.csv").is_file() and (folder / "latency_cdf.png").is_file()
    assert (folder / "slo_violation.png").is_file()
    for live in runs:
        assert len(live.episodes) == 2
        assert live.calls, "the episode start asks every agent for an initial plan"
        assert {agent for _, agent, _ in live.plans} == {"agent_0", "agent_1"}, "the monitor learnt the world's K"
        bag = folder / live.variant / "bag"
        recorded, note = records_from_bag(bag)
        assert note == ""
        a, b = summary(live), summary(recorded)
        assert all(same(a[k], b[k]) for k in a if k != "variant"), (a, b)
    erecap = summary(runs[1])
    assert erecap["tokens_after"] < erecap["tokens_before"]  # pruned (byte tokens: protected blocks alone exceed B)
    params = yaml.safe_load((folder / "no_brace" / "params.yaml").read_text())
    assert params["/**/trigger_monitor"]["ros__parameters"]["agents"] == []  # learnt from the world, not copied
    assert params["/**/erecap_planner"]["ros__parameters"]["action_schema_file"] == ""  # the world's, not copied


def test_a_run_with_a_planner_server_starts_it_and_plans_through_it(model_dir, tmp_path, monkeypatch):
    # runs/demo_server.yaml on the tiny model: brace-run starts `transformers serve` on it (a real server on
    # 127.0.0.1), points the planner at it, and every call goes through it (a random model: counted planner errors).
    monkeypatch.setenv("ROS_DOMAIN_ID", str(fresh_domain()))
    cfg = RunConfig.load("demo_server")
    assert cfg.planner_server.get("engine", "transformers") == "transformers" and cfg.planner_server["adapter"]
    assert cfg.parameters("brace_erecap", {})["erecap_planner"]["backend"] == "openai"
    cfg.planner_server = {**cfg.planner_server, "model": model_dir, "adapter": ""}
    extra = {"embedded_sim": {"episodes": 1, "num_agents": 2, "max_steps": 6, "step_period_s": 0.01},
             "erecap_planner": {"model_path": model_dir, "pruning_layers": [1, 3], "predictor_path": "",
                                "adapter_path": "", "max_new_tokens": 8}}
    folder, runs = run(cfg, ["brace_erecap"], tmp_path / "runs", extra, quiet=True)
    calls = runs[0].calls
    assert calls and (folder / "planner_server.log").is_file()
    assert all(c.status != CallStatus.UNAVAILABLE for c in calls), [c.status for c in calls]
    assert all("first_token" in c.phases and "prefill" not in c.phases for c in calls if c.phases)
    assert "server_url: http://127.0.0.1:" in (folder / "brace_erecap" / "params.yaml").read_text()


def test_run_configs_reject_unknown_planner_server_keys(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("run:\n  extends: demo_server.yaml\n"
                    "  planner_server: {gpus: 2}\n")
    with pytest.raises(ValueError, match="planner_server has unknown keys"):
        RunConfig.load(path)


def test_own_process_nodes_are_started_as_launch_starts_them_and_the_rest_composed(tmp_path):
    cfg = RunConfig.load("piper_twin")
    assert cfg.own_process == ("erecap_planner",)   # the planner's forward passes: not under the twin's GIL
    run_plan = plan(cfg, "brace_erecap", tmp_path / "v", namespace="/arm")
    assert "erecap_planner" not in {s.name for s in run_plan.composed} and len(run_plan.composed) == \
        len(run_plan.nodes) - 1
    (planner,) = run_plan.node_processes()
    assert planner.name == "erecap_planner" and planner.command()[0].endswith("lib/erecap_planner/erecap_planner")
    assert planner.arguments == ("--ros-args", "-r", "__ns:=/arm", "-r", "__node:=erecap_planner", "--params-file",
                                 str(run_plan.parameters))
    assert plan(RunConfig.load("demo"), "brace_erecap", tmp_path / "d").node_processes() == ()
    bad = tmp_path / "bad.yaml"
    for value, words in (("[twin_world]", "cannot hold \\['twin_world'\\]"), ("[audit_recorder]", "audit_recorder"),
                         ("[nobody]", "names nodes \\['nobody'\\]"), ("erecap_planner", "list of node names")):
        bad.write_text(f"run:\n  extends: piper_twin.yaml\n  own_process: {value}\n")
        with pytest.raises(ValueError, match=words):
            RunConfig.load(bad)
    bad.write_text("run:\n  extends: piper_twin.yaml\n  own_process: []\n")
    assert RunConfig.load(bad).own_process == ()   # a run that extends one can compose every node again


def test_airsim_peer_is_checked_and_the_run_writes_the_drones_schema(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("run:\n  extends: airsim_k8.yaml\n  airsim_peer: {gpu: 1}\n")
    with pytest.raises(ValueError, match="airsim_peer has unknown keys"):
        RunConfig.load(bad)
    bad.write_text("run:\n  extends: demo.yaml\n  airsim_peer: {port: 1}\n")
    with pytest.raises(ValueError, match="needs a stack with an airsim_bridge"):
        RunConfig.load(bad)
    cfg = RunConfig.load("airsim_k8")
    params = cfg.parameters("brace_erecap", {"airsim_bridge": {"num_agents": 3}})
    assert params["airsim_bridge"]["num_agents"] == 3 and cfg.peer_spec()["port"] == 41451
    written = yaml.safe_load(cfg.write_parameters("brace_erecap", tmp_path / "run",
                                                  {"airsim_bridge": {"num_agents": 3}}).read_text())
    assert written["/**/trigger_monitor"]["ros__parameters"]["agents"] == []  # learnt from the drones' states
    assert written["/**/erecap_planner"]["ros__parameters"]["action_schema_file"] == ""  # the bridge's WorldInfo


def test_a_variant_that_gives_the_hostile_planner_parameters_runs_it_in_the_planners_place(tmp_path):
    cfg = RunConfig.load("airsim_k8")
    assert "hostile_planner" in cfg.node_names and "hostile_planner" not in cfg.stack.names
    assert cfg.stack_of("brace_erecap") is cfg.stack
    stack = cfg.stack_of("hostile")
    assert stack.names == tuple("hostile_planner" if n == "erecap_planner" else n for n in cfg.stack.names)
    params = cfg.parameters("hostile", {"erecap_planner": {"compressor": "none"}})   # a layer for a node not run
    assert "erecap_planner" not in params and params["hostile_planner"]["target_frame"] == "ned"
    assert params["airsim_bridge"]["wait_for_nodes"] == ["trigger_monitor", "brace_controller", "hostile_planner",
                                                         "audit_recorder"]
    assert "erecap_planner" in cfg.parameters("brace_erecap")["airsim_bridge"]["wait_for_nodes"]
    run_plan = plan(cfg, "hostile", tmp_path / "hostile", airsim_peer=False)
    assert "hostile_planner" in [spec.name for spec in run_plan.nodes]
    bad = tmp_path / "bad.yaml"
    bad.write_text("run:\n  extends: demo.yaml\n  variants: {x: {hostile_planners: {aim: random}}}\n")
    with pytest.raises(ValueError, match="hostile_planners"):
        RunConfig.load(bad)


def test_a_run_configuration_is_a_file_or_an_installed_name(tmp_path):
    installed = share() / "runs" / "demo.yaml"
    assert run_file("demo") == run_file("demo.yaml") == installed and run_file(str(installed)) == installed
    own = tmp_path / "mine.yaml"
    own.write_text("run:\n  extends: demo.yaml\n  overrides: {embedded_sim: {episodes: 1}}\n")
    cfg = RunConfig.load(own)  # extends: an installed one (none beside it)
    assert cfg.parameters("brace_erecap")["embedded_sim"]["episodes"] == 1
    with pytest.raises(FileNotFoundError, match="demo_server"):  # the message names the installed ones
        run_file("no_such_run")
    with pytest.raises(FileNotFoundError):
        run_file(tmp_path / "missing.yaml")
