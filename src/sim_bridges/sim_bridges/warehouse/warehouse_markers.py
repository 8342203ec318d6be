"""RViz markers of the embedded warehouse: map, agents, current plan paths, replanning events, last call.

Pure message construction (no node): `world_markers` for the map, the agents and
their plans; the replanning events come from brace_common.world_markers.CallEvents.
"""

from __future__ import annotations

from builtin_interfaces.msg import Time
from geometry_msgs.msg import Point
from std_msgs.msg import ColorRGBA
from visualization_msgs.msg import Marker, MarkerArray

from brace_common.world_markers import agent_colour, marker

from .warehouse_world import Warehouse


def world_markers(world: Warehouse, frame: str, stamp: Time) -> MarkerArray:
    """Shelves, docks, agents (with what they hold) and each agent's remaining move path."""
    out = MarkerArray()
    grey, blue = ColorRGBA(r=0.5, g=0.5, b=0.5, a=1.0), ColorRGBA(r=0.2, g=0.6, b=1.0, a=0.6)
    for i, (name, (x, y)) in enumerate(sorted(world.shelves.items())):
        m = marker("shelves", i, Marker.CUBE, frame, stamp, grey, (0.9, 0.9, 0.6))
        m.pose.position = Point(x=float(x), y=float(y), z=0.3)
        m.text = name
        out.markers.append(m)
    for i, (name, (x, y)) in enumerate(sorted(world.docks.items())):
        m = marker("docks", i, Marker.CUBE, frame, stamp, blue, (0.9, 0.9, 0.05))
        m.pose.position = Point(x=float(x), y=float(y), z=0.0)
        m.text = name
        out.markers.append(m)
    for i, (name, a) in enumerate(sorted(world.agents.items())):
        m = marker("agents", i, Marker.SPHERE, frame, stamp, agent_colour(i), (0.6, 0.6, 0.6))
        m.pose.position = Point(x=float(a.pos[0]), y=float(a.pos[1]), z=0.3)
        out.markers.append(m)
        label = marker("agent_labels", i, Marker.TEXT_VIEW_FACING, frame, stamp, agent_colour(i), (0.3, 0.3, 0.3))
        label.pose.position = Point(x=float(a.pos[0]), y=float(a.pos[1]), z=0.9)
        label.text = f"{name}{' +' + a.holding if a.holding else ''}"
        out.markers.append(label)
        path = marker("plan", i, Marker.LINE_STRIP, frame, stamp, agent_colour(i, 0.7), (0.08, 0.0, 0.0))
        pos = a.pos
        path.points.append(Point(x=float(pos[0]), y=float(pos[1]), z=0.1))
        for step in a.plan[a.cursor:]:
            target = step.parameters.get("target", "") if step.action == "move_to" else ""
            if target in world.shelves or target in world.docks or target in world.parks:
                route = world.path(pos, world.access(target)) or []
                path.points.extend(Point(x=float(c[0]), y=float(c[1]), z=0.1) for c in route)
                pos = world.access(target)
        if len(path.points) < 2:
            path.action = Marker.DELETE
        out.markers.append(path)
    return out
