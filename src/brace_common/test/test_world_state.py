"""WorldState: the message round trip, diffs, when a world publishes, plan progress seen from outside."""

from __future__ import annotations

import math

import pytest
from brace_msgs.msg import Entity as EntityMsg
from brace_msgs.msg import KeyValue
from brace_msgs.msg import Relation as RelationMsg
from brace_msgs.msg import WorldState as WorldStateMsg
from builtin_interfaces.msg import Time
from rclpy.serialization import deserialize_message, serialize_message

from brace_common.validation import InvalidInput
from brace_common.vocabulary import Activity, Observability, Predicate
from brace_common.world_state import (
    MAX_ATTRIBUTES,
    MAX_ENTITIES,
    MAX_RELATIONS,
    MAX_STATE_CHARS,
    TASK_LOST,
    TASK_TYPE,
    AgentActivity,
    Entity,
    PlanProgress,
    Pose,
    Relation,
    StatePublication,
    WorldState,
    changed,
    diff,
    world_state_from_msg,
    world_state_msg,
)


def scene(step: int = 3, cup_state: str = "held", activity: Activity = Activity.EXECUTING) -> WorldState:
    return WorldState(
        "warehouse", 2, step,
        entities=(Entity("agent_0", "robot", "", Pose.planar(1.0, 2.0, yaw=0.5), {"cell": "[1, 2]"}),
                  Entity("cup_3", "object", cup_state, None, {"width_m": "0.045"}),
                  Entity("shelf_1", "shelf", "", Pose.planar(2.0, 2.0))),
        relations=(Relation("agent_0", Predicate.HOLDING, "cup_3"), Relation("agent_0", "beside", "shelf_1")),
        agents=(AgentActivity("agent_0", activity, "move_to", '{"target": "dock_1"}', 1, 3),),
        observability=Observability.FULL)


def test_the_message_round_trip_keeps_every_field():
    state = scene()
    msg = world_state_msg(state, Time(sec=5, nanosec=7), "map")
    wire = deserialize_message(serialize_message(msg), WorldStateMsg)
    assert wire.header.frame_id == "map" and wire.header.stamp.sec == 5
    assert wire.relations[0].predicate == RelationMsg.PREDICATE_HOLDING
    back = world_state_from_msg(wire)
    assert back == state
    assert back.entity("cup_3").pose is None and not wire.entities[1].has_pose
    assert math.isclose(back.entity("agent_0").pose.yaw, 0.5)


def test_an_activitys_tracking_error_survives_the_round_trip_and_is_no_change():
    state = scene()
    measured = WorldState(state.world, state.episode, state.step, state.entities, state.relations,
                          (AgentActivity("agent_0", Activity.EXECUTING, "move_to", '{"target": "dock_1"}', 1, 3, 0.07),))
    back = world_state_from_msg(world_state_msg(measured, Time(), "map"))
    assert math.isclose(back.agents[0].tracking_error, 0.07, rel_tol=1e-6)
    assert math.isnan(world_state_from_msg(world_state_msg(state, Time(), "map")).agents[0].tracking_error)
    assert back == state and not changed(state, measured)        # a measurement, not a change of activity


def test_partial_observability_survives_the_round_trip():
    state = WorldState("real", 0, 0, (Entity("apple", "object", "unknown"),), observability=Observability.PARTIAL)
    assert world_state_from_msg(world_state_msg(state, Time(), "")) == state


def test_inconsistent_states_are_refused():
    with pytest.raises(ValueError, match="repeat"):
        WorldState("w", 0, 0, (Entity("a", "robot"), Entity("a", "object")))
    with pytest.raises(ValueError, match="relations"):
        WorldState("w", 0, 0, (Entity("a", "robot"),), (Relation("a", "holding", "ghost"),))
    with pytest.raises(ValueError, match="activities"):
        WorldState("w", 0, 0, (), (), (AgentActivity("a"),))
    for bad in (-0.1, math.inf):
        with pytest.raises(ValueError, match="tracking_error"):
            AgentActivity("a", tracking_error=bad)


