"""The robots one isaac_bridge configuration drives, ROS-free: their latest inputs, liveness, executors, holds, the
episode's judge, the bridge's counters and its health. The node turns messages into calls here and reports into
messages."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

from brace_common import names
from brace_common.action_schema import Step
from brace_common.config import ConfigError, resolve_path
from brace_common.counters import Counters, Health
from brace_common.episode import EpisodeMetrics
from brace_common.world_feed import AgentReport, FeedEntry
from brace_common.world_state import WorldState

from . import isaac_contract as contract
from . import isaac_feed as feed
from .isaac_config import IsaacBridgeConfig, TaskGoal
from .isaac_contract import ContractTopic, Liveness, RobotKind, RobotSpec, RobotState
from .isaac_skills import Command, Outcome, RobotExecutor, SkillSchema

COUNTS = ("plans_applied", "malformed_plans", "stale_plans", "outcomes_succeeded", "outcomes_failed", "holds",
          "ticks_waiting_for_contract")
"""The bridge's counters (diagnostics keys); malformed_plans WARN."""
EPISODE_OVER = "episode over"
"""Why every robot is held once the episode ended."""
WAITING = "waiting for Isaac Sim"
"""The episode's state (and the progress line) until every contract topic delivered."""


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


def bridge_counters() -> Counters:
    """The bridge's counters, kept across configurations."""
    return Counters(COUNTS, warn=("malformed_plans",))


@dataclass
class Tick:
    """What one control tick did: commands to send, robots newly held (robot, why) or released, the skills' outcomes,
    the task goals reached, and whether the episode is over now."""

    commands: list[tuple[RobotSpec, Command]] = field(default_factory=list)
    held: list[tuple[str, str]] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    goals: list[tuple[str, TaskGoal]] = field(default_factory=list)
    finished: bool = False


