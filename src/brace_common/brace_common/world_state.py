"""A world's structured state: the scene graph (entities, relations) and every agent's activity, as dataclasses.

Every world builds a `WorldState` from its own core each step (a ROS-free function next to the world) and
publishes it on `world_state` each step and whenever it changes between steps (`StatePublication` decides). The
conversion to and from brace_msgs/WorldState lives here too, in one place (`world_state_msg`,
`world_state_from_msg`). What the modules downstream read: a scene graph SG_t = (V_t, E_t) for loop detection and
experience retrieval (GiG), object states for a visual verifier (OmniAct), the state a one-step lookahead starts
from (GiG's Bounded Lookahead).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Optional

from brace_msgs import msg as m
from builtin_interfaces.msg import Time
from geometry_msgs.msg import Pose as PoseMsg

from .validation import InvalidInput, shorten
from .vocabulary import Activity, Observability, Predicate

MAX_ENTITIES = 4096
"""Entities of one received state (the largest a shipped world publishes has a few hundred); more: refused."""
MAX_RELATIONS = 16_384
"""Relations of one received state."""
MAX_ACTIVITIES = 1024
"""Agent activities of one received state."""
MAX_ATTRIBUTES = 64
"""Attributes of one entity."""
MAX_STATE_CHARS = 1_048_576
"""The characters of one received state's strings together (ids, types, states, attributes, parameters)."""
TASK_TYPE = "task"
"""The type of a task entity (an agent is `assigned` to it)."""
TASK_LOST = "lost"
"""A task entity's state when the world says it can no longer be done (a TextWorld game lost)."""


@dataclass(frozen=True)
class Pose:
    """A position (m) and an orientation (unit quaternion) in the state's frame."""

    x: float = 0.0
    y: float = 0.0
    z: float = 0.0
    qx: float = 0.0
    qy: float = 0.0
    qz: float = 0.0
    qw: float = 1.0

    @classmethod
    def planar(cls, x: float, y: float, z: float = 0.0, yaw: float = 0.0) -> Pose:
        """A pose at (x, y, z) turned `yaw` rad about z."""
        return cls(float(x), float(y), float(z), 0.0, 0.0, math.sin(yaw / 2.0), math.cos(yaw / 2.0))

    @property
    def yaw(self) -> float:
        """The heading (rotation about z, rad)."""
        return math.atan2(2.0 * (self.qw * self.qz + self.qx * self.qy), 1.0 - 2.0 * (self.qy ** 2 + self.qz ** 2))


@dataclass(frozen=True)
class Entity:
    """A node of the scene graph: an agent, an object, a place or a task (brace_msgs/Entity)."""

    id: str
    type: str
    state: str = ""                       # object state ("held", "in_bowl", ...); "unknown": nothing observes it
    pose: Optional[Pose] = None           # None: the world does not know where it is
    attributes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Relation:
    """An edge of the scene graph: subject - predicate - object, both Entity ids (brace_msgs/Relation)."""

    subject: str
    predicate: str                        # a vocabulary.Predicate value, or a world's own
    object: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "predicate", getattr(self.predicate, "value", self.predicate))  # Predicate -> str


@dataclass(frozen=True)
class AgentActivity:
    """What one agent is doing: its activity and the plan step it executes (brace_msgs/AgentActivity)."""

    agent_id: str
    activity: Activity = Activity.IDLE
    action: str = ""                      # the current step's skill; "" when idle
    parameters_json: str = ""             # the current step's parameters as a JSON object; "" when idle
    index: int = 0                        # position of the current step in the plan
    plan_steps: int = 0                   # steps in the plan
    # how far the step's execution is off (m), by the world's own measure (PushT's contact offset); NaN = none. A
    # measurement, not part of what the agent does: activities compare without it (NaN never equals itself).
    tracking_error: float = field(default=math.nan, compare=False)

    def __post_init__(self) -> None:
        if not (math.isnan(self.tracking_error) or 0.0 <= self.tracking_error < math.inf):
            raise ValueError(f"{self.agent_id}: tracking_error {self.tracking_error} is neither NaN nor finite >= 0")


