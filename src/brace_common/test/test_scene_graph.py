"""An agent's scene graph (GiG SG_t) cut from a WorldState, and its canonical key."""

from __future__ import annotations

import pytest

from brace_common.scene_graph import agent_view
from brace_common.world_state import Entity, Pose, Relation, WorldState


def state(cell=(1, 2), holding: bool = False, near: bool = False, box_state: str = "on_shelf",
          relations_order: int = 1) -> WorldState:
    entities = (Entity("agent_0", "robot", pose=Pose.planar(*cell)), Entity("agent_1", "robot", pose=Pose.planar(5, 5)),
                Entity("box", "object", "held" if holding else box_state), Entity("shelf_0", "shelf"),
                Entity("dock_0", "dock"), Entity("task_0", "task", "open"), Entity("far", "object", "on_shelf"),
                Entity("shelf_9", "shelf"))
    relations = [Relation("agent_0", "assigned", "task_0"), Relation("task_0", "concerns", "box"),
                 Relation("task_0", "target", "dock_0"), Relation("far", "on", "shelf_9")]
    relations.append(Relation("agent_0", "holding", "box") if holding else Relation("box", "on", "shelf_0"))
    if near:
        relations.append(Relation("agent_0", "near", "agent_1"))
    return WorldState("warehouse", 0, 3, entities, tuple(relations[::relations_order]))


def test_the_view_holds_what_the_agents_relations_reach_and_not_the_rest():
    view = agent_view(state(), "agent_0", hops=2)
    assert [n.id for n in view.nodes] == ["agent_0", "box", "dock_0", "task_0"]
    assert ("task_0", "concerns", "box") in view.edges
    assert view.cell == (1, 2, 0)
    assert view.edge_index() and all(0 <= i < 4 and 0 <= j < 4 for i, j in view.edge_index())


def test_three_hops_reach_the_shelf_the_object_stands_on():
    assert "shelf_0" in [n.id for n in agent_view(state(), "agent_0", hops=3).nodes]
    whole = agent_view(state(), "agent_0", hops=0)
    assert "far" in [n.id for n in whole.nodes] and "agent_1" not in [n.id for n in whole.nodes]
    assert ("far", "on", "shelf_9") in whole.edges


def test_the_key_is_canonical_and_tells_states_apart():
    key = agent_view(state(), "agent_0").key()
    assert key == agent_view(state(relations_order=-1), "agent_0").key()      # order of relations is not state
    assert key == agent_view(state(near=True), "agent_0").key()               # a teammate passing by is not
    assert key != agent_view(state(cell=(2, 2)), "agent_0").key()
    assert key != agent_view(state(holding=True), "agent_0").key()
    assert key != agent_view(state(box_state="placed"), "agent_0").key()
    assert key == agent_view(state(cell=(1.2, 1.9)), "agent_0").key()         # the same cell
    assert key != agent_view(state(cell=(1.2, 1.9)), "agent_0", cell_m=0.1).key()
    assert agent_view(state(cell=(1.2, 1.9)), "agent_0", cell_m=0.0).cell == ()


def test_node_texts_name_type_id_and_state():
    texts = agent_view(state(), "agent_0").node_texts()
    assert "object box on_shelf" in texts and "robot agent 0" in texts


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="hops"):
        agent_view(state(), "agent_0", hops=-1)
    with pytest.raises(KeyError):
        agent_view(state(), "agent_7")
