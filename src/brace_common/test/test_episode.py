"""The one Episode conversion: the common verdict and a world's metrics, to the message and back."""

from __future__ import annotations

import math

from brace_msgs.msg import Episode
from builtin_interfaces.msg import Time

from brace_common.episode import EpisodeMetrics, EpisodeResult, episode_from_msg, episode_msg
from brace_common.vocabulary import EpisodeEvent

STAMP = Time(sec=12, nanosec=5)


def test_an_end_carries_the_verdict_and_only_the_measured_metrics():
    verdict = EpisodeMetrics(success=True, steps=40, delivered=3, tasks=3,
                             metrics={"near_misses": 2, "min_distance_m": 3.25, "path_efficiency": math.nan})
    result = EpisodeResult.of(verdict, episode=4, seed=7, plans=9, plans_agreeing=6)
    msg = episode_msg(EpisodeEvent.END, 4, 7, 8, "airsim", "brace_erecap", STAMP, result)
    assert (msg.event, msg.episode, msg.seed, msg.num_agents, msg.world, msg.variant) == \
        (Episode.EVENT_END, 4, 7, 8, "airsim", "brace_erecap")
    assert (msg.success, msg.steps, msg.delivered, msg.tasks, msg.plans) == (True, 40, 3, 3, 9)
    # sorted by name; NaN (not measured) is not published
    assert [(m.name, m.value) for m in msg.metrics] == [("min_distance_m", 3.25), ("near_misses", 2.0),
                                                          ("plans_agreeing", 6.0)]
    back = episode_from_msg(msg)
    assert back == EpisodeResult(success=True, steps=40, delivered=3, tasks=3, episode=4, seed=7, plans=9,
                                 metrics={"min_distance_m": 3.25, "near_misses": 2.0, "plans_agreeing": 6.0})
    assert back.metric("near_misses") == 2.0 and math.isnan(back.metric("slips")) and back.metric("slips", 0) == 0


def test_a_start_has_no_verdict():
    msg = episode_msg(EpisodeEvent.START, 0, 3, 1, "pickfruit", "one_shot", STAMP)
    assert msg.header.stamp == STAMP and msg.num_agents == 1 and not msg.metrics
    assert (msg.success, msg.steps, msg.tasks, msg.plans) == (False, 0, 0, 0)


def test_a_row_has_the_common_columns_then_one_per_metric_and_counts_stay_integers():
    result = episode_from_msg(episode_msg(EpisodeEvent.END, 1, 2, 1, "pickfruit", "v", STAMP, EpisodeResult(
        success=False, steps=5, delivered=0, tasks=1, metrics={"duration_s": 12.5, "slips": 2}, episode=1, seed=2,
        plans=3)))
    row = result.as_row()
    assert list(row) == ["episode", "seed", "success", "steps", "delivered", "tasks", "plans", "duration_s", "slips"]
    assert row["duration_s"] == 12.5 and row["slips"] == 2 and isinstance(row["slips"], int)
