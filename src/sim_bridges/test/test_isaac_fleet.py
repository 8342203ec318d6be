"""IsaacFleet without ROS: what the bridge waits for before the episode, its counters and its health."""

from __future__ import annotations

from brace_common.action_schema import Step
from brace_common.vocabulary import Failure
from sim_bridges.isaac.isaac_config import IsaacBridgeConfig
from sim_bridges.isaac.isaac_fleet import WAITING, IsaacFleet, bridge_counters, load_schema
from sim_bridges.isaac.isaac_skills import Outcome


def fleet(**overrides) -> IsaacFleet:
    cfg = IsaacBridgeConfig(**overrides)
    cfg.validate()
    return IsaacFleet(cfg, load_schema(cfg), bridge_counters())


def test_the_episode_waits_for_every_contract_topic_and_for_ros_time():
    f = fleet()
    assert f.waiting(clock_missing=True)[-1] == "/clock" and f.counts["ticks_waiting_for_contract"] == 1
    for topic in f.liveness.missing():
        f.liveness.seen(topic, 1.0)
    assert f.waiting(clock_missing=True) == ["/clock"]
    assert f.waiting(clock_missing=False) == [] and f.counts["ticks_waiting_for_contract"] == 2


def test_the_report_says_what_it_waits_for_and_errs_past_the_wait_timeout():
    f = fleet(wait_timeout_s=30.0)
    health, message = f.report(mono=5.0, done=False, waited_s=None, clock_missing=False)  # inactive: no wait
    assert health.values["episode"] == WAITING and message == "" and not health.errors  # never seen: not stale
    health, message = f.report(mono=5.0, done=False, waited_s=10.0, clock_missing=True)
    assert message.startswith("waiting for Isaac Sim's topics: /carter_1/odom") and message.endswith("/clock")
    health, message = f.report(mono=5.0, done=False, waited_s=31.0, clock_missing=False)
    assert message == "" and health.errors[0].startswith("contract topics missing after 31 s: /carter_1/odom")
    assert fleet().report(5.0, done=True, waited_s=None, clock_missing=False)[0].values["episode"] == "ended"


def test_outcomes_are_counted_as_their_entries_are_made():
    f = fleet()
    for success in (True, False, False):
        entry = f.outcome_entry(Outcome("carter_1", "p", 0, Step("stop", {}), success,
                                        Failure.NONE if success else Failure.TIMEOUT, "detail"))
        assert entry.agent_id == "carter_1"
    assert (f.counts["outcomes_succeeded"], f.counts["outcomes_failed"]) == (1, 2)
