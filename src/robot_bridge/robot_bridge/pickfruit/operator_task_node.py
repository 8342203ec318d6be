"""operator_task: the task and the episodes of a real robot, given and judged by its operator.

What twin_world does on the twin (episodes, the task, a verdict), done by the operator on a real arm: takes task,
plan and outcomes; publishes episode, context, world_state and /diagnostics; serves ~/start, ~/succeed and ~/fail.
Topics and services: docs/nodes.md, "Robot nodes"; parameters: OperatorTaskConfig (docs/parameters.md).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from brace_msgs.msg import Episode, ExecutionOutcome, Plan
from rclpy.node import Node
from std_msgs.msg import String
from std_srvs.srv import Trigger

from brace_common import names, qos
from brace_common.clock import steady_timer
from brace_common.config import ConfigError, ReadinessConfig, check_agent_ids, param
from brace_common.counters import Counters, Health
from brace_common.episode import EpisodeResult, episode_msg
from brace_common.params import declare_config, reject_undeclared
from brace_common.spin import spin_node
from brace_common.validation import shorten
from brace_common.vocabulary import Block, EntryKind, EpisodeEvent, Failure
from brace_common.world_node import WorldNode
from brace_common.world_state import PlanProgress

from .operator_episodes import EpisodeError, EpisodeRecord, OperatorEpisodes, world_state

TASK_TOPIC = "task"
"""std_msgs/String: an operator's task (relative: /brace/task under the launch files' namespace)."""


@dataclass
class OperatorTaskConfig(ReadinessConfig):
    """Parameters of the operator_task node."""

    agent_id: str = param("arm_0", "agent id of the arm (context entries, plans counted)")
    tasks: list[str] = param([], "task lines of ~/start and start_on_ready, e.g. 'Put the apple in the bowl.' "
                                   "(empty: tasks come only on the task topic)")
    constraints: list[str] = param([], "lines published in block CONSTRAINTS at every start, e.g. the skills the "
                                         "planner may call (empty: none)")
    start_on_ready: bool = param(False, "start the first episode with `tasks` once every peer is up")
    max_episode_s: float = param(0.0, "an episode still running after this long ends as a failure (0 = no limit)",
                                  0.0, 86400.0)
    objects: list[str] = param([], "objects the operator reports on the table, e.g. ['apple', 'bowl']: world_state "
                                    "lists them without pose or state (nothing here observes them)")
    variant: str = param("", "the run's variant label, copied into Episode messages")
    world: str = param("real", "Episode.world of this robot's episodes")
    period_s: float = param(0.2, "how often readiness and the duration limit are checked (s)", 0.01, 5.0)
    replan_action: str = param(names.REPLAN, "Replan action whose server must answer before the first episode "
                               "starts ('' = do not wait for a planner)")

    def task_lines(self) -> list[str]:
        """The non-empty `tasks` lines."""
        return [t for t in self.tasks if t.strip()]

    def validate(self) -> None:
        """ConfigError naming the first invalid parameter."""
        check_agent_ids("agent_id", self.agent_id)
        if self.start_on_ready and not self.task_lines():
            raise ConfigError("tasks", "start_on_ready needs at least one task line")


class OperatorTaskNode(WorldNode, Node):
    """Thin rclpy shell around OperatorEpisodes: services and the task topic in, Episode and context out."""

    def __init__(self, **kwargs) -> None:
        super().__init__("operator_task", **kwargs)
        self.config = declare_config(self, OperatorTaskConfig)
        reject_undeclared(self)
        cfg = self.config
        self.world_name = cfg.world
        self.init_world(("context", "episode", "diagnostics", "world_states", "world_info"), seed=None)
        self.episodes = OperatorEpisodes(cfg.max_episode_s)
        self.counts = Counters(("episodes_started", "episodes_ended", "episodes_timed_out", "requests_refused", "plans",
                                "unknown_failures"))
        self.create_subscription(String, TASK_TOPIC, self.on_task, qos.INPUTS)
        self.subscribe_plans(self.on_plan)
        self.subscribe_monitor_states()
        self.plan_progress = PlanProgress(cfg.agent_id)
        self.create_subscription(ExecutionOutcome, names.OUTCOMES, self.on_outcome, qos.INPUTS)
        self.create_service(Trigger, "~/start", self.on_start)
        self.create_service(Trigger, "~/succeed", lambda req, res: self.on_verdict(True, res))
        self.create_service(Trigger, "~/fail", lambda req, res: self.on_verdict(False, res))
        self.wait_for_peers(cfg)
        self.auto_started = False
        self.timer = steady_timer(self, cfg.period_s, self.tick)
        steady_timer(self, 1.0, self.publish_diagnostics)
        self.get_logger().info(f"operator episodes for '{cfg.agent_id}': "
                               + (f"~/start runs {len(cfg.task_lines())} task line(s)" if cfg.task_lines()
                                  else f"send a task on '{self.resolve_topic_name(TASK_TOPIC)}'"))

    # ------------------------------------------------------------------ requests

    def on_task(self, msg: String) -> None:
        """Start an episode with the task lines of `msg`."""
        ok, message = self.start([line for line in msg.data.splitlines() if line.strip()])
        if not ok:
            self.get_logger().warning(f"task refused: {message}")

    def on_start(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        """~/start: an episode with the configured task lines."""
        response.success, response.message = self.start(self.config.task_lines())
        return response

    def on_verdict(self, success: bool, response: Trigger.Response) -> Trigger.Response:
        """~/succeed, ~/fail: end the running episode with that verdict."""
        try:
            record = self.episodes.finish(success, time.monotonic())
        except EpisodeError as exc:
            self.counts["requests_refused"] += 1
            response.success, response.message = False, str(exc)
            return response
        self._ended(record)
        response.success, response.message = True, f"episode {record.episode} ended: success={success}"
        return response

    def on_plan(self, msg: Plan) -> None:
        """Count the arm's plans of the running episode."""
        if msg.agent_id == self.config.agent_id and self.episodes.running:
            self.book.count_plan()
            self.counts["plans"] += 1
            self.plan_progress.plan((step.action, step.parameters_json) for step in msg.steps)
            self._publish_world_state()

    def on_outcome(self, msg: ExecutionOutcome) -> None:
        """The arm finished a step of its plan: its activity moves on (or failed, counted by category for the
        episode's metrics; an unknown category counts as EXECUTOR and as `unknown_failures`)."""
        if msg.agent_id == self.config.agent_id and self.episodes.running:
            self.plan_progress.outcome(msg.action, msg.success)
            if not msg.success:
                try:
                    failure = Failure(msg.failure)
                except ValueError:
                    self.counts["unknown_failures"] += 1
                    failure = Failure.EXECUTOR
                self.episodes.failed_step(failure)
            self._publish_world_state()

    # ------------------------------------------------------------------ episodes

    def start(self, tasks: list[str]) -> tuple[bool, str]:
        """Begin an episode (refused while peers are missing or one runs); (ok, message)."""
        if not self.peers.ready():
            self.counts["requests_refused"] += 1
            return False, f"waiting for {', '.join(self.peers.missing()) or 'the graph to settle'}"
        try:
            episode = self.episodes.start(tasks, time.monotonic())
        except EpisodeError as exc:
            self.counts["requests_refused"] += 1
            return False, str(exc)
        self.book.start()
        self.plan_progress.clear()
        self._publish_world_state()
        self.counts["episodes_started"] += 1
        self.out.episode.publish(self.operator_episode_msg(EpisodeEvent.START))
        for line in self.episodes.tasks:
            self.publish_entry(self.config.agent_id, Block.TASK, EntryKind.TASK, line)
        for line in self.config.constraints:
            if line.strip():
                self.publish_entry(self.config.agent_id, Block.CONSTRAINTS, EntryKind.CONSTRAINT, line)
        message = f"episode {episode} started: {shorten(' / '.join(self.episodes.tasks), 200)}"
        self.get_logger().info(message)
        return True, message

    def _ended(self, record: EpisodeRecord) -> None:
        self.counts["episodes_ended"] += 1
        if record.reason == "timeout":
            self.counts["episodes_timed_out"] += 1
        self.book.end()
        self.out.episode.publish(self.operator_episode_msg(EpisodeEvent.END, record))
        self._publish_world_state()
        self.get_logger().info(f"episode {record.episode}: success={record.success} ({record.reason}) "
                               f"{record.duration_s:.1f} s plans={self.plans}")

    def tick(self) -> None:
        """Start the first episode when asked to and ready; end a running one past its duration limit."""
        if self.config.start_on_ready and not self.auto_started and self.peers.ready():
            self.auto_started = True
            ok, message = self.start(self.config.task_lines())
            if not ok:
                self.get_logger().error(f"start_on_ready: {message}")
        record = self.episodes.expire(time.monotonic())
        if record is not None:
            self.get_logger().warning(f"episode {record.episode} ran past max_episode_s "
                                      f"({self.config.max_episode_s:g} s): failed")
            self._ended(record)

    def _publish_world_state(self) -> None:
        self.publish_state(world_state(self.episodes, self.config.world, self.plans, self.plan_progress.activity(),
                                       self.config.objects), "")

    def num_agents(self) -> int:
        """One arm."""
        return 1

    def world_agents(self) -> list[str]:
        """The arm. The world has no action schema of its own (world_schema: None, WorldInfo's is empty): the
        arm's skills are the robot stack's, named by the planner's action_schema_file."""
        return [self.config.agent_id]

    def operator_episode_msg(self, event: EpisodeEvent, record: EpisodeRecord | None = None) -> Episode:
        """The operator's Episode record: the task lines at the start; the verdict, the plans and the duration (in
        `period_s` steps) at the end."""
        result = None if record is None else EpisodeResult.of(
            record.verdict(int(record.duration_s / self.config.period_s)), record.episode, 0, self.plans)
        msg = episode_msg(event, max(self.episodes.episode, 0), 0, 1, self.config.world, self.config.variant,
                          self.stamp(), result)
        if record is None:
            msg.tasks = len(self.episodes.tasks)
        return msg

    def publish_diagnostics(self) -> None:
        """Episode, elapsed time, counts and missing peers on /diagnostics."""
        now = time.monotonic()
        values = {"episode": self.episodes.episode, "running": self.episodes.running,
                  "elapsed_s": round(self.episodes.elapsed(now), 1) if self.episodes.running else ""}
        self.publish_world_health("operator episodes", Health(values) + self.counts.health()
                                  + Health(errors=tuple(self.peer_errors())))


def main(args=None) -> int:
    """`ros2 run robot_bridge operator_task`."""
    return spin_node(OperatorTaskNode, "operator_task", args)


if __name__ == "__main__":
    sys.exit(main())