class CountedId(str):
    """An id that counts how often it is compared for equality (how much work a check does)."""

    comparisons = 0

    def __eq__(self, other) -> bool:
        CountedId.comparisons += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_a_repeated_id_is_found_in_linear_time_and_named_briefly():
    n = 4000
    entities = [Entity(CountedId(f"e{i}"), "object") for i in range(n)] + [Entity(CountedId("e7"), "object")]
    CountedId.comparisons = 0
    with pytest.raises(ValueError, match="repeat") as refused:
        WorldState("w", 0, 0, tuple(entities))
    assert CountedId.comparisons < 10 * n  # ids.count() per id compared n^2 = 16 million times
    assert "e7" in str(refused.value) and len(str(refused.value)) < 200


@pytest.mark.parametrize("grow, reason", [
    (lambda m: m.entities.extend(EntityMsg(id=f"e{i}", type="object") for i in range(MAX_ENTITIES + 1)),
     "many_entities"),
    (lambda m: m.relations.extend(RelationMsg(subject="agent_0", predicate="near", object="cup_3")
                                  for _ in range(MAX_RELATIONS + 1)), "many_relations"),
    (lambda m: m.entities[0].attributes.extend(KeyValue(key=f"k{i}", value="v") for i in range(MAX_ATTRIBUTES + 1)),
     "many_attributes"),
    (lambda m: setattr(m.entities[1], "state", "x" * MAX_STATE_CHARS), "long_world_state"),
])
def test_a_state_larger_than_a_state_may_be_is_refused_by_its_reason(grow, reason):
    msg = world_state_msg(scene(), Time(), "map")
    grow(msg)
    with pytest.raises(InvalidInput) as refused:
        world_state_from_msg(msg)
    assert refused.value.reason == reason


def test_diff_names_what_changed():
    before, after = scene(cup_state="on_shelf", activity=Activity.WAITING), scene(cup_state="held")
    d = diff(before, after)
    assert d.changed == ("cup_3",) and d.agents_changed == ("agent_0",)
    assert not d.added and not d.removed and not d.relations_added
    assert not diff(after, scene(step=9))                      # the step alone is no change
    gone = WorldState("warehouse", 2, 3, after.entities, after.relations[1:], after.agents)
    assert diff(after, gone).relations_removed == (Relation("agent_0", "holding", "cup_3"),)
    assert changed(None, after) and changed(after, scene(cup_state="delivered")) and not changed(after, scene(step=4))
    other_episode = WorldState("warehouse", 3, 3, after.entities, after.relations, after.agents)
    assert changed(after, other_episode)


def test_a_world_publishes_each_step_and_on_change_only():
    publication = StatePublication()
    assert publication.due(scene(step=0))
    assert not publication.due(scene(step=0))                            # the same state again: nothing new
    assert publication.due(scene(step=0, activity=Activity.WAITING))     # a plan arrived between steps
    assert publication.due(scene(step=1, activity=Activity.WAITING))     # a new step, even unchanged
    assert publication.published == 3


def test_plan_progress_follows_the_executors_outcomes():
    progress = PlanProgress("arm_0")
    assert progress.activity() == AgentActivity("arm_0", Activity.IDLE)
    progress.plan([("pick", '{"object": "apple"}'), ("place", '{"object": "apple", "target": "bowl"}')])
    assert progress.activity() == AgentActivity("arm_0", Activity.EXECUTING, "pick", '{"object": "apple"}', 0, 2)
    assert len(progress.running()) == 2
    progress.outcome("place", True)                  # not the current step: ignored
    progress.outcome("pick", False)
    assert progress.activity().activity == Activity.FAILED and progress.running() == []
    progress.outcome("pick", True)
    assert progress.activity().action == "place" and progress.activity().activity == Activity.EXECUTING
    assert progress.running() == [("place", '{"object": "apple", "target": "bowl"}')]
    progress.outcome("place", True)
    assert progress.activity() == AgentActivity("arm_0", Activity.IDLE, index=2, plan_steps=2)
    progress.clear()
    assert progress.activity().plan_steps == 0


def test_a_task_is_lost_for_the_agents_assigned_to_it_only():
    def state(task_state: str, kind: str = TASK_TYPE) -> WorldState:
        return WorldState("textworld", 0, 1, (Entity("player", "player"), Entity("other", "player"),
                                              Entity("task_0", kind, task_state)),
                          (Relation("player", Predicate.ASSIGNED, "task_0"),))

    assert state(TASK_LOST).task_lost("player")
    assert not state(TASK_LOST).task_lost("other")  # not assigned to it
    assert not state("open").task_lost("player") and not state("won").task_lost("player")
    assert not state(TASK_LOST, kind="object").task_lost("player")  # only a task entity is lost
