"""The ee_monitor node over DDS: an arm stand-in (it publishes its end pose and applies every end-effector command it
gets) is driven at a keep-out box by an executor's commands through the monitor: stopped before the box, one
FAILURE_SAFETY_STOP, the gripper still passes, the next command away passes unchanged with no ERROR; a box from the
world state; disabled, it passes everything; its rules."""

from __future__ import annotations

import math

import pytest
from brace_msgs.msg import CollisionMonitorState, EndEffectorDelta, Entity, ExecutionOutcome, WorldState
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from geometry_msgs.msg import PoseStamped
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter

from brace_common import names, qos
from brace_common.names import DEFAULT_NAMESPACE as NS
from brace_common.testing import wait_for
from brace_common.vocabulary import Failure
from brace_safety.ee_monitor_node import EeMonitorNode

BOX = "post: 0.35 0.0 0.1 0.05 0.05 0.05"   # its face at x = 0.30
FACE_X = 0.30
HAZARD = 0.02


class Arm(Node):
    """An arm's end effector that applies each command's translation at once, and the executor beside it."""

    def __init__(self) -> None:
        super().__init__("arm_standin", namespace=NS)
        self.position = [0.2, 0.0, 0.1]
        self.grippers: list[float] = []
        self.received = 0
        self.pose = self.create_publisher(PoseStamped, names.END_POSE, qos.ROBOT_FEEDBACK)
        self.executor_out = self.create_publisher(EndEffectorDelta, names.EE_DELTA_CMD_NAV, qos.EVENTS)
        self.world = self.create_publisher(WorldState, names.WORLD_STATE, qos.WORLD_STATE)
        self.states: list[CollisionMonitorState] = []
        self.outcomes: list[ExecutionOutcome] = []
        self.diagnostics: list[DiagnosticStatus] = []
        self.create_subscription(EndEffectorDelta, names.EE_DELTA_CMD, self.on_cmd, qos.ROBOT_COMMANDS)
        self.create_subscription(CollisionMonitorState, names.COLLISION_MONITOR_STATE, self.states.append, qos.EVENTS)
        self.create_subscription(ExecutionOutcome, names.OUTCOMES, self.outcomes.append, qos.EVENTS)
        self.create_subscription(DiagnosticArray, "/diagnostics", lambda m: self.diagnostics.extend(
            s for s in m.status if "ee_monitor" in s.name), qos.DIAGNOSTICS)
        self.create_timer(0.02, self.publish_pose)

    def on_cmd(self, msg: EndEffectorDelta) -> None:
        t = msg.translation
        self.position = [p + d for p, d in zip(self.position, (t.x, t.y, t.z), strict=True)]
        self.grippers.append(msg.gripper)
        self.received += 1

    def publish_pose(self) -> None:
        msg = PoseStamped()
        msg.header.frame_id = "base_link"
        msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = self.position
        self.pose.publish(msg)

    def command(self, dx: float, gripper: float = math.nan, seen_by: EeMonitorNode | None = None) -> None:
        """One executor command; returns once the arm got what the monitor let through and (`seen_by`) the monitor
        sensed where it is now (a real executor commands every 0.2 s against a 200 Hz end pose; this one at once)."""
        before = self.received
        msg = EndEffectorDelta(gripper=gripper)
        msg.header.frame_id = "base_link"
        msg.translation.x = dx
        self.executor_out.publish(msg)
        wait_for(lambda: self.received > before, what="the command through the monitor")
        if seen_by is not None:
            wait_for(lambda: math.isclose(seen_by.monitor.sensed["arm_0"].position[0], self.position[0],
                                          abs_tol=1e-9), what="the monitor sensed the arm's new end pose")


def monitor(ros, **params) -> EeMonitorNode:
    params = {"static_obstacles": [BOX], "diagnostics_period_s": 0.1, **params}
    node = EeMonitorNode(namespace=NS, parameter_overrides=[
        Parameter(k, Parameter.Type.NOT_SET) if v == [] else Parameter(k, value=v) for k, v in params.items()])
    assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS, node.last_error
    assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
    return ros.add(node)