@dataclass(frozen=True)
class WorldState:
    """A world at one step: its scene graph and its agents' activities (brace_msgs/WorldState).

    InvalidInput (a ValueError; reason repeated_ids, dangling_relations, unknown_agents) when an id repeats or a
    relation or an activity names an entity the state does not hold.
    """

    world: str
    episode: int
    step: int
    entities: tuple[Entity, ...] = ()
    relations: tuple[Relation, ...] = ()
    agents: tuple[AgentActivity, ...] = ()
    observability: Observability = Observability.FULL

    def __post_init__(self) -> None:
        object.__setattr__(self, "entities", tuple(self.entities))
        object.__setattr__(self, "relations", tuple(self.relations))
        object.__setattr__(self, "agents", tuple(self.agents))
        ids = [e.id for e in self.entities]
        known = set(ids)
        if len(known) != len(ids):  # linear: a state of 40,000 entities is refused in milliseconds
            repeated = sorted(i for i, n in Counter(ids).items() if n > 1)
            raise InvalidInput("repeated_ids", f"entity ids repeat: {[shorten(i) for i in repeated[:5]]}"
                             f"{f' and {len(repeated) - 5} more' if len(repeated) > 5 else ''}")
        dangling = [r for r in self.relations if r.subject not in known or r.object not in known]
        if dangling:
            raise InvalidInput("dangling_relations", f"relations name entities the state does not hold: "
                             f"{[(shorten(r.subject), r.predicate, shorten(r.object)) for r in dangling[:3]]}")
        strangers = [a.agent_id for a in self.agents if a.agent_id not in known]
        if strangers:
            raise InvalidInput("unknown_agents", f"activities of agents without an entity: "
                               f"{[shorten(a) for a in strangers[:5]]}")

    def entity(self, entity_id: str) -> Entity:
        """The entity with this id; KeyError when the state has none."""
        for e in self.entities:
            if e.id == entity_id:
                return e
        raise KeyError(entity_id)

    def activity(self, agent_id: str) -> AgentActivity:
        """The agent's activity; KeyError when the state has none."""
        for a in self.agents:
            if a.agent_id == agent_id:
                return a
        raise KeyError(agent_id)

    def related(self, predicate: str, subject: Optional[str] = None) -> list[Relation]:
        """The relations with this predicate (and subject, when given)."""
        return [r for r in self.relations if r.predicate == predicate and subject in (None, r.subject)]

    def task_lost(self, agent_id: str) -> bool:
        """Whether a task the agent is assigned to is lost (a task entity in state TASK_LOST)."""
        assigned = {r.object for r in self.related(Predicate.ASSIGNED.value, agent_id)}
        return any(e.id in assigned and e.type == TASK_TYPE and e.state == TASK_LOST for e in self.entities)


@dataclass(frozen=True)
class StateDiff:
    """What changed from one state to the next (ids and relations; empty when nothing did)."""

    added: tuple[str, ...] = ()           # entity ids new in the later state
    removed: tuple[str, ...] = ()         # entity ids gone from it
    changed: tuple[str, ...] = ()         # entity ids whose type, state, pose or attributes differ
    relations_added: tuple[Relation, ...] = ()
    relations_removed: tuple[Relation, ...] = ()
    agents_changed: tuple[str, ...] = ()  # agent ids whose activity or current step differ (or are new / gone)

    def __bool__(self) -> bool:
        return any((self.added, self.removed, self.changed, self.relations_added, self.relations_removed,
                    self.agents_changed))


