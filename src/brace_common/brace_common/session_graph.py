"""GiG's outer graph per agent (Sec. 3.1.2): the states an agent went through this episode and the actions between.

Nodes are states (a scene graph's key, and its embedding z_t when an encoder gives one); an edge is the action the
agent executed from one state to the next. A state equal to the previous one (the agent waited, or the world
republished it) is the same node: no edge. A revisit is a state equal to a node visited before the previous one:
the same key, or an embedding within `tau` of one (GiG's loop detection). The path from that node back to it is
the loop: its steps and the actions that brought the agent back.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Optional

from .action_schema import Step
from .scene_graph import SceneGraph, agent_view
from .world_state import WorldState

LOOP_ACTIONS_SHOWN = 4
"""Actions of a loop's path a memory line names (the newest; a longer path says how many it left out)."""


@dataclass(frozen=True)
class Visit:
    """One node of the path: the state's key, its embedding (empty: none), the first and last step it held, and
    the action the agent executed from it (its newest activity there)."""

    key: str
    z: tuple[float, ...] = ()
    step: int = 0
    last_step: int = 0
    action: str = ""


@dataclass(frozen=True)
class Loop:
    """A revisit: the agent is back in the state it held at `since_step`, after `actions` (oldest first)."""

    agent_id: str
    key: str
    since_step: int
    step: int
    actions: tuple[str, ...]
    distance: float = 0.0          # 0 for an exact revisit; the embedding distance otherwise

    @property
    def length(self) -> int:
        """Actions on the loop's path."""
        return len(self.actions)

    def line(self) -> str:
        """The loop as the planner reads it (GiG's loop warning). One action executed across several states (a
        move_to through the cells on its way) is named once: the line does not grow with how finely the world
        reported the way."""
        calls = [a for i, a in enumerate(self.actions) if i == 0 or a != self.actions[i - 1]]
        shown = [action_text(a) for a in calls[-LOOP_ACTIONS_SHOWN:]]
        more = f"{len(calls) - len(shown)} earlier actions, then " if len(calls) > len(shown) else ""
        return (f"loop warning: {self.agent_id} was in this state at step {self.since_step}; the actions that "
                f"brought it back: {more}{'; '.join(shown)}")

    def detail(self) -> str:
        """A trigger's detail for the loop."""
        return f"state of step {self.since_step} again after {self.length} actions: {'; '.join(self.actions)}"


def distance(a: Sequence[float], b: Sequence[float]) -> float:
    """Euclidean distance of two embeddings (GiG's Dist)."""
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=True)))


@dataclass
class SessionGraph:
    """One agent's session graph G_session (reset per episode). `tau` > 0 also matches embeddings within it."""

    agent_id: str
    tau: float = 0.0
    path: list[Visit] = field(default_factory=list)
    loop: Optional[Loop] = None    # the loop the current state closed (None: it closed none)
    first_time: bool = False       # the current state is one the agent had not held before this episode
    seen: set[str] = field(default_factory=set)   # every state key the agent held this episode

    def __post_init__(self) -> None:
        if not math.isfinite(self.tau) or self.tau < 0:
            raise ValueError(f"tau {self.tau} must be finite and >= 0")

    def current(self) -> Optional[Visit]:
        """The state the agent is in (None before the first)."""
        return self.path[-1] if self.path else None

    def match(self, key: str, z: Sequence[float] = ()) -> Optional[tuple[int, float]]:
        """The latest visited node (but the current one) that is this state: (position in the path, distance);
        an exact key first, else the nearest embedding within tau."""
        end = len(self.path) - 1   # the current node is not a revisit of itself
        if key in self.seen:
            for i in range(end - 1, -1, -1):
                if self.path[i].key == key:
                    return i, 0.0
        if self.tau <= 0 or not z:
            return None
        best = min(((distance(z, self.path[i].z), i) for i in range(end) if self.path[i].z), default=None)
        return (best[1], best[0]) if best is not None and best[0] < self.tau else None

    def visit(self, step: int, key: str, z: Sequence[float] = (), doing: str = "") -> Optional[Loop]:
        """The agent holds state `key` (embedding `z`) at `step`, executing `doing` (its activity: the action that
        takes it on from this state; empty when idle); the loop when it revisits (Alg. 1 line 4). A state equal to
        the previous one stays that node, and its newest activity is the edge's action."""
        last = self.current()
        if last is not None and last.key == key:
            self.path[-1] = Visit(last.key, last.z, last.step, step, doing or last.action)
            return None
        hit = self.match(key, z) if last is not None else None
        if last is not None and not last.action:
            self.path[-1] = Visit(last.key, last.z, last.step, last.last_step, "(no action)")
        self.path.append(Visit(key, tuple(float(v) for v in z), step, step, doing))
        self.first_time = key not in self.seen
        self.seen.add(key)
        self.loop = None
        if hit is None:
            return None
        at, d = hit
        actions = tuple(v.action for v in self.path[at:-1])
        self.loop = Loop(self.agent_id, self.path[at].key, self.path[at].step, step, actions, d)
        return self.loop

    def trajectory(self) -> list[Visit]:
        """The path so far, oldest first (what the experience bank keeps of a successful episode)."""
        return list(self.path)


