"""QoS profiles of the BRACE topics, chosen once for every node.

Decisions, triggers, plans and call records are events that must not be lost
(reliable, keep a deep queue). Plans are also latched (transient local) so a
late-joining executor gets each agent's current plan. High-rate state is
best-effort: the next sample supersedes a lost one.
"""

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy


def _keep_last(depth: int, best_effort: bool = False, latched: bool = False) -> QoSProfile:
    """A keep-last profile of `depth`: reliable unless `best_effort`, volatile unless `latched` (transient local)."""
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST, depth=depth,
        reliability=ReliabilityPolicy.BEST_EFFORT if best_effort else ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE,
    )


EVENTS = _keep_last(200)
PLANS = _keep_last(64, latched=True)
STATE = _keep_last(20, best_effort=True)
WORLD_STATE = _keep_last(64, latched=True)
"""world_state: reliable and latched. Latched, so a module that starts late (a verifier, a memory) gets the
current state at once; reliable with a queue rather than depth 1, because its readers need every state, not only
the newest: the bag records each step, and a state-transition graph (GiG) built from it must not skip a step. A
late joiner receives up to 64 recent states in order and takes the last one as current."""
WORLD_INFO = _keep_last(1, latched=True)
"""world_info: reliable and latched, depth 1. Only the current episode's agents and action schema matter, and a
planner that starts late must get them at once."""
DIAGNOSTICS = _keep_last(10)
CLOCK = _keep_last(10)
"""/clock: reliable, so rclpy's best-effort time source and a reliable recorder both match."""
MARKERS = _keep_last(10)
"""RViz MarkerArray: reliable (RViz's default), the next array supersedes the last."""
ACTION_SERVICES = _keep_last(1000)
"""Replan's goal, cancel and result services: ROS's default keeps 10 requests, so a burst of goals lost the
oldest ones without an answer (8 of 20); a deep queue answers every goal of a burst."""
REPLAN_ACTION = {f"{service}_service_qos_profile": ACTION_SERVICES for service in ("goal", "result", "cancel")}
"""Keyword arguments of a Replan ActionClient or ActionServer: ACTION_SERVICES for its three services."""
INPUT_DEPTH = 1000
"""Samples an event subscription keeps until its node takes them (a burst beyond it is counted lost)."""
INPUTS = _keep_last(INPUT_DEPTH)
"""A node's subscription to an event topic: reliable, the last INPUT_DEPTH samples the node has not taken yet.
Not keep-all: under Fast DDS a keep-all reader holds at most ~5,000 samples, and a keep-last writer discards what
it cannot deliver, so a flood was lost without a count (20,000 samples at full speed into a 2 kHz reader: 5,178
taken; a 100,000-entry context burst: 7,212). What a flood overwrites leaves a gap in its publisher's sequence
numbers, which `counted_inputs.CountedInputs` counts on /diagnostics. Matches EVENTS publishers (history is not
part of QoS compatibility)."""
ROBOT_FEEDBACK = _keep_last(20)
"""An arm's joint_states / end_pose: reliable, so best-effort and reliable subscribers (RViz,
robot_state_publisher, the executor's STATE subscription) all match."""
ROBOT_COMMANDS = _keep_last(100, best_effort=True)
"""An arm's command subscriptions; matches reliable and best-effort publishers. The node takes every sample at
once and runs only the newest (a command is never executed late), counting each one it skips; the depth only
absorbs a burst while the taking callback waits for a thread (a depth of 1 overwrote samples before they were
taken, where nobody could count them)."""
SIM_COMMANDS = _keep_last(1)
"""Commands a bridge sends a simulator's robots (cmd_vel, joint_command): reliable, so Isaac Sim's default (reliable)
subscribers match as well as best-effort ones; the newest only."""