def diff(before: WorldState, after: WorldState) -> StateDiff:
    """What differs between two states of a world (the step number aside)."""
    a = {e.id: e for e in before.entities}
    b = {e.id: e for e in after.entities}
    ra, rb = set(before.relations), set(after.relations)
    ga = {x.agent_id: x for x in before.agents}
    gb = {x.agent_id: x for x in after.agents}
    return StateDiff(
        added=tuple(i for i in b if i not in a), removed=tuple(i for i in a if i not in b),
        changed=tuple(i for i in b if i in a and a[i] != b[i]),
        relations_added=tuple(r for r in after.relations if r not in ra),
        relations_removed=tuple(r for r in before.relations if r not in rb),
        agents_changed=tuple(sorted(i for i in ga.keys() | gb.keys() if ga.get(i) != gb.get(i))))


def changed(before: Optional[WorldState], after: WorldState) -> bool:
    """True when `after` says something `before` did not: another world or episode, or a different scene."""
    if before is None or (before.world, before.episode, before.observability) != (
            after.world, after.episode, after.observability):
        return True
    return bool(diff(before, after))


class StatePublication:
    """Which states a world publishes: each new step, and a state that changed since the last one published."""

    def __init__(self) -> None:
        self.last: Optional[WorldState] = None
        self.published = 0

    def due(self, state: WorldState) -> bool:
        """True (and remembered as published) when `state` is of a new step or differs from the last published."""
        last = self.last
        if last is not None and (last.episode, last.step) == (state.episode, state.step) and not changed(last, state):
            return False
        self.last = state
        self.published += 1
        return True


class PlanProgress:
    """An agent's plan as a world that does not execute it sees it (the PickFruit twin, operator episodes).

    The executor runs the plan; the world only hears the plan and the executor's outcomes: a succeeded outcome
    of the current step's skill moves to the next step, a failed one marks the agent FAILED until a new plan.
    """

    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id
        self.steps: list[tuple[str, str]] = []   # (action, parameters_json)
        self.index = 0
        self.failed = False

    def plan(self, steps: Iterable[tuple[str, str]]) -> None:
        """A new plan: its first step is current."""
        self.steps, self.index, self.failed = list(steps), 0, False

    def outcome(self, action: str, success: bool) -> None:
        """The executor finished a step (an outcome of another skill than the current one is ignored)."""
        if self.index >= len(self.steps) or self.steps[self.index][0] != action:
            return
        if success:
            self.index += 1
            self.failed = False
        else:
            self.failed = True

    def clear(self) -> None:
        """No plan (a new episode)."""
        self.plan([])

    def running(self) -> list[tuple[str, str]]:
        """The running step and those after it, as (action, parameters_json); empty when idle or failed."""
        return [] if self.failed else list(self.steps[self.index:])

    def activity(self) -> AgentActivity:
        """The agent's activity as far as the world knows it."""
        if self.index >= len(self.steps):
            return AgentActivity(self.agent_id, Activity.IDLE, index=self.index, plan_steps=len(self.steps))
        action, parameters = self.steps[self.index]
        kind = Activity.FAILED if self.failed else Activity.EXECUTING
        return AgentActivity(self.agent_id, kind, action, parameters, self.index, len(self.steps))


def parameters_text(parameters: dict) -> str:
    """A step's parameters as PlanStep.parameters_json writes them (keys in the plan's order)."""
    return json.dumps(parameters, separators=(", ", ": "))


# ---------------------------------------------------------------------- brace_msgs/WorldState


def _pose_msg(pose: Pose) -> PoseMsg:
    out = PoseMsg()
    out.position.x, out.position.y, out.position.z = float(pose.x), float(pose.y), float(pose.z)
    o = out.orientation
    o.x, o.y, o.z, o.w = float(pose.qx), float(pose.qy), float(pose.qz), float(pose.qw)
    return out


