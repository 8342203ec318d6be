"""isaac_bridge lifecycle node: robots in a running Isaac Sim, through the topics its ROS 2 bridge speaks.

Isaac Sim needs an RTX GPU; this node needs only its topics (the OmniGraph a
user builds: docs/isaac_sim.md). Per robot namespace (absolute, Isaac's
`nodeNamespace`; topic names are parameters):

Subscribes  <robot>/odom (nav_msgs/Odometry; mobile), <robot>/joint_states (sensor_msgs/JointState; arm),
            <robot>/camera/rgb (sensor_msgs/Image, counted serialized, never decoded) and
            <robot>/camera/camera_info (sensor_msgs/CameraInfo) for camera robots; /clock through use_sim_time;
            plan (brace_msgs/Plan) in the stack's namespace
Publishes   <robot>/cmd_vel (geometry_msgs/Twist; mobile), <robot>/joint_command (sensor_msgs/JointState
            positions; arm); agent_states (AgentState), context (ContextEntry), outcomes (ExecutionOutcome),
            episode (Episode), world_state (WorldState: the robots and their tasks, PARTIAL; with every
            agent_states round and on a plan) in the stack's namespace; /diagnostics (in every state)

Readiness: the episode starts (EVENT_START, the task entries) once every
robot's contract topics have delivered and, with use_sim_time, /clock runs;
Isaac Sim and the stack may start in any order. It ends (EVENT_END) when every
task goal is reached or after `max_episode_s` of ROS time.

Safety: a plan is validated whole against the action schema for its robot's
kind (unknown agent, unknown skill, bad parameters, wrong types: logged,
counted, nothing moves). A robot whose odom / joint_states go stale
(`stale_after_s`, steady clock) is held — zero cmd_vel, an arm its measured
joints — and diagnostics say ERROR until they return; a stale camera is an
ERROR without a hold. Deactivate, shutdown, SIGINT and SIGTERM send zero
velocities (and arms their measured joints) before the node goes.

Parameters: sim_bridges.isaac.isaac_config.IsaacBridgeConfig (config/isaac_bridge.yaml). Lifecycle: configure validates
them and the action schema (a bad one fails naming it) and creates the topics; activate starts executing;
deactivate holds every robot; cleanup drops the topics. With `autostart` it configures and activates itself.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from dataclasses import replace
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
from brace_common.config import ConfigError, resolve_path
from brace_common.diagnostics import nonzero
from brace_common.episode import EpisodeResult
from brace_common.lifecycle import ReleasingLifecycleNode, serialized
from brace_common.params import declare_parameters, read_config, reject_undeclared
from brace_common.spin import spin_node
from brace_common.validation import InvalidInput
from brace_common.world_feed import AgentReport
from brace_common.world_node import WorldNode

from . import isaac_contract as contract
from . import isaac_feed as feed
from .isaac_config import IsaacBridgeConfig
from .isaac_contract import Liveness, RobotKind, RobotSpec, RobotState
from .isaac_skills import Command, RobotExecutor, SkillSchema

WORLD = "isaac_sim"
STACK_TOPICS = ("context", "states", "outcomes", "episode", "world_states", "world_info")
"""The stack's topics (WorldPublishers attributes) configure creates and cleanup destroys."""
EXIT_ACK_S = 1.0
"""How long the exiting bridge waits for the simulator to acknowledge each robot's hold."""


def load_schema(cfg: IsaacBridgeConfig) -> SkillSchema:
    """The action schema of `cfg`, checked against its robots and named poses; ConfigError naming the parameter."""
    try:
        schema = SkillSchema.load(resolve_path(cfg.action_schema_file))
    except (OSError, ValueError) as exc:
        raise ConfigError("action_schema_file", str(exc)) from None
    undefined = [p for p in schema.pose_choices() if p not in cfg.poses()]
    if undefined and RobotKind.ARM.value in cfg.agent_kinds:
        raise ConfigError("named_poses", f"the action schema offers poses {undefined} that are not defined")
    for spec in cfg.robot_specs():
        if not schema.skills_of(spec.kind):
            raise ConfigError("action_schema_file", f"its `kinds` give {spec.kind.value} robots ({spec.name}) no skill")
    return schema


