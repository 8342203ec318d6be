"""isaac_bridge lifecycle node: robots in a running Isaac Sim, through the topics its ROS 2 bridge speaks.

Topics, readiness, safety and parameters: docs/isaac_sim.md and docs/nodes.md. The robots' state, executors and holds
live in isaac_fleet.IsaacFleet; this node turns messages, parameters and transitions into calls on it.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Optional

from brace_msgs.msg import Plan
from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.duration import Duration
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn
from sensor_msgs.msg import CameraInfo, Image, JointState

from brace_common import names, qos
from brace_common.clock import seconds_of, steady_timer
from brace_common.config import ConfigError
from brace_common.counters import Health
from brace_common.episode import EpisodeResult
from brace_common.lifecycle import ReleasingLifecycleNode, serialized
from brace_common.params import declare_parameters, read_config, reject_undeclared
from brace_common.spin import spin_node
from brace_common.validation import InvalidInput
from brace_common.world_node import WorldNode

from . import isaac_contract as contract
from . import isaac_feed as feed
from .isaac_config import IsaacBridgeConfig
from .isaac_contract import RobotKind, RobotSpec
from .isaac_fleet import EPISODE_OVER, IsaacFleet, bridge_counters, load_schema
from .isaac_skills import Command, Outcome

WORLD = "isaac_sim"
STACK_TOPICS = ("context", "states", "outcomes", "episode", "world_states", "world_info")
"""The stack's topics (WorldPublishers attributes) configure creates and cleanup destroys."""
EXIT_ACK_S = 1.0
"""How long the exiting bridge waits for the simulator to acknowledge each robot's hold."""
SUBSCRIBED = {contract.ODOM: Odometry, contract.JOINT_STATES: JointState, contract.RGB: Image,
              contract.CAMERA_INFO_ROLE: CameraInfo}
"""The message type of each contract role the bridge reads."""