class IsaacFleet:
    """The robots of one configuration (`cfg`, checked `schema`): what Isaac Sim said of each, and what each does."""

    def __init__(self, cfg: IsaacBridgeConfig, schema: SkillSchema, counts: Counters) -> None:
        self.cfg, self.schema, self.counts = cfg, schema, counts
        self.poses = cfg.poses()
        self.goals = cfg.goals()
        self.robots: dict[str, RobotSpec] = {spec.name: spec for spec in cfg.robot_specs()}
        self.states = {name: RobotState() for name in self.robots}
        self.executors = {name: RobotExecutor(spec, cfg.limits(), self.poses) for name, spec in self.robots.items()}
        self.holding = dict.fromkeys(self.robots, False)
        self.contract: dict[str, list[ContractTopic]] = {
            name: contract.robot_contract(spec, cfg.topics()) for name, spec in self.robots.items()}
        self.control_topics = {name: [t.topic for t in topics if t.subscribed and t.controls]
                               for name, topics in self.contract.items()}
        self.liveness = Liveness([t.topic for topics in self.contract.values() for t in topics if t.subscribed],
                                 cfg.stale_after_s)
        self.judge: Optional[feed.EpisodeJudge] = None
        self.episode_start_s = 0.0
        self.ticks = 0
        self.state_step = 0

    # ------------------------------------------------------------------ inputs (InvalidInput: not alive)

    def odom(self, robot: str, topic: str, position: tuple, orientation: tuple, linear: tuple, angular: tuple,
             mono: float) -> None:
        """A base's pose and speeds at steady time `mono`."""
        self.states[robot].base = contract.base_state(self.robots[robot].origin, position, orientation, linear,
                                                      angular)
        self.liveness.seen(topic, mono)

    def joint_states(self, robot: str, topic: str, names: list[str], positions: list[float], mono: float) -> None:
        """An arm's joint positions (the configured joints; others ignored)."""
        self.states[robot].joints = contract.joint_positions(names, positions, tuple(self.cfg.joint_names))
        self.liveness.seen(topic, mono)

    def image(self, robot: str, topic: str, mono: float) -> None:
        """One camera image arrived (counted, not decoded)."""
        state = self.states[robot]
        state.camera = replace(state.camera, images=state.camera.images + 1)
        self.liveness.seen(topic, mono)

    def camera_info(self, robot: str, topic: str, width: int, height: int, frame_id: str, mono: float) -> None:
        """The camera's resolution and frame."""
        state = self.states[robot]
        state.camera = replace(state.camera, width=width, height=height, frame_id=frame_id[:64])
        self.liveness.seen(topic, mono)

    def validate(self, robot: str, raw: list[tuple[str, str]]) -> list[Step]:
        """A plan's calls, checked whole against the schema of the robot's kind (InvalidInput naming what is wrong)."""
        return self.schema.validate(self.robots[robot].kind, raw, self.executors[robot].poses)

    def missing(self, clock_missing: bool) -> list[str]:
        """Contract topics that have not delivered yet, and /clock while ROS time has not started (`clock_missing`:
        use_sim_time and ROS time 0)."""
        return self.liveness.missing() + ([names.CLOCK] if clock_missing else [])

    def waiting(self, clock_missing: bool) -> list[str]:
        """Before the episode, at a control tick: what it still waits for ([]: it may start); a tick that waits is
        counted."""
        missing = self.missing(clock_missing)
        if missing:
            self.counts["ticks_waiting_for_contract"] += 1
        return missing

    def plan_current(self, stamp_s: float, done: bool) -> bool:
        """A plan stamped `stamp_s` is of the running episode (not of an earlier run, latched, nor after it ended)."""
        return self.judge is not None and not done and not 0 < stamp_s < self.episode_start_s

    def set_plan(self, robot: str, plan_id: str, calls: list[Step]) -> None:
        """Hand a validated plan to the robot's executor."""
        self.executors[robot].set_plan(plan_id, calls)
        self.counts["plans_applied"] += 1

    # ------------------------------------------------------------------ episode and control

    def start(self, now: float) -> list[FeedEntry]:
        """Start the episode at ROS time `now`: the scene, the tasks and the constraints it opens with."""
        cfg = self.cfg
        self.episode_start_s = now
        self.judge = feed.EpisodeJudge(self.goals, self.poses, cfg.goal_tolerance_m, cfg.joint_tolerance_rad,
                                       cfg.max_episode_s, started=now)
        return feed.episode_entries(list(self.robots.values()), cfg.task_texts(), self.goals, cfg.constraints,
                                    self.schema, self.poses, cfg.frame_id)

    def tick(self, now: float, mono: float, done: bool) -> Tick:
        """One control tick at ROS time `now`, steady time `mono`: every robot executes, or is held while its control
        topics are stale or the episode is `done`."""
        out = Tick()
        stale = set(self.liveness.stale(mono))
        self.ticks += 1
        for name, spec in self.robots.items():
            state, executor = self.states[name], self.executors[name]
            lost = [t for t in self.control_topics[name] if t in stale]
            if lost or done:
                self._hold(spec, f"{', '.join(lost)} stale" if lost else EPISODE_OVER, out)
                continue
            if self.holding[name]:
                self.holding[name] = False
                out.resumed.append(name)
            command, outcomes = executor.tick(now, state)
            out.commands.append((spec, command))
            out.outcomes += outcomes
            goal = self.judge.update(now, name, state)
            if goal is not None:
                out.goals.append((name, goal))
        self.judge.record_positions({name: self.position(name) for name in self.robots})
        out.finished = not done and self.judge.finished(now)
        return out

    def _hold(self, spec: RobotSpec, why: str, out: Tick) -> None:
        """Hold a robot: zero velocity every tick for a base, its measured joints once for an arm."""
        first = not self.holding[spec.name]
        if first:
            self.holding[spec.name] = True
            self.counts["holds"] += 1
            out.held.append((spec.name, why))
        if spec.kind == RobotKind.MOBILE or first:
            out.commands.append((spec, self.executors[spec.name].hold(self.states[spec.name])))

    def hold_commands(self) -> list[tuple[RobotSpec, Command]]:
        """The command that holds each robot now (a base: zero velocity; an arm: its measured joints)."""
        return [(spec, self.executors[name].hold(self.states[name])) for name, spec in self.robots.items()]

    def end(self) -> EpisodeMetrics:
        """End the episode: every executor drops its plan; the judge's metrics."""
        for executor in self.executors.values():
            executor.clear()
        return self.judge.metrics(self.ticks)

    # ------------------------------------------------------------------ reports

    def position(self, robot: str) -> tuple[float, float]:
        """Where a robot is in frame_id: a base from its odometry, an arm at its base."""
        base = self.states[robot].base
        pose = base.pose if base is not None else self.robots[robot].origin
        return pose.x, pose.y

    def agent_reports(self) -> list[AgentReport]:
        """Every robot as an agent (one more state step): position, tracking error, whether it has a goal."""
        self.state_step += 1
        return [AgentReport(name, self.state_step, *self.position(name), float(self.executors[name].tracking_error),
                            self.executors[name].has_goal) for name in self.robots]

    def observation_entries(self) -> list[FeedEntry]:
        """Every robot's latest observation as its state entry."""
        return [feed.observation_entry(spec, self.states[name], self.executors[name].current, self.poses, self.ticks)
                for name, spec in self.robots.items()]

    def world_state(self, world: str, episode: int) -> WorldState:
        """The robots and their tasks as far as the bridge reads them."""
        reached = self.judge.reached if self.judge is not None else {}
        return feed.world_state(world, episode, self.state_step, self.robots, self.states, self.executors,
                                self.holding, self.goals, reached, self.poses)

    def progress(self, now: float) -> str:
        """Where the episode is (brace-run's progress line)."""
        if self.judge is None:
            return WAITING
        return f"episode {now - self.episode_start_s:6.1f} s, goals {len(self.judge.reached)}/{len(self.judge.goals)}"

    def outcome_entry(self, outcome: Outcome) -> FeedEntry:
        """A skill's outcome, counted, as its context entry."""
        self.counts["outcomes_succeeded" if outcome.success else "outcomes_failed"] += 1
        return feed.outcome_entry(outcome, self.ticks)

    def report(self, mono: float, done: bool, waited_s: Optional[float], clock_missing: bool) -> tuple[Health, str]:
        """The episode's state, health(mono), and while the active bridge waits for the contract (`waited_s` since it
        was activated; None: inactive) what it waits for: ERROR past wait_timeout_s, else the status message."""
        episode = "ended" if done else "running" if self.judge is not None else WAITING
        health = Health({"episode": episode}) + self.health(mono)
        missing = self.missing(clock_missing) if self.judge is None and waited_s is not None else []
        if missing and waited_s > self.cfg.wait_timeout_s:
            return health + Health(errors=(f"contract topics missing after {waited_s:.0f} s: {', '.join(missing)}",)), ""
        return health, f"waiting for Isaac Sim's topics: {', '.join(missing)}" if missing else ""

    def health(self, mono: float) -> Health:
        """Each robot's skill and each contract topic's age; ERROR naming the stale topics (and whether robots are
        held for them)."""
        values: dict = {f"{name}.skill": "holding" if self.holding[name] else
                        executor.current.text() if executor.current else "idle"
                        for name, executor in self.executors.items()}
        for topic in self.liveness.last:
            age = self.liveness.age(topic, mono)
            values[f"age_s.{topic}"] = "never" if age == float("inf") else round(age, 2)
        stale = self.liveness.stale(mono)
        if not stale:
            return Health(values)
        held = [t for t in stale if any(t in ts for ts in self.control_topics.values())]
        return Health(values, errors=(f"stale contract topics: {', '.join(stale)}" + ("; robots held" if held else ""),))