Embedder = Callable[[list[SceneGraph]], list[Sequence[float]]]
"""Scene graphs -> their embeddings z_t (GiG's GNN encoder), one per graph."""


def doing(state: WorldState, agent_id: str) -> str:
    """The agent's activity in `state` as an action text ("move_to(dock_0)"); empty when it is idle or unknown."""
    try:
        a = state.activity(agent_id)
    except KeyError:
        return ""
    return f"{a.action}({a.parameters_json})" if a.action else ""


def action_text(text: str) -> str:
    """An action text of `doing` as a plan step reads in a prompt ("move_to(target=shelf_3)"); other text as it is."""
    step = doing_step(text)
    return step.text() if step is not None else text


def doing_step(text: str) -> Optional[Step]:
    """The step an action text of `doing` names ("move_to({...})" -> Step), or None when it is no such text."""
    action, paren, rest = text.partition("(")
    if not paren or not rest.endswith(")") or not action:
        return None
    try:
        parameters = json.loads(rest[:-1] or "{}")
    except ValueError:
        return None
    return Step(action, parameters) if isinstance(parameters, dict) else None


class SessionGraphs:
    """Every agent's session graph in one world, fed with its WorldStates; a state of another episode (or world)
    starts them all over. `hops` and `cell_m` cut each agent's scene graph (scene_graph.agent_view); `embed` (None:
    keys only) gives embeddings matched within `tau`."""

    def __init__(self, hops: int = 2, cell_m: float = 1.0, tau: float = 0.0, embed: Optional[Embedder] = None):
        if hops < 0 or not math.isfinite(cell_m) or cell_m < 0:
            raise ValueError(f"hops {hops} and cell_m {cell_m} must be >= 0")
        self.hops, self.cell_m, self.tau, self.embed = hops, cell_m, tau, embed
        self.graphs: dict[str, SessionGraph] = {}
        self.episode: Optional[tuple[str, int]] = None
        self.latest: dict[str, SceneGraph] = {}

    def reset(self) -> None:
        """Forget every agent's session (a new episode)."""
        self.graphs, self.latest, self.episode = {}, {}, None

    def views(self, state: WorldState) -> dict[str, SceneGraph]:
        """Each agent's scene graph in `state`."""
        return {a.agent_id: agent_view(state, a.agent_id, self.hops, self.cell_m) for a in state.agents}

    def observe(self, state: WorldState) -> list[Loop]:
        """Visit every agent's state in `state`; the loops they closed."""
        if self.episode != (state.world, state.episode):
            self.reset()
            self.episode = (state.world, state.episode)
        views = self.views(state)
        zs = self.embed(list(views.values())) if self.embed is not None and views else [()] * len(views)
        loops = []
        for (agent, view), z in zip(views.items(), zs, strict=True):
            graph = self.graphs.setdefault(agent, SessionGraph(agent, self.tau))
            self.latest[agent] = view
            loop = graph.visit(state.step, view.key(), z, doing(state, agent))
            if loop is not None:
                loops.append(loop)
        return loops

    def where(self, agent_id: str) -> Optional[tuple[int, int]]:
        """The (episode, step) of the agent's latest state (None before its first)."""
        graph = self.graphs.get(agent_id)
        now = graph.current() if graph is not None else None
        if now is None or self.episode is None:
            return None
        return self.episode[1], now.last_step

    def loop_now(self, agent_id: str) -> Optional[Loop]:
        """The loop the agent's current state closed (GiG's loop warning at a call), or None."""
        graph = self.graphs.get(agent_id)
        return graph.loop if graph is not None else None