class IsaacBridgeNode(WorldNode, ReleasingLifecycleNode):
    """Thin lifecycle shell: Isaac's topics -> the fleet -> commands, outcomes, context and diagnostics."""

    world_name = WORLD

    def __init__(self, **kwargs) -> None:
        super().__init__("isaac_bridge", **kwargs)
        self.config: Optional[IsaacBridgeConfig] = None
        self.fleet: Optional[IsaacFleet] = None
        self.cmd_pubs: dict[str, object] = {}
        self.active = False
        self.activated_at = time.monotonic()
        self.counts = bridge_counters()
        self._reported_rejections = 0
        self.group = MutuallyExclusiveCallbackGroup()  # every callback of the node, one at a time
        self.init_world(("diagnostics",), episodes=1, seed=None)  # one episode a configuration, unseeded
        declare_parameters(self, IsaacBridgeConfig, enforce_ranges=False)  # checked at configure (read_config)
        period = self.get_parameter("diagnostics_period_s").value
        steady_timer(self, period if isinstance(period, float) and 0.05 <= period <= 60.0 else 1.0,
                     self.publish_diagnostics, self.group)

    # ------------------------------------------------------------------ lifecycle

    @serialized
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Validate the parameters and the action schema, then create the robots' and the stack's topics."""
        try:
            cfg = read_config(self, IsaacBridgeConfig)
            reject_undeclared(self)
            schema = load_schema(cfg)
        except ConfigError as exc:
            self.last_error = f"configure failed: {exc}"
            self.get_logger().error(self.last_error)
            return TransitionCallbackReturn.FAILURE
        self.config, self.last_error = cfg, ""
        self.book.rearm()  # a new episode once the contract is live again
        self.fleet = fleet = IsaacFleet(cfg, schema, self.counts)
        for name, spec in fleet.robots.items():  # an exception: the lifecycle base says why and releases
            for t in fleet.contract[name]:
                if t.subscribed:
                    self._subscribe(name, t.role, t.topic)
                else:
                    msg_type = Twist if spec.kind == RobotKind.MOBILE else JointState
                    self.cmd_pubs[name] = self.configured(self.create_publisher(msg_type, t.topic, qos.SIM_COMMANDS))
        self.out.open(STACK_TOPICS, keep=self.configured)
        self.configured(self.subscribe_plans(self.on_plan, callback_group=self.group))
        for period, callback in ((cfg.control_period_s, self.control), (cfg.agent_state_period_s,
                                                                        self.publish_agent_states),
                                 (cfg.observe_period_s, self.publish_observations)):
            self.configured(steady_timer(self, period, callback, self.group))
        self.state_label = "inactive"
        self.get_logger().info(f"configured for {', '.join(f'{s.name} ({s.kind.value})' for s in fleet.robots.values())}"
                               f"; waiting for {len(fleet.liveness.last)} contract topics")
        return TransitionCallbackReturn.SUCCESS

    @serialized
    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Start executing plans (the episode starts once the contract topics are live)."""
        self.active, self.activated_at, self.state_label = True, time.monotonic(), "active"
        return super().on_activate(state)

    @serialized
    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Hold every robot and stop executing."""
        self.safe_stop("deactivate")
        self.active, self.state_label = False, "inactive"
        return super().on_deactivate(state)

    @serialized
    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Hold every robot, then release."""
        self.safe_stop("shutdown")
        return super().on_shutdown(state)

    def _release(self) -> None:
        """Cleanup and shutdown: hold the robots and forget them (the base then destroys configure's topics)."""
        self.safe_stop("cleanup")
        self.active = False
        self.out.forget(STACK_TOPICS)
        self.cmd_pubs.clear()
        self.fleet, self.config = None, None

    def destroy_node(self) -> None:
        """Hold the robots while the context is still valid, then destroy the node."""
        self.safe_stop("exit")
        super().destroy_node()

    def _subscribe(self, robot: str, role: str, topic: str) -> None:
        """The subscription of one contract topic (images are counted for liveness, never decoded: raw)."""
        if role not in SUBSCRIBED:
            raise ValueError(f"no subscription for contract role '{role}'")
        self.configured(self.create_subscription(SUBSCRIBED[role], topic,
                                                 lambda msg: self.on_input(robot, role, topic, msg), qos.STATE,
                                                 callback_group=self.group, raw=role == contract.RGB))

    # ------------------------------------------------------------------ inputs

    def on_input(self, robot: str, role: str, topic: str, msg) -> None:
        """One sample of a robot's contract topic (a malformed one is rejected and does not count as alive)."""
        fleet, mono = self.fleet, time.monotonic()
        if fleet is None or robot not in fleet.robots:
            return  # cleaned up while this message was on its way
        try:
            if role == contract.ODOM:
                p, q = msg.pose.pose.position, msg.pose.pose.orientation
                lin, ang = msg.twist.twist.linear, msg.twist.twist.angular
                fleet.odom(robot, topic, (p.x, p.y, p.z), (q.x, q.y, q.z, q.w), (lin.x, lin.y, lin.z),
                           (ang.x, ang.y, ang.z), mono)
            elif role == contract.JOINT_STATES:
                fleet.joint_states(robot, topic, msg.name, msg.position, mono)
            elif role == contract.RGB:
                fleet.image(robot, topic, mono)
            else:
                fleet.camera_info(robot, topic, int(msg.width), int(msg.height), msg.header.frame_id, mono)
        except InvalidInput as exc:
            self.rejections.reject(role, exc, robot)

    @serialized
    def on_plan(self, msg: Plan) -> None:
        """Validate a plan whole against the schema for its robot's kind and hand it to the robot's executor."""
        fleet = self.fleet
        calls = self.take_plan(msg, self.active and fleet is not None, lambda agent: agent in fleet.robots,
                               lambda: fleet.plan_current(seconds_of(msg.header.stamp), self.done), fleet.validate)
        if calls is None:
            return
        fleet.set_plan(msg.agent_id, msg.plan_id, calls)
        self._publish_world_state()
        self.book.count_plan()
        self.get_logger().info(f"{msg.agent_id}: plan {msg.plan_id[:48]}: {', '.join(c.text() for c in calls)}")

    # ------------------------------------------------------------------ control

    def now_s(self) -> float:
        """ROS time in seconds (Isaac's /clock under use_sim_time)."""
        return self.get_clock().now().nanoseconds * 1e-9

    def missing(self, now: float) -> list[str]:
        """Contract topics that have not delivered yet (and /clock, with use_sim_time, while ROS time is 0)."""
        clock = now == 0.0 and self.get_parameter("use_sim_time").value
        return self.fleet.liveness.missing() + ([names.CLOCK] if clock else [])

    @serialized
    def control(self) -> None:
        """Start the episode once the contract is live; then run every robot's executor, or hold it."""
        fleet = self.fleet
        if not self.active or fleet is None:
            return
        now = self.now_s()
        if fleet.judge is None:
            missing = self.missing(now)
            if missing:
                self.counts["ticks_waiting_for_contract"] += 1
                self.get_logger().info(f"waiting for Isaac Sim's topics: {', '.join(missing)}",
                                       throttle_duration_sec=10.0)
                return
            self.start_episode(now)
        tick = fleet.tick(now, time.monotonic(), self.done)
        for robot, why in tick.held:
            self._log_hold(robot, why)
        for robot in tick.resumed:
            self.get_logger().info(f"{robot}: contract topics live again, executing")
        for spec, command in tick.commands:
            self.send(spec, command)
        for outcome in tick.outcomes:
            self._publish_outcome(outcome)
        for robot, goal in tick.goals:
            self.publish_entries([feed.task_done_entry(goal, fleet.ticks)])
            self.get_logger().info(f"{robot}: task goal reached ({goal.text()})")
        if tick.finished:
            self.end_episode(now)

    def _log_hold(self, robot: str, why: str) -> None:
        # one call site per severity: rclpy refuses a site that logs at two
        if why == EPISODE_OVER:
            self.get_logger().info(f"{robot}: holding ({why})")
        else:
            self.get_logger().error(f"{robot}: holding ({why})")

    def send(self, spec: RobotSpec, command: Command) -> None:
        """Publish a command on the robot's cmd_vel / joint_command."""
        pub = self.cmd_pubs.get(spec.name)
        if pub is None:
            return
        if spec.kind == RobotKind.MOBILE and command.twist is not None:
            msg = Twist()
            msg.linear.x, msg.angular.z = float(command.twist[0]), float(command.twist[1])
            pub.publish(msg)
        elif spec.kind == RobotKind.ARM and command.joints is not None:
            msg = JointState(name=list(self.config.joint_names), position=[float(v) for v in command.joints])
            msg.header.stamp = self.get_clock().now().to_msg()
            pub.publish(msg)

    def safe_stop(self, why: str) -> None:
        """Zero velocity to every base and the measured joints to every arm (nothing raised: this runs on exit).

        On exit the hold is waited for until the simulator acknowledged it (at most EXIT_ACK_S per robot): a process
        that ends right after publishing may take an unsent sample with it.
        """
        for spec, command in (self.fleet.hold_commands() if self.fleet is not None else []):
            try:
                self.send(spec, command)
                pub = self.cmd_pubs.get(spec.name)
                if why == "exit" and pub is not None and not pub.wait_for_all_acked(Duration(seconds=EXIT_ACK_S)):
                    self.get_logger().warning(f"{spec.name}: the hold on exit was not acknowledged in {EXIT_ACK_S} s")
            except Exception as exc:  # noqa: BLE001 - a publisher of a dying context; the next robot still matters
                self.get_logger().warning(f"{spec.name}: could not send the hold on {why}: {exc}")

    # ------------------------------------------------------------------ episode

    def start_episode(self, now: float) -> None:
        """EVENT_START, then the scene, the tasks and the constraints."""
        entries = self.fleet.start(now)
        self.announce_start()
        self.publish_entries(entries)
        self.get_logger().info(f"episode started at {now:.2f} s: every contract topic is live")

    def end_episode(self, now: float) -> None:
        """EVENT_END with the verdict (no oracle: no agreement); every robot is held from now on."""
        result = EpisodeResult.of(self.fleet.end(), self.episode, 0, self.plans)
        self.announce_end(result)
        self.get_logger().info(f"episode ended after {now - self.fleet.episode_start_s:.1f} s: success={result.success} "
                               f"goals {result.delivered}/{result.tasks} plans={self.plans}")

    def progress(self) -> str:
        """Where the episode is (brace-run's progress line)."""
        return self.fleet.progress(self.now_s()) if self.fleet is not None else "waiting for Isaac Sim"

    def num_agents(self) -> int:
        """The robots."""
        return len(self.fleet.robots) if self.fleet is not None else 0

    def world_agents(self) -> list[str]:
        """The robots."""
        return list(self.fleet.robots) if self.fleet is not None else []

    def world_schema(self) -> Optional[dict]:
        """The skill schema the bridge executes (action_schema_file)."""
        return self.fleet.schema.to_dict() if self.fleet is not None else None

    # ------------------------------------------------------------------ outputs

    def _publish_outcome(self, outcome: Outcome) -> None:
        self.counts["outcomes_succeeded" if outcome.success else "outcomes_failed"] += 1
        self.out.outcome(outcome.agent_id, self.fleet.ticks, outcome.call.action, outcome.success,
                         outcome.detail[:512], outcome.failure, self.stamp())
        self.publish_entries([feed.outcome_entry(outcome, self.fleet.ticks)])
        text = f"{outcome.agent_id}: {outcome.call.text()} {'done' if outcome.success else 'failed'}: {outcome.detail}"
        if outcome.success:  # one call site per severity (rclpy)
            self.get_logger().info(text)
        else:
            self.get_logger().warning(text)

    @serialized
    def publish_agent_states(self) -> None:
        """Every robot as an agent: a base where its odometry puts it, an arm at its base; tracking error and goal."""
        if not self.active or self.fleet is None or self.fleet.judge is None:
            return
        self.out.agent_states(self.fleet.agent_reports(), self.stamp(), self.config.frame_id)
        self._publish_world_state()

    def _publish_world_state(self) -> None:
        self.publish_state(self.fleet.world_state(WORLD, self.episode), self.config.frame_id)

    @serialized
    def publish_observations(self) -> None:
        """Every robot's latest observation as its state entry."""
        if self.active and self.fleet is not None and self.fleet.judge is not None:
            self.publish_entries(self.fleet.observation_entries())

    def publish_diagnostics(self) -> None:
        """Lifecycle state, episode, each robot's contract and skill, counts; ERROR on stale or missing topics."""
        fleet, mono = self.fleet, time.monotonic()
        episode = "ended" if self.done else "running" if fleet is not None and fleet.judge is not None else \
            "waiting for Isaac Sim"
        health = Health({"state": self.state_label, "episode": episode, "ros_time_s": round(self.now_s(), 3)},
                        errors=(self.last_error,) if self.last_error else ())
        message = ""
        if fleet is not None:
            health += fleet.health(mono)
            missing = self.missing(self.now_s()) if fleet.judge is None and self.active else []
            if missing and mono - self.activated_at > self.config.wait_timeout_s:
                health += Health(errors=(f"contract topics missing after {mono - self.activated_at:.0f} s: "
                                         f"{', '.join(missing)}",))
            elif missing:
                message = f"waiting for Isaac Sim's topics: {', '.join(missing)}"
        health += self.counts.health() + self.rejected_health() + self._new_rejections()
        self.publish_world_health("Isaac Sim bridge", health, message=message if not health.errors else "")

    def _new_rejections(self) -> Health:
        """A warning naming the inputs rejected since the last report."""
        total, reported = self.rejections.total, self._reported_rejections
        self._reported_rejections = total
        return Health(warnings=(f"{total - reported} inputs rejected",) if total > reported else ())


def main(args=None) -> int:
    """`ros2 run sim_bridges isaac_bridge` (configures and activates itself with `autostart`).

    SIGINT and SIGTERM end the spin loop rather than rclpy's context directly, so the node is destroyed while it
    can still publish: every base gets a zero cmd_vel, every arm its measured joints.
    """
    stop = threading.Event()

    def factory() -> IsaacBridgeNode:
        node = IsaacBridgeNode()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        return node

    return spin_node(factory, "isaac_bridge", args, until=lambda node: stop.is_set())


if __name__ == "__main__":
    sys.exit(main())
