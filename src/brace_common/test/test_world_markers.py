"""Replanning events and loop triggers as RViz markers."""

from __future__ import annotations

from builtin_interfaces.msg import Time
from visualization_msgs.msg import Marker

from brace_common.world_markers import ORANGE, CallEvents


def test_loops_are_orange_discs_where_the_agent_was_and_calls_keep_their_colours():
    events = CallEvents(keep=2)
    events.add(1.0, 2.0, True, "agent_0", 900, 300, 120.0, 500.0)
    for x in (3.0, 4.0, 5.0):
        events.add_loop(x, 1.0, "agent_1")
    out = events.markers("map", Time(), (0.0, 0.0)).markers
    loops = [m for m in out if m.ns == "loops"]
    assert [m.pose.position.x for m in loops] == [4.0, 5.0]          # the newest `keep`
    assert all(m.color == ORANGE and m.type == Marker.CYLINDER and m.text == "loop agent_1" for m in loops)
    assert len({m.id for m in loops}) == 2
    assert [m.ns for m in out if m.ns != "loops"] == ["replans", "last_call"]
