"""The collision monitor of a team (ROS-free): the latest pose each agent's source reported, each agent's commands
through the zones, and what a node publishes and counts.

An agent whose own pose is missing or older than `source_timeout_s` is stopped (it cannot be checked); another
agent's older pose stays an obstacle where it was last seen, standing still. Interventions are counted per agent
and zone when they begin (an agent held in the stop zone for a hundred commands is one stop).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field, replace
from typing import Optional

from brace_common.config import ConfigError, check_agent_ids, param
from brace_common.counters import Counters, Health
from brace_common.vocabulary import ZoneAction

from .zones import MOTION_ZONES, Motion, Obstacle, Vec3, Verdict, ZoneConfig, check, make_way, nearest, restore, right_of_way

COUNTED = {ZoneAction.STOP: "stops", ZoneAction.SLOWDOWN: "slowdowns", ZoneAction.APPROACH: "approaches",
           ZoneAction.RESTORE: "restores", ZoneAction.YIELD: "yields"}
"""The counter family of each acting zone (per agent: `stops.<agent>`), and the report's column stem."""


@dataclass
class MonitorConfig(ZoneConfig):
    """The zones, the agents a monitor guards and how old their sources may be."""

    agents: list[str] = param(["carter_1", "carter_2"], "agents whose commanded motion passes the monitor; each is "
                              "an obstacle to the others")
    source_timeout_s: float = param(1.0, "an agent whose own pose is older than this is stopped; another's older "
                                    "pose stays an obstacle where it was last seen (s)", 0.01, 3600.0)
    static_obstacles: list[str] = param([], "obstacles that do not move, in the world frame: 'id: x y' or 'id: x y "
                                        "z' (a point: an arm's base, a pillar) or 'id: x y z hx hy hz' (a keep-out "
                                        "box: centre and half extents, m)")

    def validate(self) -> None:
        """The zones' rules, a non-empty list of distinct agent ids, and obstacles that parse."""
        super().validate()
        check_agent_ids("agents", self.agents)
        if not self.agents or len(set(self.agents)) != len(self.agents):
            raise ConfigError("agents", f"{self.agents}: at least one agent, each once")
        self.fixed()

    def fixed(self) -> tuple[Obstacle, ...]:
        """The static obstacles; ConfigError naming `static_obstacles` for an entry that does not parse."""
        return tuple(static_obstacle(entry) for entry in self.static_obstacles)


def static_obstacle(entry: str) -> Obstacle:
    """An obstacle from 'id: x y [z]' (a point) or 'id: x y z hx hy hz' (a box); ConfigError otherwise."""
    name, sep, rest = entry.partition(":")
    try:
        values = [float(v) for v in rest.split()]
    except ValueError:
        values = []
    if not sep or not name.strip() or len(values) not in (2, 3, 6) or not all(map(math.isfinite, values)) or \
            any(h <= 0.0 for h in values[3:]):
        raise ConfigError("static_obstacles", f"'{entry}' is not 'id: x y [z]' or 'id: x y z hx hy hz' (half "
                          "extents > 0)")
    position = (values[0], values[1], values[2] if len(values) > 2 else 0.0)
    return Obstacle(name.strip(), position, half_extents_m=tuple(values[3:]) if len(values) == 6 else None)


@dataclass(frozen=True)
class Sensed:
    """One agent's latest pose from its source: where, heading, velocity (world frame) and when (s, steady)."""

    position: Vec3
    yaw: float
    velocity: Vec3
    stamp_s: float


@dataclass(frozen=True)
class Guarded:
    """A command after the monitor: the motion let through, the verdict, and whether the agent's state changed
    (publish it) or an intervention began (an outcome for the trigger monitor when it is a stop)."""

    motion: Optional[Motion]
    verdict: Verdict
    changed: bool
    began: bool


