"""isaac_bridge lifecycle node: robots in a running Isaac Sim (IsaacFleet) through the topics its ROS 2 bridge speaks
(RobotTopics). Topics, readiness, safety and parameters: docs/isaac_sim.md and docs/nodes.md."""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Optional

from brace_msgs.msg import Plan
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn

from brace_common.clock import seconds_of, steady_timer
from brace_common.config import ConfigError
from brace_common.counters import Health
from brace_common.episode import EpisodeResult
from brace_common.lifecycle import ReleasingLifecycleNode, serialized
from brace_common.log_sites import log_either
from brace_common.params import declare_parameters, read_config, reject_undeclared
from brace_common.spin import spin_node
from brace_common.world_node import WorldNode

from . import isaac_feed as feed
from .isaac_config import IsaacBridgeConfig
from .isaac_fleet import EPISODE_OVER, WAITING, IsaacFleet, bridge_counters, load_schema
from .isaac_skills import Outcome
from .isaac_topics import RobotTopics

WORLD = "isaac_sim"
STACK_TOPICS = ("context", "states", "outcomes", "episode", "world_states", "world_info")
"""The stack's topics (WorldPublishers attributes) configure creates and cleanup destroys."""


class IsaacBridgeNode(WorldNode, ReleasingLifecycleNode):
    """Thin lifecycle shell: Isaac's topics -> the fleet -> commands, outcomes, context and diagnostics."""

    world_name = WORLD

    def __init__(self, **kwargs) -> None:
        super().__init__("isaac_bridge", **kwargs)
        self.config: Optional[IsaacBridgeConfig] = None
        self.fleet: Optional[IsaacFleet] = None
        self.robots: Optional[RobotTopics] = None  # Isaac Sim's side: the robots' topics
        self.active = False
        self.activated_at = time.monotonic()
        self.counts = bridge_counters()
        self.group = MutuallyExclusiveCallbackGroup()  # every callback of the node, one at a time
        self.init_world(("diagnostics",), episodes=1, seed=None)  # one episode a configuration, unseeded
        declare_parameters(self, IsaacBridgeConfig, enforce_ranges=False)  # checked at configure (read_config)
        period = self.get_parameter("diagnostics_period_s").value
        steady_timer(self, period if isinstance(period, float) and 0.05 <= period <= 60.0 else 1.0,
                     self.publish_diagnostics, self.group)

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
        self.robots = RobotTopics(self, fleet, self.configured, self.rejections, self.group)  # raises: base releases
        self.out.open(STACK_TOPICS, keep=self.configured)
        self.configured(self.subscribe_plans(self.on_plan, callback_group=self.group))
        self.configured(self.subscribe_monitor_states(callback_group=self.group))
        for period, callback in ((cfg.control_period_s, self.control), (cfg.agent_state_period_s, self.publish_agent_states),
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
        if self.robots is not None:
            self.robots.live = False
        self.robots, self.fleet, self.config = None, None, None

    def destroy_node(self) -> None:
        """Hold the robots while the context is still valid, then destroy the node."""
        self.safe_stop("exit")
        super().destroy_node()

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

    def now_s(self) -> float:
        """ROS time in seconds (Isaac's /clock under use_sim_time)."""
        return self.get_clock().now().nanoseconds * 1e-9

    def clock_missing(self, now: float) -> bool:
        """ROS time `now` has not started: use_sim_time and no /clock yet."""
        return now == 0.0 and bool(self.get_parameter("use_sim_time").value)

    @serialized
    def control(self) -> None:
        """Start the episode once the contract is live; then run every robot's executor, or hold it."""
        fleet = self.fleet
        if not self.active or fleet is None:
            return
        now = self.now_s()
        if fleet.judge is None:
            missing = fleet.waiting(self.clock_missing(now))
            if missing:
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
            self.robots.send(spec, command)
        for outcome in tick.outcomes:
            self._publish_outcome(outcome)
        for robot, goal in tick.goals:
            self.publish_entries([feed.task_done_entry(goal, fleet.ticks)])
            self.get_logger().info(f"{robot}: task goal reached ({goal.text()})")
        if tick.finished:
            self.end_episode(now)

    def _log_hold(self, robot: str, why: str) -> None:
        log_either(self.get_logger(), why == EPISODE_OVER, f"{robot}: holding ({why})", "error")

    def safe_stop(self, why: str) -> None:
        """Hold every robot (nothing raised: this runs on exit, also after a constructor stopped half way)."""
        if getattr(self, "robots", None) is not None:
            self.robots.hold(why)

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
        return self.fleet.progress(self.now_s()) if self.fleet is not None else WAITING

    def num_agents(self) -> int:
        """The robots."""
        return len(self.fleet.robots) if self.fleet is not None else 0

    def world_agents(self) -> list[str]:
        """The robots."""
        return list(self.fleet.robots) if self.fleet is not None else []

    def world_schema(self) -> Optional[dict]:
        """The skill schema the bridge executes (action_schema_file)."""
        return self.fleet.schema.to_dict() if self.fleet is not None else None

    def _publish_outcome(self, outcome: Outcome) -> None:
        self.out.outcome(outcome.agent_id, self.fleet.ticks, outcome.call.action, outcome.success,
                         outcome.detail[:512], outcome.failure, self.stamp())
        self.publish_entries([self.fleet.outcome_entry(outcome)])
        text = f"{outcome.agent_id}: {outcome.call.text()} {'done' if outcome.success else 'failed'}: {outcome.detail}"
        log_either(self.get_logger(), outcome.success, text, "warning")

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
        mono, now = time.monotonic(), self.now_s()
        health = Health({"state": self.state_label}, errors=(self.last_error,) if self.last_error else ())
        fleet, message = Health({"episode": "ended" if self.done else WAITING}), ""
        if self.fleet is not None:
            waited_s = mono - self.activated_at if self.active else None
            fleet, message = self.fleet.report(mono, self.done, waited_s, self.clock_missing(now))
        health += fleet + Health({"ros_time_s": round(now, 3)}) + self.counts.health() + self.rejected_health() \
            + self.rejections.news()
        self.publish_world_health("Isaac Sim bridge", health, message=message if not health.errors else "")


def main(args=None) -> int:
    """`ros2 run sim_bridges isaac_bridge` (configures and activates itself with `autostart`). SIGINT and SIGTERM end
    the spin loop, not rclpy's context, so the node is destroyed while it can still hold every robot."""
    stop = threading.Event()

    def factory() -> IsaacBridgeNode:
        node = IsaacBridgeNode()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        return node

    return spin_node(factory, "isaac_bridge", args, until=lambda node: stop.is_set())


if __name__ == "__main__":
    sys.exit(main())
