"""MonitorRelations: the collision monitor's stops and restores as `stopped_by` relations of a world state."""

from __future__ import annotations

import pytest

from brace_common.monitor_relations import MonitorRelations
from brace_common.validation import InvalidInput
from brace_common.vocabulary import Predicate, ZoneAction
from brace_common.world_state import Entity, Relation, WorldState


def state(*ids: str) -> WorldState:
    return WorldState("w", 0, 3, tuple(Entity(i, "drone") for i in ids), (Relation("d0", Predicate.NEAR, "d1"),))


def test_a_stop_or_a_restore_holds_the_agent_by_its_obstacle_until_another_action_frees_it():
    held = MonitorRelations()
    held.update("d0", ZoneAction.STOP, "d1")
    held.update("d2", ZoneAction.RESTORE, "d0")
    out = held.add_to(state("d0", "d1", "d2"))
    assert out.related(Predicate.STOPPED_BY.value) == [Relation("d0", "stopped_by", "d1"),
                                                       Relation("d2", "stopped_by", "d0")]
    assert out.relations[0] == Relation("d0", Predicate.NEAR, "d1")   # the world's own relations first, kept
    held.update("d0", ZoneAction.NONE, "d1")
    held.update("d2", ZoneAction.SLOWDOWN, "d0")   # scaled, not held
    assert held.add_to(state("d0", "d1", "d2")).related(Predicate.STOPPED_BY.value) == []


def test_a_hold_for_another_obstacle_replaces_the_first_and_a_new_episode_forgets_every_hold():
    held = MonitorRelations()
    held.update("d0", ZoneAction.STOP, "d1")
    held.update("d0", ZoneAction.STOP, "d2")
    assert held.relations({"d0", "d1", "d2"}) == [Relation("d0", "stopped_by", "d2")]
    held.update("d0", ZoneAction.YIELD, "d1")     # held for one with the right of way
    assert held.relations({"d0", "d1", "d2"}) == [Relation("d0", "stopped_by", "d1")]
    held.clear()
    assert held.relations({"d0", "d1", "d2"}) == []


def test_an_obstacle_or_agent_the_state_does_not_hold_is_left_out_and_the_state_stays_valid():
    held = MonitorRelations()
    held.update("arm_0", ZoneAction.STOP, "arm_base")   # a keep-out box of the monitor's own
    held.update("d0", ZoneAction.STOP, "")               # a stop without an obstacle names nothing
    held.update("ghost", ZoneAction.STOP, "d0")
    before = state("arm_0", "d0", "d1")
    assert held.add_to(before) is before


def test_an_action_that_is_none_of_the_monitors_is_refused_naming_it():
    held = MonitorRelations()
    with pytest.raises(InvalidInput, match="action: 9") as raised:
        held.update("d0", 9, "d1")
    assert raised.value.reason == "unknown_action" and held.stopped_by == {}
