"""RViz markers every world draws the same way: a marker helper, a colour per agent, and the replanning events
(CallEvents: discs coloured by SLO met (green) or missed (red) where the agent was, and a label with tokens and
latency of the last call; orange rings with the agent's name where a loop trigger found an agent back in a state it
had held). Pure message construction (no node)."""

from __future__ import annotations

from collections import deque

from builtin_interfaces.msg import Duration, Time
from geometry_msgs.msg import Point
from std_msgs.msg import ColorRGBA
from visualization_msgs.msg import Marker, MarkerArray

GREEN, RED = ColorRGBA(r=0.1, g=0.8, b=0.2, a=0.9), ColorRGBA(r=0.9, g=0.1, b=0.1, a=0.9)
ORANGE = ColorRGBA(r=1.0, g=0.55, b=0.0, a=0.9)
AGENT_COLOURS = [(0.2, 0.4, 1.0), (1.0, 0.6, 0.0), (0.6, 0.2, 0.8), (0.0, 0.7, 0.7),
                 (0.9, 0.3, 0.5), (0.5, 0.5, 0.1), (0.3, 0.8, 0.3), (0.6, 0.3, 0.1)]


def marker(ns: str, mid: int, kind: int, frame: str, stamp: Time, colour: ColorRGBA, scale=(0.3, 0.3, 0.3)) -> Marker:
    """A marker of namespace `ns` and id `mid` that stays until replaced (identity orientation)."""
    m = Marker(ns=ns, id=mid, type=kind, action=Marker.ADD, color=colour)
    m.header.frame_id, m.header.stamp = frame, stamp
    m.scale.x, m.scale.y, m.scale.z = scale
    m.pose.orientation.w = 1.0
    m.lifetime = Duration(sec=0)
    return m


def agent_colour(index: int, alpha: float = 1.0) -> ColorRGBA:
    """A distinct colour per agent index."""
    r, g, b = AGENT_COLOURS[index % len(AGENT_COLOURS)]
    return ColorRGBA(r=r, g=g, b=b, a=alpha)


class CallEvents:
    """The last `keep` replanning events, drawn where the agent was when its call returned."""

    def __init__(self, keep: int = 30):
        self.events: deque = deque(maxlen=keep)
        self.loops: deque = deque(maxlen=keep)
        self.sequence = 0
        self.loop_sequence = 0
        self.last_label = ""

    def add(self, x: float, y: float, slo_met: bool, agent: str, tokens_before: int, tokens_after: int,
            latency_ms: float, slo_ms: float) -> None:
        """Remember one finished call."""
        self.sequence += 1
        self.events.append((self.sequence, x, y, slo_met))
        verdict = "met" if slo_met else "MISSED"
        self.last_label = (f"last call {agent}: {tokens_before}->{tokens_after} tokens, "
                           f"{latency_ms:.0f} ms (SLO {slo_ms:.0f} ms {verdict})")

    def add_loop(self, x: float, y: float, agent: str) -> None:
        """Remember one loop trigger of `agent` at (x, y)."""
        self.loop_sequence += 1
        self.loops.append((self.loop_sequence, x, y, agent))

    def markers(self, frame: str, stamp: Time, label_at: tuple[float, float]) -> MarkerArray:
        """Event discs, loop rings and the label."""
        out = MarkerArray()
        for seq, x, y, agent in self.loops:
            ring = marker("loops", seq % self.loops.maxlen, Marker.CYLINDER, frame, stamp, ORANGE, (0.9, 0.9, 0.02))
            ring.pose.position = Point(x=x, y=y, z=0.05)
            ring.text = f"loop {agent}"
            out.markers.append(ring)
        for seq, x, y, met in self.events:
            m = marker("replans", seq % self.events.maxlen, Marker.CYLINDER, frame, stamp, GREEN if met else RED,
                        (0.4, 0.4, 0.05))
            m.pose.position = Point(x=x, y=y, z=1.2)
            out.markers.append(m)
        if self.last_label:
            label = marker("last_call", 0, Marker.TEXT_VIEW_FACING, frame, stamp,
                            ColorRGBA(r=1.0, g=1.0, b=1.0, a=1.0), (0.4, 0.4, 0.4))
            label.pose.position = Point(x=label_at[0], y=label_at[1], z=2.0)
            label.text = self.last_label
            out.markers.append(label)
        return out
