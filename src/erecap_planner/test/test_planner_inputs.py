"""PlannerInputs without ROS: a converted input taken or its refusal counted, episode boundaries dispatched."""

from __future__ import annotations

from brace_msgs.msg import ContextEntry, Episode, ExecutionOutcome
from test_world_schema import Log

from brace_common.clock import stamp_of
from brace_common.validation import Rejections
from brace_common.vocabulary import Block, EpisodeEvent
from erecap_planner import convert
from erecap_planner.context import Entry
from erecap_planner.planner_inputs import PlannerInputs


def test_a_converted_entry_is_held_and_a_refused_one_counted_by_reason_and_as_malformed():
    log = Log()
    inputs = PlannerInputs(rejections=Rejections(log))
    good = ContextEntry(agent_id="a", step=1, block=ContextEntry.BLOCK_TASK, text="fetch cup_3")
    bad = ContextEntry(agent_id="", step=2, block=ContextEntry.BLOCK_HISTORY, text="who said this?")
    for msg in (good, bad):
        inputs.take(lambda msg=msg: convert.entry_from_msg(msg), inputs.entry, "context_entry", msg.agent_id)
    assert [e.text for e in inputs.snapshot().task] == ["fetch cup_3"]
    assert inputs.counts["context_entries"] == 1 and inputs.counts["malformed_context"] == 1
    assert sum(inputs.rejections.counts.values()) == 1 and log.said("warning", "dropped context_entry")
    assert inputs.health().warnings  # malformed_context warns


def test_a_refused_outcome_is_counted_in_the_rejections_only():
    inputs = PlannerInputs()
    inputs.take(lambda: convert.outcome_from_msg(ExecutionOutcome(step=1, action="pick")), inputs.outcome, "outcome",
                "")  # no agent_id: refused
    assert sum(inputs.rejections.counts.values()) == 1 and not inputs.health().warnings


def test_an_episode_start_forgets_what_came_before_it_and_an_end_changes_no_context():
    inputs = PlannerInputs()
    inputs.entry(Entry("a", 3, Block.HISTORY, "old news", stamp=5.0))
    start = Episode(event=EpisodeEvent.START.value, world="w", episode=2)
    start.header.stamp = stamp_of(10.0)
    mark = convert.episode_from_msg(start)
    assert (mark.event, mark.stamp_s, mark.key, mark.episode) == (EpisodeEvent.START, 10.0, "w/0/2/10.000", ("w", 2))
    inputs.episode(mark)
    assert inputs.episode_start_s == 10.0 and inputs.counts["entries_forgotten"] == 1 and not len(inputs.snapshot())
    inputs.entry(Entry("a", 0, Block.HISTORY, "new", stamp=10.5))
    end = Episode(event=EpisodeEvent.END.value, world="w", episode=2, success=True, steps=9)
    end.header.stamp = stamp_of(20.0)
    inputs.episode(convert.episode_from_msg(end))
    assert inputs.episode_start_s == 10.0 and len(inputs.snapshot()) == 1