class IsaacBridgeNode(WorldNode, ReleasingLifecycleNode):
    """Thin lifecycle shell: Isaac's topics -> robot states -> the skill executors -> commands, outcomes, context."""

    world_name = WORLD

    def __init__(self, **kwargs) -> None:
        super().__init__("isaac_bridge", **kwargs)
        self.config: Optional[IsaacBridgeConfig] = None
        self.schema: Optional[SkillSchema] = None
        self.robots: dict[str, RobotSpec] = {}
        self.states: dict[str, RobotState] = {}
        self.executors: dict[str, RobotExecutor] = {}
        self.control_topics: dict[str, list[str]] = {}
        self.liveness: Optional[Liveness] = None
        self.judge: Optional[feed.EpisodeJudge] = None
        self.holding: dict[str, bool] = {}
        self.cmd_pubs: dict[str, object] = {}
        self.active = False
        self.activated_at = time.monotonic()
        self.episode_start_s = 0.0
        self.ticks = 0
        self.state_step = 0
        self.last_error = ""
        self.counts = {"plans_applied": 0, "malformed_plans": 0, "stale_plans": 0, "outcomes_succeeded": 0,
                       "outcomes_failed": 0, "holds": 0, "ticks_waiting_for_contract": 0}
        self._reported_rejections = 0
        self._entities: list = []  # what configure created (subscriptions, publishers, timers)
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
            self.schema = load_schema(cfg)
        except ConfigError as exc:
            return self._configure_failed(str(exc))
        self.config, self.last_error = cfg, ""
        self._create(cfg)  # an exception: ReleasingLifecycleNode says why and releases (on_error)
        self.state_label = "inactive"
        self.get_logger().info(f"configured for {', '.join(f'{s.name} ({s.kind.value})' for s in self.robots.values())}"
                               f"; waiting for {len(self.liveness.last)} contract topics")
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

    def _configure_failed(self, why: str) -> TransitionCallbackReturn:
        """FAILURE with `last_error` saying why (spin.autostart prints it; diagnostics show it)."""
        self.last_error = f"configure failed: {why}"
        self.get_logger().error(self.last_error)
        return TransitionCallbackReturn.FAILURE

    def _create(self, cfg: IsaacBridgeConfig) -> None:
        """The robots' executors and topics, the stack's topics and the timers of a configured bridge."""
        self.book.rearm()  # a new episode once the contract is live again
        self.ticks = 0
        poses, limits, topics = cfg.poses(), cfg.limits(), cfg.topics()
        inputs: list[str] = []
        for spec in cfg.robot_specs():
            name = spec.name
            self.robots[name], self.states[name] = spec, RobotState()
            self.executors[name] = RobotExecutor(spec, limits, poses)
            self.holding[name] = False
            self.control_topics[name] = []
            for t in contract.robot_contract(spec, topics):
                if t.subscribed:
                    inputs.append(t.topic)
                    if t.controls:
                        self.control_topics[name].append(t.topic)
                    self._subscribe(name, t.role, t.topic)
                else:
                    msg_type = Twist if spec.kind == RobotKind.MOBILE else JointState
                    self.cmd_pubs[name] = self._keep(self.create_publisher(msg_type, t.topic, qos.SIM_COMMANDS))
        self.liveness = Liveness(inputs, cfg.stale_after_s)
        self.out.open(STACK_TOPICS)
        self._keep(self.subscribe_plans(self.on_plan, callback_group=self.group))
        for period, callback in ((cfg.control_period_s, self.control), (cfg.agent_state_period_s,
                                                                        self.publish_agent_states),
                                 (cfg.observe_period_s, self.publish_observations)):
            self._entities.append(steady_timer(self, period, callback, self.group))

    def _release(self) -> None:
        """Cleanup and shutdown: hold the robots, then drop the topics and timers configure created."""
        self.safe_stop("cleanup")
        self.active = False
        for entity in self._entities:
            if hasattr(entity, "cancel"):
                entity.cancel()
                self.destroy_timer(entity)
            elif hasattr(entity, "publish"):
                self.destroy_publisher(entity)
            else:
                self.destroy_subscription(entity)
        self._entities.clear()
        self.out.close(STACK_TOPICS)
        self.cmd_pubs.clear()
        self.robots, self.states, self.executors, self.control_topics = {}, {}, {}, {}
        self.liveness, self.judge, self.config = None, None, None

    def destroy_node(self) -> None:
        """Hold the robots while the context is still valid, then destroy the node."""
        self.safe_stop("exit")
        super().destroy_node()

    def _keep(self, entity):
        self._entities.append(entity)
        return entity

    def _subscribe(self, robot: str, role: str, topic: str) -> None:
        if role == contract.ODOM:
            sub = self.create_subscription(Odometry, topic, lambda m: self.on_odom(robot, topic, m), qos.STATE,
                                           callback_group=self.group)
        elif role == contract.JOINT_STATES:
            sub = self.create_subscription(JointState, topic, lambda m: self.on_joint_states(robot, topic, m),
                                           qos.STATE, callback_group=self.group)
        elif role == contract.RGB:  # serialized: images are counted for liveness, never decoded
            sub = self.create_subscription(Image, topic, lambda m: self.on_image(robot, topic), qos.STATE,
                                           callback_group=self.group, raw=True)
        elif role == contract.CAMERA_INFO_ROLE:
            sub = self.create_subscription(CameraInfo, topic, lambda m: self.on_camera_info(robot, topic, m),
                                           qos.STATE, callback_group=self.group)
        else:
            raise ValueError(f"no subscription for contract role '{role}'")
        self._keep(sub)

    # ------------------------------------------------------------------ inputs

    def on_odom(self, robot: str, topic: str, msg: Odometry) -> None:
        """A base's pose and speeds (a malformed sample is counted and does not count as alive)."""
        spec, state = self.robots.get(robot), self.states.get(robot)
        if spec is None or state is None:
            return  # cleaned up while this message was on its way
        p, q = msg.pose.pose.position, msg.pose.pose.orientation
        lin, ang = msg.twist.twist.linear, msg.twist.twist.angular
        try:
            state.base = contract.base_state(spec.origin, (p.x, p.y, p.z), (q.x, q.y, q.z, q.w), (lin.x, lin.y, lin.z),
                                             (ang.x, ang.y, ang.z))
        except InvalidInput as exc:
            self.rejections.reject("odom", exc, robot)
            return
        self._seen(topic)

    def _seen(self, topic: str) -> None:
        """`topic` delivered a valid sample now. Configure subscribes before it builds the liveness tracker, so a
        sample can arrive on another executor thread in between (it then counts from the next one)."""
        liveness = self.liveness
        if liveness is not None:
            liveness.seen(topic, time.monotonic())

    def on_joint_states(self, robot: str, topic: str, msg: JointState) -> None:
        """An arm's joint positions (the configured joints; others ignored)."""
        state, cfg = self.states.get(robot), self.config
        if state is None or cfg is None:
            return
        try:
            state.joints = contract.joint_positions(msg.name, msg.position, tuple(cfg.joint_names))
        except InvalidInput as exc:
            self.rejections.reject("joint_states", exc, robot)
            return
        self._seen(topic)

    def on_image(self, robot: str, topic: str) -> None:
        """One camera image arrived (counted, not decoded)."""
        state = self.states.get(robot)
        if state is not None:
            state.camera = replace(state.camera, images=state.camera.images + 1)
            self._seen(topic)

    def on_camera_info(self, robot: str, topic: str, msg: CameraInfo) -> None:
        """The camera's resolution and frame."""
        state = self.states.get(robot)
        if state is not None:
            state.camera = replace(state.camera, width=int(msg.width), height=int(msg.height),
                                   frame_id=msg.header.frame_id[:64])
            self._seen(topic)

    @serialized
    def on_plan(self, msg: Plan) -> None:
        """Validate a plan whole against the schema for its robot's kind and hand it to the robot's executor."""
        calls = self.take_plan(msg, self.active and self.config is not None, lambda agent: agent in self.robots,
                               lambda: self._plan_current(msg),
                               lambda agent, raw: self.schema.validate(self.robots[agent].kind, raw,
                                                                       self.executors[agent].poses))
        if calls is None:
            return
        self.executors[msg.agent_id].set_plan(msg.plan_id, calls)
        self._publish_world_state()
        self.book.count_plan()
        self.counts["plans_applied"] += 1
        self.get_logger().info(f"{msg.agent_id}: plan {msg.plan_id[:48]}: {', '.join(c.text() for c in calls)}")

    def _plan_current(self, msg: Plan) -> bool:
        """The plan is of the running episode (not of an earlier run, latched, nor after the episode ended)."""
        return self.judge is not None and not self.done and not 0 < seconds_of(msg.header.stamp) < self.episode_start_s

    # ------------------------------------------------------------------ control

    def now_s(self) -> float:
        """ROS time in seconds (Isaac's /clock under use_sim_time)."""
        return self.get_clock().now().nanoseconds * 1e-9

    def missing(self, now: float) -> list[str]:
        """Contract topics that have not delivered yet (and /clock, with use_sim_time, while ROS time is 0)."""
        missing = self.liveness.missing()
        if now == 0.0 and self.get_parameter("use_sim_time").value:
            missing.append(names.CLOCK)
        return missing

    @serialized
    def control(self) -> None:
        """Start the episode once the contract is live; then run every robot's executor, or hold it."""
        if not self.active or self.liveness is None:
            return
        now = self.now_s()
        if self.judge is None:
            missing = self.missing(now)
            if missing:
                self.counts["ticks_waiting_for_contract"] += 1
                self.get_logger().info(f"waiting for Isaac Sim's topics: {', '.join(missing)}",
                                       throttle_duration_sec=10.0)
                return
            self.start_episode(now)
        stale = set(self.liveness.stale(time.monotonic()))
        self.ticks += 1
        for name, spec in self.robots.items():
            state, executor = self.states[name], self.executors[name]
            lost = [t for t in self.control_topics[name] if t in stale]
            if lost or self.done:
                self._hold(spec, state, f"{', '.join(lost)} stale" if lost else "episode over")
                continue
            if self.holding[name]:
                self.holding[name] = False
                self.get_logger().info(f"{name}: contract topics live again, executing")
            command, outcomes = executor.tick(now, state)
            self.send(spec, command)
            for outcome in outcomes:
                self._publish_outcome(outcome)
            goal = self.judge.update(now, name, state)
            if goal is not None:
                self.publish_entries([feed.task_done_entry(goal, self.ticks)])
                self.get_logger().info(f"{name}: task goal reached ({goal.text()})")
        self.judge.record_positions({name: self.position(name) for name in self.robots})
        if not self.done and self.judge.finished(now):
            self.end_episode(now)

    def _hold(self, spec: RobotSpec, state: RobotState, why: str) -> None:
        """Hold a robot: zero velocity every tick for a base, its measured joints once for an arm."""
        first = not self.holding[spec.name]
        if first:
            self.holding[spec.name] = True
            self.counts["holds"] += 1
            # one call site per severity: rclpy refuses a site that logs at two
            if why == "episode over":
                self.get_logger().info(f"{spec.name}: holding ({why})")
            else:
                self.get_logger().error(f"{spec.name}: holding ({why})")
        if spec.kind == RobotKind.MOBILE or first:
            self.send(spec, self.executors[spec.name].hold(state))

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
        for name, spec in list(self.robots.items()):
            try:
                self.send(spec, self.executors[name].hold(self.states[name]))
                pub = self.cmd_pubs.get(name)
                if why == "exit" and pub is not None and not pub.wait_for_all_acked(Duration(seconds=EXIT_ACK_S)):
                    self.get_logger().warning(f"{name}: the hold on exit was not acknowledged in {EXIT_ACK_S} s")
            except Exception as exc:  # noqa: BLE001 - a publisher of a dying context; the next robot still matters
                self.get_logger().warning(f"{name}: could not send the hold on {why}: {exc}")

    # ------------------------------------------------------------------ episode

    def start_episode(self, now: float) -> None:
        """EVENT_START, then the scene, the tasks and the constraints."""
        cfg = self.config
        self.episode_start_s = now
        self.judge = feed.EpisodeJudge(cfg.goals(), cfg.poses(), cfg.goal_tolerance_m, cfg.joint_tolerance_rad,
                                       cfg.max_episode_s, started=now)
        self.announce_start()
        self.publish_entries(feed.episode_entries(list(self.robots.values()), cfg.task_texts(), cfg.goals(),
                                                   cfg.constraints, self.schema, cfg.poses(), cfg.frame_id))
        self.get_logger().info(f"episode started at {now:.2f} s: every contract topic is live")

    def end_episode(self, now: float) -> None:
        """EVENT_END with the verdict; every robot is held from now on."""
        result = self.episode_result()
        self.announce_end(result)
        for executor in self.executors.values():
            executor.clear()
        self.get_logger().info(f"episode ended after {now - self.episode_start_s:.1f} s: success={result.success} "
                               f"goals {result.delivered}/{result.tasks} plans={self.plans}")

    def progress(self) -> str:
        """Where the episode is (brace-run's progress line)."""
        if self.judge is None:
            return "waiting for Isaac Sim"
        return (f"episode {self.now_s() - self.episode_start_s:6.1f} s, goals {len(self.judge.reached)}/"
                f"{len(self.judge.goals)}")

    def episode_result(self) -> EpisodeResult:
        """Isaac's record of the episode that ends: the judge's verdict and metrics (no oracle: no agreement)."""
        return EpisodeResult.of(self.judge.metrics(self.ticks), self.episode, 0, self.plans)

    def num_agents(self) -> int:
        """The robots."""
        return len(self.robots)

    def world_agents(self) -> list[str]:
        """The robots."""
        return list(self.robots)

    def world_schema(self) -> Optional[dict]:
        """The skill schema the bridge executes (action_schema_file)."""
        return self.schema.to_dict() if self.schema is not None else None

    # ------------------------------------------------------------------ outputs

    def _publish_outcome(self, outcome) -> None:
        self.counts["outcomes_succeeded" if outcome.success else "outcomes_failed"] += 1
        self.out.outcome(outcome.agent_id, self.ticks, outcome.call.action, outcome.success, outcome.detail[:512],
                         outcome.failure, self.stamp())
        self.publish_entries([feed.outcome_entry(outcome, self.ticks)])
        text = f"{outcome.agent_id}: {outcome.call.text()} {'done' if outcome.success else 'failed'}: {outcome.detail}"
        if outcome.success:  # one call site per severity (rclpy)
            self.get_logger().info(text)
        else:
            self.get_logger().warning(text)

    def position(self, robot: str) -> tuple[float, float]:
        """Where a robot is in frame_id: a base from its odometry, an arm at its base."""
        base = self.states[robot].base
        pose = base.pose if base is not None else self.robots[robot].origin
        return pose.x, pose.y

    @serialized
    def publish_agent_states(self) -> None:
        """Every robot as an agent: a base where its odometry puts it, an arm at its base; tracking error and goal."""
        if not self.active or self.judge is None:
            return
        self.state_step += 1
        self.out.agent_states([AgentReport(name, self.state_step, *self.position(name),
                                           float(self.executors[name].tracking_error), self.executors[name].has_goal)
                               for name in self.robots], self.stamp(), self.config.frame_id)
        self._publish_world_state()

    def _publish_world_state(self) -> None:
        state = feed.world_state(WORLD, self.episode, self.state_step, self.robots, self.states, self.executors,
                                 self.holding, self.config.goals(), self.judge.reached, self.config.poses())
        self.publish_state(state, self.config.frame_id)

    @serialized
    def publish_observations(self) -> None:
        """Every robot's latest observation as its state entry."""
        if not self.active or self.judge is None:
            return
        poses = self.config.poses()
        self.publish_entries([feed.observation_entry(spec, self.states[name], self.executors[name].current, poses,
                                                      self.ticks) for name, spec in self.robots.items()])

    def publish_diagnostics(self) -> None:
        """Lifecycle state, episode, each robot's contract and skill, counts; ERROR on stale or missing topics."""
        values: dict = {"state": self.state_label, "episode": "ended" if self.done else
                        "running" if self.judge is not None else "waiting for Isaac Sim", "ros_time_s":
                        round(self.now_s(), 3)}
        errors = [self.last_error] if self.last_error else []
        message = ""
        if self.liveness is not None:
            mono = time.monotonic()
            stale = self.liveness.stale(mono)
            for name, executor in self.executors.items():
                current = executor.current
                values[f"{name}.skill"] = "holding" if self.holding[name] else current.text() if current else "idle"
            for topic in self.liveness.last:
                age = self.liveness.age(topic, mono)
                values[f"age_s.{topic}"] = "never" if age == float("inf") else round(age, 2)
            if stale:
                held = [t for t in stale if any(t in ts for ts in self.control_topics.values())]
                errors.append(f"stale contract topics: {', '.join(stale)}" + ("; robots held" if held else ""))
            if self.judge is None and self.active:
                missing = self.missing(self.now_s())
                if missing and mono - self.activated_at > self.config.wait_timeout_s:
                    errors.append(f"contract topics missing after {mono - self.activated_at:.0f} s: {', '.join(missing)}")
                elif missing:
                    message = f"waiting for Isaac Sim's topics: {', '.join(missing)}"
        values.update(self.counts)
        values.update(self.rejected_values())
        warnings = nonzero(self.counts, ("malformed_plans",))
        total = self.rejections.total
        if total > self._reported_rejections:
            warnings.append(f"{total - self._reported_rejections} inputs rejected")
        self._reported_rejections = total
        self.publish_world_diagnostics("Isaac Sim bridge", values, warnings, errors,
                                       message=message if not errors else "")


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