def drive_at_the_box(arm: Arm, node: EeMonitorNode, commands: int = 15) -> None:
    wait_for(lambda: node.monitor.sensed.get("arm_0") is not None, what="the end pose sensed")
    wait_for(lambda: arm.executor_out.get_subscription_count() > 0, what="the monitor's command subscription")
    for _ in range(commands):
        arm.command(0.01, seen_by=node)


def test_commands_at_a_keep_out_box_are_slowed_to_the_stop_zones_edge(ros):
    node = monitor(ros)
    arm = ros.add(Arm())
    drive_at_the_box(arm, node)
    assert FACE_X - arm.position[0] >= HAZARD - 1e-3, arm.position   # the approach keeps it outside the stop zone
    wait_for(lambda: any(s.action == CollisionMonitorState.ACTION_APPROACH and s.obstacle == "post"
                         for s in arm.states), what="the approach's state")
    assert node.monitor.counts["approaches.arm_0"] >= 1


def test_a_command_into_the_stop_zone_is_stopped_and_a_safe_one_then_passes(ros):
    node = monitor(ros, zones=["stop"])   # the stop zone alone: commands pass until it holds
    arm = ros.add(Arm())
    drive_at_the_box(arm, node)
    assert FACE_X - arm.position[0] >= HAZARD - 0.01 - 1e-6, arm.position   # one command into the zone at most
    wait_for(lambda: any(s.action == CollisionMonitorState.ACTION_STOP and s.obstacle == "post" for s in arm.states),
             what="the stop's state")
    wait_for(lambda: len(arm.outcomes) == 1, what="one stop outcome")
    assert arm.outcomes[0].failure == int(Failure.SAFETY_STOP) and arm.outcomes[0].action == "ee_delta"
    assert node.monitor.counts["stops.arm_0"] == 1
    held_at = arm.position[0]
    arm.command(0.01, gripper=0.03, seen_by=node)        # still into the box: no motion, but the gripper opens
    assert arm.position[0] == held_at and arm.grippers[-1] == 0.03
    arm.command(-0.02, seen_by=node)                     # away from the box: unchanged
    assert arm.position[0] == pytest.approx(held_at - 0.02)
    wait_for(lambda: arm.states[-1].action == CollisionMonitorState.ACTION_NONE, what="the state back to none")
    wait_for(lambda: len(arm.diagnostics) > 3, what="diagnostics")
    assert all(s.level != DiagnosticStatus.ERROR for s in arm.diagnostics)
    assert len(arm.outcomes) == 1


def test_a_box_the_world_state_reports_is_kept_out_of(ros):
    node = monitor(ros, static_obstacles=[], keep_out_types=["obstacle"], keep_out_half_extents_m=[0.05, 0.05, 0.05])
    arm = ros.add(Arm())
    entity = Entity(id="crate", type="obstacle", has_pose=True)
    entity.pose.position.x, entity.pose.position.z = 0.35, 0.1
    arm.world.publish(WorldState(world="pickfruit", entities=[entity, Entity(id="bowl", type="bowl", has_pose=True)]))
    wait_for(lambda: [b.id for b in node.boxes] == ["crate"], what="the world's keep-out box")
    drive_at_the_box(arm, node)
    assert FACE_X - arm.position[0] >= HAZARD - 1e-3, arm.position
    wait_for(lambda: any(s.obstacle == "crate" for s in arm.states), what="a state naming the crate")


def test_disabled_it_passes_every_command(ros):
    node = monitor(ros, enable=False)
    arm = ros.add(Arm())
    drive_at_the_box(arm, node)
    assert arm.position[0] == pytest.approx(0.35)   # into the box
    assert not arm.outcomes


@pytest.mark.parametrize("name, value", [("agents", ["arm_0", "arm_1"]), ("keep_out_half_extents_m", [0.1, 0.1]),
                                         ("cmd_out_topic", "ee_delta_cmd_nav"), ("hazard_distance_m", 0.005)])
def test_a_bad_parameter_fails_configure_naming_it(ros, name, value):
    node = EeMonitorNode(namespace=NS, parameter_overrides=[Parameter(name, value=value)])
    assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
    assert name in node.last_error
    node.destroy_node()
