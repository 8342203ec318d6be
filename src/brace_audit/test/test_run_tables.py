"""The tables from RunRecords alone: world metrics in the summary, Table 32, the drone table, and which world gets
which table (what brace-run prints and brace-audit report recomputes)."""

from __future__ import annotations

import csv
import math

from brace_msgs.msg import Episode, ReplanCall, ReplanDecision, TriggerEvent
from builtin_interfaces.msg import Time

from brace_audit import drone_report, pickfruit_report
from brace_audit.audit import RecordCollector
from brace_audit.audit_report import RunRecords, metric_summary, report, summary
from brace_audit.run_tables import WORLD_TABLES, run_tables, world_tables
from brace_common.episode import EpisodeResult, episode_msg
from brace_common.vocabulary import EpisodeEvent


def episode(i: int, success: bool, plans: int = 2, **metrics: float) -> EpisodeResult:
    return EpisodeResult(success=success, steps=10 + i, delivered=int(success), tasks=1, metrics=metrics, episode=i,
                         seed=i, plans=plans)


def collect(variant: str, world: str, num_agents: int, episodes: list[EpisodeResult], calls: int = 0,
            triggers: tuple[tuple[int, bool], ...] = ()) -> RunRecords:
    """RunRecords built from the messages a world, the controller (a decision per (kind, admitted) of `triggers`
    in each episode) and the planner publish (as live and from a bag)."""
    collector = RecordCollector()
    t = 0
    for e in episodes:
        t += 1_000_000_000
        collector.add("/brace/episode", episode_msg(EpisodeEvent.START, e.episode, e.seed, num_agents, world, variant,
                                                    Time(sec=t // 10**9)), t)
        for n, (kind, admitted) in enumerate(triggers):
            decision = ReplanDecision(decision_id=f"d{e.episode}_{n}", admitted=admitted,
                                      reason="gate_open" if admitted else "cooldown",
                                      trigger=TriggerEvent(trigger_id=f"t{n}", agent_id="a", kind=kind))
            collector.add("/brace/decisions", decision, t + n)
        for c in range(calls):
            collector.add("/brace/replan_calls", ReplanCall(agent_id="a", status=0, latency_ms=100.0 * (c + 1),
                                                            slo_ms=250.0, slo_met=c < 2, tokens_before=300,
                                                            tokens_after=200), t + c)
        t += 4_000_000_000
        collector.add("/brace/episode", episode_msg(EpisodeEvent.END, e.episode, e.seed, num_agents, world, variant,
                                                    Time(sec=t // 10**9), e), t)
    return collector.records


def test_the_collector_keeps_the_world_k_and_the_duration_by_the_worlds_stamps():
    records = collect("v", "warehouse", 4, [episode(0, True), episode(1, False)])
    assert (records.variant, records.world, records.num_agents, len(records.episodes)) == ("v", "warehouse", 4, 2)
    assert records.duration_s == 9.0  # first start (1 s) to last end (10 s), whenever the messages arrived


def test_world_metrics_are_averaged_over_the_episodes_that_measured_them_and_min_metrics_minimised():
    episodes = [episode(0, True, near_misses=1, min_distance_m=3.0), episode(1, True, near_misses=3),
                episode(2, False, min_distance_m=2.0)]
    assert metric_summary(episodes) == {"near_misses": 2.0, "min_distance_m": 2.0}
    row = summary(RunRecords(variant="v", episodes=episodes))
    assert row["near_misses"] == 2.0 and row["min_distance_m"] == 2.0 and "collisions" not in row


def test_oracle_agreement_counts_only_worlds_with_an_oracle():
    with_oracle = summary(RunRecords(episodes=[episode(0, True, plans=4, plans_agreeing=3),
                                               episode(1, True, plans=4, plans_agreeing=1)]))
    assert with_oracle["oracle_agreement"] == 0.5
    assert math.isnan(summary(RunRecords(episodes=[episode(0, True, plans=4)]))["oracle_agreement"])


def test_the_markdown_lists_the_measured_metrics_and_no_others():
    text = report([collect("v", "warehouse", 2, [episode(0, True, path_efficiency=0.5, collisions=0)])])
    episodes_table = text.split("## Episodes and churn")[1].split("##")[0]
    assert "path_efficiency" in episodes_table and "collisions" in episodes_table
    assert "near_misses" not in episodes_table and "duration_s" not in episodes_table


def test_table_32_sums_slips_and_failures_and_averages_duration(tmp_path):
    runs = [collect("brace_erecap", "pickfruit", 1, [
        episode(0, True, duration_s=10.0, grasps=2, slips=1, failure_grasp=1, failure_drop_slip=1),
        episode(1, False, duration_s=20.0, grasps=1, slips=0, failure_grasp=0, failure_drop_slip=2)], calls=3)]
    (row,) = [pickfruit_report.row(r) for r in runs]
    assert (row["episodes"], row["success"], row["duration_s"], row["calls_per_episode"]) == (2, 0.5, 15.0, 3.0)
    assert (row["slips"], row["failure_grasp"], row["failure_drop_slip"], row["failure_timeout"]) == (1, 1, 3, 0)
    assert row["slips_recovered"] == 1                              # the slip of the episode that succeeded
    assert row["slo_violation"] == 1 / 3
    text = WORLD_TABLES["pickfruit"].report(runs, tmp_path)
    lines = text.splitlines()
    assert lines[0] == pickfruit_report.TITLE and lines[2].split()[:4] == ["brace_erecap", "2", "50%", "15.0"]
    assert lines[2].endswith("1 / 3 / 0 / 0 / 0 / 0 / 0 / 0")
    (written,) = csv.DictReader((tmp_path / "table32.csv").open())
    assert written["failure_drop_slip"] == "3" and written["variant"] == "brace_erecap"


def test_the_real_robots_episodes_get_table_32_under_their_own_title(tmp_path):
    real = collect("brace_erecap", "real", 1, [episode(0, False, duration_s=40.0, failure_grasp=2)])
    text = world_tables([real], tmp_path)
    assert text.splitlines()[0] == pickfruit_report.REAL_TITLE and text.splitlines()[2].endswith("2 / 0 / 0 / 0 / 0 / 0 / 0 / 0")
    (written,) = csv.DictReader((tmp_path / pickfruit_report.REAL_CSV).open())
    assert written["failure_grasp"] == "2" and not (tmp_path / pickfruit_report.CSV).exists()


def test_pusht_gets_table_32_with_goal_error_and_contact_loss_columns(tmp_path):
    runs = [collect("no_brace", "pusht", 1, [
        episode(0, True, duration_s=30.0, pushes=9, contact_losses=1, goal_error_m=0.01, goal_error_deg=3.0),
        episode(1, False, duration_s=120.0, pushes=20, contact_losses=3, goal_error_m=0.08, goal_error_deg=40.0),
        episode(2, False, duration_s=120.0, pushes=15, contact_losses=0, goal_error_m=0.05, goal_error_deg=5.0)],
        triggers=((TriggerEvent.KIND_DRIFT, True), (TriggerEvent.KIND_DRIFT, False), (TriggerEvent.KIND_PERIODIC, True)))]
    (row,) = [pickfruit_report.pusht_row(r) for r in runs]
    assert (row["goal_error_over_threshold"], row["contact_losses"], row["goal_error_m_p50"]) == (2, 4, 0.05)
    assert row["drift_replans_per_episode"] == 1.0                 # admitted drift triggers only
    assert row["contact_losses_recovered"] == 1
    assert "slips" not in row and row["duration_s"] == 90.0
    text = world_tables(runs, tmp_path)
    lines = text.splitlines()
    assert lines[0] == pickfruit_report.PUSHT_TITLE and lines[2].split()[-5:] == ["2", "4", "(1)", "1.0", "0.050"]
    (written,) = csv.DictReader((tmp_path / pickfruit_report.PUSHT_CSV).open())
    assert written["contact_losses"] == "4" and not (tmp_path / pickfruit_report.CSV).exists()


def test_the_drone_table_has_k_landed_and_the_safety_proxies(tmp_path):
    runs = [collect("no_brace", "airsim", 8, [
        episode(0, True, near_misses=1, collisions=0, min_distance_m=3.1, plans_agreeing=2),
        episode(1, False, near_misses=2, collisions=1, min_distance_m=0.9, plans_agreeing=1)], calls=2)]
    (row,) = [drone_report.row(r) for r in runs]
    assert (row["num_agents"], row["delivered"], row["near_misses"], row["collisions"], row["min_distance_m"]) == \
        (8, "1/2", 3.0, 1.0, 0.9)
    assert row["oracle_agreement"] == 3 / 4
    lines = WORLD_TABLES["airsim"].report(runs, tmp_path).splitlines()
    assert lines[0] == drone_report.TITLE
    assert lines[2].split() == ["8", "no_brace", "2", "50%", "1/2", "300", "200", "0.1", "0.2", "0.0%", "4", "3",
                                "1", "0.9"]
    assert (tmp_path / "intersection.csv").is_file()


def test_each_world_gets_its_own_table_and_the_warehouse_none():
    warehouse = collect("w", "warehouse", 2, [episode(0, True)])
    drones = collect("d", "airsim", 8, [episode(0, True, near_misses=0)])
    twin = collect("p", "pickfruit", 1, [episode(0, True, duration_s=3.0, slips=0)])
    assert world_tables([warehouse]) == ""
    tables = world_tables([twin, warehouse, drones])
    assert tables.index(pickfruit_report.TITLE) < tables.index(drone_report.TITLE)
    assert run_tables([warehouse]) == report([warehouse])
    full = run_tables([drones])
    assert full.startswith(report([drones])) and drone_report.TITLE in full


def test_a_bag_without_episode_stamps_keeps_its_arrival_duration():
    collector = RecordCollector()
    collector.add("/brace/episode", Episode(event=Episode.EVENT_START), 1_000_000_000)
    collector.add("/brace/episode", Episode(event=Episode.EVENT_END), 3_000_000_000)
    assert collector.records.duration_s == 2.0
