"""QoS profiles of the BRACE topics, chosen once for every node.

Decisions, triggers, plans and call records are events that must not be lost
(reliable, keep a deep queue). Plans are also latched (transient local) so a
late-joining executor gets each agent's current plan. High-rate state is
best-effort: the next sample supersedes a lost one.
"""

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

EVENTS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=200,
    reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE,
)
PLANS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=64,
    reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL,
)
STATE = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=20,
    reliability=ReliabilityPolicy.BEST_EFFORT, durability=DurabilityPolicy.VOLATILE,
)
DIAGNOSTICS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=10,
    reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE,
)
CLOCK = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=10,
    reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE,
)
"""/clock: reliable, so rclpy's best-effort time source and a reliable recorder both match."""
MARKERS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=10,
    reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE,
)
"""RViz MarkerArray: reliable (RViz's default), the next array supersedes the last."""
