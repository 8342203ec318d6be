"""Oracle-driven decision points of the embedded warehouse (the planner's training data)."""

from __future__ import annotations

from brace_common.action_schema import Step
from brace_training.plan_data import decision_points


def test_decision_points_carry_the_oracle_answer():
    points = list(decision_points(range(1), num_agents=2, max_steps=20))
    assert points and all(p.oracle for p in points)
    assert points[-1].step > 0 and len(points[-1].entries) > len(points[0].entries)


def test_detours_execute_mistakes_but_keep_the_oracle_labels():
    def picks(points):
        return sum("picked" in e.text for e in points[-1].entries)

    clean = list(decision_points(range(1), num_agents=2, max_steps=30))
    detoured = list(decision_points(range(1), num_agents=2, max_steps=30, detour=1.0))
    assert picks(clean) > 0 and picks(detoured) == 0  # every executed plan was a detour: nothing was ever picked
    assert all(p.oracle for p in detoured)
    assert any(p.oracle[0].action == "move_to" and p.step > 10 for p in detoured)


def test_eight_agents_on_the_aisles_floor_plan_give_points_up_to_the_last_delivery():
    points = list(decision_points(range(1), num_agents=8, max_steps=80, floor_plan="aisles"))
    assert {p.agent_id for p in points} == {f"agent_{i}" for i in range(8)}
    assert any("task done" in e.text for e in points[-1].entries)


def test_on_policy_episodes_execute_the_policys_plans_but_keep_the_oracle_labels():
    asked = []

    def idle(point):  # a planner that never moves anyone
        asked.append(point)
        return [Step("wait")]

    points = list(decision_points(range(1), num_agents=2, max_steps=30, policy=idle, on_policy=1.0))
    assert asked == points  # asked at every decision point, after it was yielded
    assert not any("picked" in e.text for e in points[-1].entries)
    assert all(p.oracle and p.oracle != [Step("wait")] for p in points[:2])  # the labels are still the oracle's
    assert len({p.step for p in points}) > 2  # idle plans end, and the agents are asked again


def test_a_policy_without_a_plan_leaves_the_oracles_plan_running():
    clean = list(decision_points(range(1), num_agents=2, max_steps=30))
    silent = list(decision_points(range(1), num_agents=2, max_steps=30, policy=lambda point: [], on_policy=1.0))
    assert [(p.step, p.agent_id, p.oracle) for p in silent] == [(p.step, p.agent_id, p.oracle) for p in clean]


def test_gig_memory_reads_the_world_s_states_and_its_lookahead(tmp_path):
    """Training with GiG's modules feeds them what the embedded sim gives the planner node: every world state (its
    scene graphs) and a lookahead answered by the world's transition model, so the prompt has lookahead lines."""
    import itertools

    from brace_common.action_schema import ActionSchema
    from brace_training.finetune_cli import MEMORY_CONFIGS, memory_use
    from brace_training.prompts import call_prompt, prompt_path, use_memory
    from erecap_planner.models import load_model
    from erecap_planner.testing import saved_tiny_llama
    from sim_bridges.warehouse.warehouse_feed import action_schema
    from sim_bridges.warehouse.warehouse_world import Warehouse, WorldConfig

    _, tok = load_model(saved_tiny_llama(tmp_path / "tiny"), device="cpu", dtype="float32")
    gig = memory_use(next(c for c in MEMORY_CONFIGS if c.name == "gig"))
    path = prompt_path(tok, ActionSchema.from_dict(action_schema(Warehouse(WorldConfig(num_agents=2)))))
    use_memory(path, gig)
    texts = []
    for point in itertools.islice(decision_points(range(1), num_agents=2, max_steps=20, memory=gig.system), 4):
        ids, _ = call_prompt(path, point, 16_384)  # the byte tokenizer writes a line in many tokens
        texts.append(tok.decode(ids))
    assert gig.system.counts["lookahead_projected"] > 0
    assert any("lookahead: " in t for t in texts)


def test_each_point_reads_the_mode_the_controller_picks_for_the_trigger_the_monitor_raises():
    from brace_common.vocabulary import Mode
    from brace_controller.config import ControllerConfig, MonitorConfig
    from brace_controller.policy import select_mode
    from brace_controller.triggers import AgentObservation, TriggerMonitor
    from brace_training.plan_data import controller_mode

    def mode(trigger):
        return select_mode(trigger, override=False, reuse_severity=ControllerConfig().reuse_severity)

    monitor = TriggerMonitor(MonitorConfig(periodic_interval_steps=2, plan_done_idle_steps=0, failure_threshold=1))
    for has_plan in (True, False):
        monitor.on_state("a", AgentObservation((0.0, 0.0, 0.0), has_goal=has_plan))
        periodic = [t for t in monitor.on_step(2 if has_plan else 4) if t.agent_id == "a"]
        assert periodic and mode(periodic[0]) == controller_mode(False, has_plan)
        failure = monitor.on_outcome("a", success=False)
        assert failure and mode(failure[0]) == controller_mode(True, has_plan)
    assert controller_mode(False, False) == Mode.FULL_REPLAN  # an initial or finished plan: nothing to repair
    points = list(decision_points(range(2), num_agents=2, max_steps=30))
    assert {p.mode for p in points} >= {Mode.FULL_REPLAN, Mode.PARTIAL_REPLAN}
