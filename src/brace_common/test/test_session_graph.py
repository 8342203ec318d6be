"""GiG's session graph per agent: states as nodes, actions as edges, revisits as loops."""

from __future__ import annotations

import pytest

from brace_common.session_graph import SessionGraph, SessionGraphs
from brace_common.vocabulary import Activity
from brace_common.world_state import AgentActivity, Entity, Pose, WorldState


def test_an_exact_revisit_is_a_loop_with_its_path():
    g = SessionGraph("a")
    assert g.visit(0, "A", doing="go(B)") is None
    assert g.visit(1, "B", doing="go(A)") is None
    loop = g.visit(2, "A", doing="go(B)")
    assert loop is not None and (loop.since_step, loop.step, loop.actions) == (0, 2, ("go(B)", "go(A)"))
    assert "step 0" in loop.line() and "go(B); go(A)" in loop.line()
    assert g.loop is loop
    assert g.visit(3, "C") is None and g.loop is None


def test_the_loop_line_names_an_action_run_across_several_states_once():
    g = SessionGraph("a")
    for step, (key, doing) in enumerate([("A", "go(C)"), ("B", "go(C)"), ("C", "go(A)"), ("D", "go(A)")]):
        assert g.visit(step, key, doing=doing) is None
    loop = g.visit(4, "A")
    assert loop is not None and loop.length == 4  # the path keeps every edge; the line names each call once
    assert loop.line().endswith("brought it back: go(C); go(A)"), loop.line()
    assert "go(C); go(C)" in loop.detail()


def test_waiting_in_a_state_is_not_a_loop_and_its_newest_activity_labels_the_edge():
    g = SessionGraph("a")
    g.visit(0, "A", doing="wait()")
    assert g.visit(1, "A", doing="go(B)") is None
    assert g.visit(2, "B") is None
    assert [v.action for v in g.path] == ["go(B)", ""]
    assert (g.path[0].step, g.path[0].last_step) == (0, 1)


def test_the_latest_earlier_visit_is_the_loops_start():
    g = SessionGraph("a")
    for step, key in enumerate("ABACA"):
        loop = g.visit(step, key, doing=f"to_{step}")
    assert loop is not None and loop.since_step == 2 and loop.length == 2


def test_embeddings_within_tau_match_and_beyond_do_not():
    g = SessionGraph("a", tau=0.1)
    g.visit(0, "A", z=(0.0, 0.0))
    g.visit(1, "B", z=(1.0, 0.0))
    loop = g.visit(2, "C", z=(0.05, 0.0))
    assert loop is not None and loop.distance == pytest.approx(0.05)
    assert g.visit(3, "D", z=(0.5, 0.5)) is None
    assert SessionGraph("b").visit(0, "A", z=(0.0,)) is None
    with pytest.raises(ValueError, match="tau"):
        SessionGraph("c", tau=-1.0)


def world(step: int, x: int, episode: int = 0) -> WorldState:
    return WorldState("w", episode, step, (Entity("a", "robot", pose=Pose.planar(x, 0)),),
                      agents=(AgentActivity("a", Activity.EXECUTING, "move", '{"x": 1}'),))


def test_graphs_follow_world_states_and_restart_with_an_episode():
    graphs = SessionGraphs(hops=2, cell_m=1.0)
    assert graphs.observe(world(0, 0)) == [] and graphs.observe(world(1, 1)) == []
    loops = graphs.observe(world(2, 0))
    assert [loop.actions for loop in loops] == [('move({"x": 1})', 'move({"x": 1})')]
    assert graphs.loop_now("a") is loops[0]
    assert graphs.observe(world(0, 1, episode=1)) == [] and len(graphs.graphs["a"].path) == 1
    assert graphs.loop_now("nobody") is None


def test_an_embedder_gives_each_agent_its_z():
    seen = []

    def embed(views):
        seen.extend(v.agent_id for v in views)
        return [(float(v.cell[0]),) for v in views]

    graphs = SessionGraphs(tau=0.5, embed=embed)
    graphs.observe(world(0, 0))
    assert seen == ["a"] and graphs.graphs["a"].path[0].z == (0.0,)