@dataclass
class CollisionMonitor:
    """The zones applied to every command of the agents it guards, with the counts and the state they report."""

    config: MonitorConfig
    sensed: dict[str, Sensed] = field(default_factory=dict)
    last: dict[str, Verdict] = field(default_factory=dict)
    min_distance_m: dict[str, float] = field(default_factory=dict)
    heading: dict[str, Vec3] = field(default_factory=dict)   # commanded velocity (world frame) of each moving agent
    counts: Counters = field(init=False)

    def __post_init__(self) -> None:
        self.fixed = self.config.fixed()
        agents = self.config.agents
        self.rank = {a: i for i, a in enumerate(agents)}   # the right of way: earlier in `agents` first
        stems = [stem for action, stem in COUNTED.items() if action.label not in MOTION_ZONES or
                 action.label in self.config.zones]
        self.counts = Counters(["commands", "stale_sources", "unknown_agents"] +
                               [f"{stem}.{a}" for stem in stems for a in agents],
                               warn=["stale_sources", "unknown_agents"])
        self._lock = threading.Lock()

    def sense(self, agent: str, sensed: Sensed, guarded: bool = True) -> None:
        """An agent's pose from its source (odometry, the simulator's state); with `guarded` false, of one it does
        not guard (an obstacle to the others all the same)."""
        if guarded and agent not in self.config.agents:
            self.counts.add("unknown_agents")
            return
        with self._lock:
            self.sensed[agent] = sensed
            for other, s in self.sensed.items():
                if other != agent:
                    d = math.dist(sensed.position, s.position)
                    for a in (agent, other):
                        self.min_distance_m[a] = min(self.min_distance_m.get(a, math.inf), d)

    def obstacles(self, agent: str, now_s: float, extra: tuple[Obstacle, ...] = ()) -> list[Obstacle]:
        """The other agents where they were last sensed (moving as they were; standing still once their pose is
        older than source_timeout_s), the static obstacles, and `extra` (what the world reports now: objects'
        keep-out boxes)."""
        timeout = self.config.source_timeout_s
        with self._lock:
            others = [Obstacle(a, s.position, s.velocity if now_s - s.stamp_s <= timeout else (0.0, 0.0, 0.0))
                      for a, s in sorted(self.sensed.items()) if a != agent]
        return others + list(self.fixed) + list(extra)

    def guard(self, agent: str, linear: Vec3, yaw_rate: float, now_s: float,
              extra: tuple[Obstacle, ...] = ()) -> Guarded:
        """One command of `agent` (its body-frame velocity and yaw rate) through the zones at steady time `now_s`."""
        self.counts.add("commands")
        own = self.sensed.get(agent)
        if own is None or now_s - own.stamp_s > self.config.source_timeout_s:
            self.counts.add("stale_sources")
            age = "no pose yet" if own is None else f"its pose is {now_s - own.stamp_s:.2f} s old"
            verdict = Verdict(ZoneAction.STOP, 0.0, detail=f"{age} (> source_timeout_s "
                              f"{self.config.source_timeout_s:g} s): cannot check its motion")
            return self._settle(agent, None, verdict) if self.config.enable else \
                self._settle(agent, None, replace(verdict, action=ZoneAction.NONE, speed_ratio=1.0))
        motion = Motion(own.position, own.yaw, linear, yaw_rate, own.velocity)
        if motion.moving:
            c, s = math.cos(own.yaw), math.sin(own.yaw)
            self.heading[agent] = (c * linear[0] - s * linear[1], s * linear[0] + c * linear[1], linear[2])
        else:
            self.heading.pop(agent, None)
        verdict = check(self.config, motion, self.obstacles(agent, now_s, extra))
        if "yield" in self.config.zones:   # the right of way is only looked up where it can act
            verdict = right_of_way(self.config, verdict, self._ahead(agent))
        return self._settle(agent, motion, verdict)

    def idle(self, agent: str) -> None:
        """The agent has no command now: it moves under none of its own (no right of way to claim)."""
        self.heading.pop(agent, None)

    def _ahead(self, agent: str) -> set[str]:
        """The agents with the right of way over `agent` that move under their own command now."""
        rank = self.rank.get(agent, len(self.rank))
        return {a for a in self.heading if self.rank.get(a, len(self.rank)) < rank}

    def _blocked(self, agent: str, obstacles: list[Obstacle]) -> list[tuple[Obstacle, Vec3]]:
        """The agents moving under their own command whose motion `agent` limits now and who have the right of way
        over it (any of them, when `agent` has no command of its own), with their commanded velocities."""
        ahead = self._ahead(agent) if agent in self.heading else set(self.heading) - {agent}
        limited = {a for a in ahead if (v := self.last.get(a)) is not None and v.obstacle == agent and
                   v.speed_ratio < 1.0 and v.action is not ZoneAction.RESTORE}
        return [(o, self.heading[o.id]) for o in obstacles if o.id in limited]

    def restore(self, agent: str, speed_mps: float, now_s: float) -> Optional[Guarded]:
        """The restore zone for `agent`, whose command does not move it (held, or none): RESTORE with the motion out
        at `speed_mps` (world frame), NONE when a restore just ended, None when there is nothing to change (no
        restore zone, a stale pose, not inside)."""
        own = self.sensed.get(agent)
        if own is None or now_s - own.stamp_s > self.config.source_timeout_s:
            return None
        obstacles = self.obstacles(agent, now_s)
        still = Motion(own.position, own.yaw, (0.0, 0.0, 0.0), 0.0, own.velocity)
        found = restore(self.config, still, obstacles, speed_mps) or \
            make_way(self.config, still, self._blocked(agent, obstacles), speed_mps)
        if found is None:
            previous = self.last.get(agent)
            if previous is None or previous.action not in (ZoneAction.RESTORE, ZoneAction.YIELD) or \
                    (previous.action is ZoneAction.YIELD and agent in self.heading):   # its command's yield stands
                return None
            return self._settle(agent, None, Verdict(ZoneAction.NONE, 1.0, *nearest(own.position, obstacles)))
        verdict, velocity = found
        return replace(self._settle(agent, None, verdict), motion=Motion(own.position, 0.0, velocity))

    def _settle(self, agent: str, motion: Optional[Motion], verdict: Verdict) -> Guarded:
        previous = self.last.get(agent)
        began = verdict.action is not ZoneAction.NONE and (previous is None or previous.action != verdict.action)
        if began:
            self.counts.add(f"{COUNTED[verdict.action]}.{agent}")
        changed = previous is None or (previous.action, previous.obstacle) != (verdict.action, verdict.obstacle)
        self.last[agent] = verdict
        let_through = motion.scaled(verdict.speed_ratio) if motion is not None and verdict.speed_ratio < 1.0 \
            else motion
        return Guarded(let_through, verdict, changed, began)


    def health(self) -> Health:
        """Counts, the closest any agent came to another, and every agent's current action."""
        closest = min(self.min_distance_m.values(), default=math.inf)
        values = {"min_distance_m": round(closest, 3) if math.isfinite(closest) else "none",
                  **{f"action.{a}": self.last[a].action.label for a in sorted(self.last)}}
        return self.counts.health() + Health(values)