def world_state_msg(state: WorldState, stamp: Time, frame_id: str) -> m.WorldState:
    """The WorldState message of `state`, stamped, poses in `frame_id`."""
    msg = m.WorldState(world=state.world, episode=int(state.episode), step=int(state.step),
                       observability=int(state.observability))
    msg.header.stamp, msg.header.frame_id = stamp, frame_id
    for e in state.entities:
        entity = m.Entity(id=e.id, type=e.type, state=e.state, has_pose=e.pose is not None,
                          attributes=[m.KeyValue(key=k, value=str(v)) for k, v in e.attributes.items()])
        if e.pose is not None:
            entity.pose = _pose_msg(e.pose)
        msg.entities.append(entity)
    msg.relations = [m.Relation(subject=r.subject, predicate=r.predicate, object=r.object)
                     for r in state.relations]
    msg.agents = [m.AgentActivity(agent_id=a.agent_id, activity=int(a.activity), action=a.action,
                                  parameters_json=a.parameters_json, index=int(a.index), plan_steps=int(a.plan_steps),
                                  tracking_error=float(a.tracking_error))
                  for a in state.agents]
    return msg


def received_world_state(msg: m.WorldState, counts: MutableMapping[str, int], rejections) -> Optional[WorldState]:
    """The state a received WorldState message carries; None when it is inconsistent, counted in
    `counts["malformed_world_states"]` and logged through `rejections` (brace_common.validation.Rejections)."""
    try:
        return world_state_from_msg(msg)
    except ValueError as exc:
        counts["malformed_world_states"] += 1
        rejections.reject("world_state", exc, msg.world)
        return None


def check_world_state_size(msg: m.WorldState) -> None:
    """InvalidInput when `msg` holds more than a state may (MAX_ENTITIES, MAX_RELATIONS, MAX_ACTIVITIES,
    MAX_ATTRIBUTES, MAX_STATE_CHARS); the counts are checked before any item is read, the rest in one pass."""
    for name, items, limit in (("entities", msg.entities, MAX_ENTITIES), ("relations", msg.relations, MAX_RELATIONS),
                               ("agents", msg.agents, MAX_ACTIVITIES)):
        if len(items) > limit:
            raise InvalidInput(f"many_{name}", f"the state has {len(items)} {name} (at most {limit})")
    chars = len(msg.world)
    for e in msg.entities:
        if len(e.attributes) > MAX_ATTRIBUTES:
            raise InvalidInput("many_attributes", f"entity '{shorten(e.id)}' has {len(e.attributes)} attributes "
                               f"(at most {MAX_ATTRIBUTES})")
        chars += len(e.id) + len(e.type) + len(e.state) + sum(len(kv.key) + len(kv.value) for kv in e.attributes)
    chars += sum(len(r.subject) + len(r.predicate) + len(r.object) for r in msg.relations)
    chars += sum(len(a.agent_id) + len(a.action) + len(a.parameters_json) for a in msg.agents)
    if chars > MAX_STATE_CHARS:
        raise InvalidInput("long_world_state", f"the state's strings hold {chars} characters (at most "
                           f"{MAX_STATE_CHARS})")


def world_state_from_msg(msg: m.WorldState) -> WorldState:
    """The state a WorldState message carries (InvalidInput when it is larger than a state may be; ValueError when
    it is inconsistent: see WorldState). Linear in the message's size."""
    check_world_state_size(msg)
    entities = []
    for e in msg.entities:
        pose = None
        if e.has_pose:
            p, o = e.pose.position, e.pose.orientation
            pose = Pose(p.x, p.y, p.z, o.x, o.y, o.z, o.w)
        entities.append(Entity(e.id, e.type, e.state, pose, {kv.key: kv.value for kv in e.attributes}))
    return WorldState(
        msg.world, msg.episode, msg.step, tuple(entities),
        tuple(Relation(r.subject, r.predicate, r.object) for r in msg.relations),
        tuple(AgentActivity(a.agent_id, Activity(a.activity), a.action, a.parameters_json, a.index, a.plan_steps,
                            float(getattr(a, "tracking_error", math.nan)))   # absent from states recorded before it
              for a in msg.agents),
        Observability(msg.observability))
