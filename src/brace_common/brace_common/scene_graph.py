"""An agent's scene graph SG_t (GiG Sec. 3.1.1) cut from a WorldState, and its canonical hash.

A world's state holds every agent; an agent's own state is the part of the scene it stands in: its entity, and
what its relations reach within `hops` edges (both directions). Other agents are not part of it: where a teammate
stands changes without the agent acting, and a state that changes with it would make an agent standing still
"revisit" states (or a looping one never do so). `hops` 0 keeps the whole scene, connected to the agent or not, but
for the other agents (a one-agent world).
The agent's pose enters as its cell on a grid of `cell_m` (0: the pose is left out), other poses never do: they
follow from relations (a held object goes with its holder), or do not change (shelves, docks).

Two encodings read the graph: `key` (a hash of the sorted facts: equal exactly when the facts are; no training)
and the node texts a sentence encoder embeds (`node_texts`) for GiG's GNN encoder.
"""

from __future__ import annotations

import hashlib
import math
from collections import deque
from dataclasses import dataclass

from .world_state import WorldState

AGENT_TYPES = frozenset({"robot", "drone", "arm", "player", "agent"})
"""Entity types that are agents: another agent's node is not part of an agent's scene graph."""
KEY_CHARS = 16
"""Hex characters of a state key (64 bits: a collision within one run is not a practical concern)."""


@dataclass(frozen=True)
class SceneNode:
    """A node of a scene graph: an entity's id, type and object state."""

    id: str
    type: str
    state: str = ""

    def text(self) -> str:
        """What a sentence encoder reads for the node (GiG: entity type and status)."""
        return " ".join(part for part in (self.type, self.id.replace("_", " "), self.state) if part)


@dataclass(frozen=True)
class SceneGraph:
    """SG_t of one agent: nodes sorted by id, edges (subject, predicate, object) sorted, the agent's cell."""

    agent_id: str
    nodes: tuple[SceneNode, ...]
    edges: tuple[tuple[str, str, str], ...]
    cell: tuple[int, ...] = ()

    def facts(self) -> tuple[str, ...]:
        """The graph as sorted one-line facts (what the key hashes and a prompt can show)."""
        out = [f"{n.id}: {n.type}" + (f" ({n.state})" if n.state else "") for n in self.nodes]
        out += [f"{s} {p} {o}" for s, p, o in self.edges]
        if self.cell:
            out.append(f"{self.agent_id} cell {list(self.cell)}")
        return tuple(sorted(out))

    def key(self) -> str:
        """The canonical hash of the facts: equal keys are the same state (an exact revisit)."""
        return hashlib.sha1("\n".join(self.facts()).encode()).hexdigest()[:KEY_CHARS]

    def node_texts(self) -> list[str]:
        """Each node's text, in node order (a sentence encoder's input)."""
        return [n.text() for n in self.nodes]

    def edge_index(self) -> list[tuple[int, int]]:
        """Edges as (subject, object) positions in `nodes` (a GNN's input)."""
        at = {n.id: i for i, n in enumerate(self.nodes)}
        return [(at[s], at[o]) for s, _, o in self.edges]


def agent_goal(state: WorldState, agent_id: str) -> str:
    """The texts of the tasks the agent is assigned in `state` ("; "-joined; a task without a text by its id)."""
    tasks = [r.object for r in state.related("assigned", agent_id)]
    texts = []
    for task in tasks:
        try:
            texts.append(state.entity(task).attributes.get("text", task))
        except KeyError:
            continue
    return "; ".join(texts)


def agent_view(state: WorldState, agent_id: str, hops: int = 2, cell_m: float = 1.0) -> SceneGraph:
    """The agent's scene graph in `state` (see the module docstring); KeyError when the state has no such agent."""
    if hops < 0 or not math.isfinite(cell_m) or cell_m < 0:
        raise ValueError(f"hops {hops} and cell_m {cell_m} must be >= 0")
    me = state.entity(agent_id)
    entities = {e.id: e for e in state.entities}
    neighbours: dict[str, list[str]] = {}
    for r in state.relations:
        neighbours.setdefault(r.subject, []).append(r.object)
        neighbours.setdefault(r.object, []).append(r.subject)
    depth = {agent_id: 0}
    if hops == 0:
        depth.update({i: 1 for i, e in entities.items() if e.type not in AGENT_TYPES})
    queue = deque([] if hops == 0 else [agent_id])
    while queue:
        here = queue.popleft()
        if depth[here] >= hops:
            continue
        for there in neighbours.get(here, ()):
            if there not in depth and entities[there].type not in AGENT_TYPES:
                depth[there] = depth[here] + 1
                queue.append(there)
    nodes = tuple(SceneNode(i, entities[i].type, entities[i].state) for i in sorted(depth))
    edges = tuple(sorted({(r.subject, r.predicate, r.object) for r in state.relations
                          if r.subject in depth and r.object in depth}))
    cell: tuple[int, ...] = ()
    if cell_m > 0 and me.pose is not None:
        cell = tuple(int(math.floor(v / cell_m + 0.5)) for v in (me.pose.x, me.pose.y, me.pose.z))
    return SceneGraph(agent_id, nodes, edges, cell)
