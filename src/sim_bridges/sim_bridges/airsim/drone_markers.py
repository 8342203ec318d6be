"""RViz markers of the drone intersection (ENU, as ROS frames are): the box, lanes, goals, drones, their moves.

Pure message construction; replanning events come from brace_common.world_markers.CallEvents as for the warehouse.
"""

from __future__ import annotations

from builtin_interfaces.msg import Time
from geometry_msgs.msg import Point
from std_msgs.msg import ColorRGBA
from visualization_msgs.msg import Marker, MarkerArray

from brace_common.world_markers import agent_colour, marker

from .drone_feed import ned_to_enu
from .drone_world import DroneWorld


def _point(ned: tuple[float, float, float]) -> Point:
    x, y, z = ned_to_enu(ned)
    return Point(x=float(x), y=float(y), z=float(z))


def drone_markers(world: DroneWorld, frame: str, stamp: Time) -> MarkerArray:
    """The intersection box, every drone's lane and goal, the drones (with labels) and their current moves."""
    out = MarkerArray()
    box = world.cfg.box_m
    area = marker("intersection", 0, Marker.CUBE, frame, stamp, ColorRGBA(r=0.9, g=0.8, b=0.1, a=0.25),
                   (2 * box, 2 * box, 0.05))
    out.markers.append(area)
    for i, (name, d) in enumerate(sorted(world.drones.items())):
        colour, faint = agent_colour(i), agent_colour(i, 0.35)
        lane = marker("lanes", i, Marker.LINE_STRIP, frame, stamp, faint, (0.15, 0.0, 0.0))
        lane.points = [_point(d.route.start), _point(d.route.goal)]
        goal = marker("goals", i, Marker.CYLINDER, frame, stamp, faint, (2 * world.cfg.goal_tolerance_m,) * 2 + (0.1,))
        goal.pose.position = _point(d.route.goal)
        drone = marker("drones", i, Marker.SPHERE, frame, stamp, colour, (1.0, 1.0, 0.5))
        drone.pose.position = _point(d.position)
        label = marker("drone_labels", i, Marker.TEXT_VIEW_FACING, frame, stamp, colour, (1.0, 1.0, 1.0))
        label.pose.position = _point((d.position[0], d.position[1], d.position[2] - 1.5))
        label.text = f"{name}{' (done)' if d.done else ''}"
        move = marker("moves", i, Marker.LINE_STRIP, frame, stamp, colour, (0.2, 0.0, 0.0))
        if d.segment is not None:
            move.points = [_point(d.position), _point(d.segment[1])]
        else:
            move.action = Marker.DELETE
        out.markers.extend([lane, goal, drone, label, move])
    return out
