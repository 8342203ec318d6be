"""The graph fuzz harness, short (bench/fuzz_graph.py runs it at full size): hostile input, then a real run."""

from __future__ import annotations

from brace_bringup.fuzz import run


def test_hostile_input_is_counted_and_the_graph_still_closes_the_loop(tmp_path):
    result = run(tmp_path, per_topic=200, goals=40, seed=1, log=lambda *_: None)
    assert not result.crashed and not result.hung, (result.crashed, result.hung)
    for attack in result.attacks:
        assert attack.malformed > 0 or "Decision" in attack.name, attack.row  # the generators do send bad input
        assert attack.fully_counted, attack.row
    goals = result.goals
    assert goals["unanswered"] == 0 and goals["rejected"] > 0 and goals["accepted"] > 0, goals
    assert goals["finished"] == goals["accepted"], goals  # every accepted goal got its result (cancelled or not)
    assert result.episodes == 1 and result.episodes_with_plans == 1
    assert result.calls_over_deadline == 0, result.worst_overrun_ms
