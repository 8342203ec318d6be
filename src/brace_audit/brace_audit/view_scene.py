"""The scene of a world state as Rerun archetypes: one drawing per entity type, the relations a person looks for
(agents too near each other, agents the collision monitor holds back), and the scene graph for worlds without poses.

ROS-free: it reads `brace_common.world_state.WorldState` dataclasses and returns (entity path, archetype) pairs; the
caller logs them (`view_mapping.ViewMapping`). Positions are in the state's frame (ENU, z up, metres).
"""

from __future__ import annotations

import math

import rerun as rr

from brace_common.vocabulary import Predicate
from brace_common.world_markers import AGENT_COLOURS
from brace_common.world_state import Entity, Pose, WorldState

SCENE = "world"
"""The entity path of the 3-D scene (a Spatial3DView's origin)."""
GRAPH = "scene_graph"
"""The entity path of the scene graph (a GraphView's origin)."""

Rgb = tuple[int, int, int]
GREY: Rgb = (150, 150, 150)
SHELF: Rgb = (140, 100, 60)
DOCK: Rgb = (40, 170, 80)
OBJECT: Rgb = (230, 200, 40)
DONE: Rgb = (60, 200, 90)
NEAR: Rgb = (230, 30, 30)
HELD: Rgb = (255, 140, 0)
AREA: Rgb = (120, 120, 200)

# type -> (half sizes m, colour) of the box a warehouse-like entity is drawn as (its pose is the box's floor centre)
BOXES: dict[str, tuple[tuple[float, float, float], Rgb]] = {
    "shelf": ((0.4, 0.4, 0.6), SHELF), "dock": ((0.45, 0.45, 0.03), DOCK), "park": ((0.45, 0.45, 0.01), GREY),
    "object": ((0.12, 0.12, 0.12), OBJECT), "block": ((0.05, 0.05, 0.015), OBJECT), "robot": ((0.3, 0.3, 0.2), GREY)}

RELATION_COLOURS: dict[str, Rgb] = {"near": NEAR, "stopped_by": HELD}
"""Relations drawn as a line between subject and object, by predicate."""


def agent_rgb(index: int) -> Rgb:
    """The colour of the agent at `index` in the episode's agent list (RViz's markers use the same)."""
    r, g, b = AGENT_COLOURS[index % len(AGENT_COLOURS)]
    return round(r * 255), round(g * 255), round(b * 255)


def xyz(pose: Pose) -> tuple[float, float, float]:
    """The position of a pose."""
    return pose.x, pose.y, pose.z


def _float(entity: Entity, key: str, default: float) -> float:
    try:
        value = float(entity.attributes.get(key, default))
    except ValueError:
        return default
    return value if math.isfinite(value) and value > 0 else default


def circle(centre: tuple[float, float, float], radius: float, sides: int = 32) -> list[tuple[float, float, float]]:
    """A closed horizontal circle as a line strip."""
    x, y, z = centre
    return [(x + radius * math.cos(2 * math.pi * i / sides), y + radius * math.sin(2 * math.pi * i / sides), z)
            for i in range(sides + 1)]


def entity_drawing(entity: Entity, colour: Rgb | None, label: str) -> rr.AsComponents | None:
    """How one entity with a pose is drawn; None: nothing to draw (no pose). `colour`: an agent's own colour, and
    then its `label` is shown in the scene; other entities' labels show when a person hovers over them."""
    pose = entity.pose
    if pose is None:
        return None
    kind, shown = entity.type, colour is not None
    if kind in ("drone", "arm"):
        return rr.Points3D([xyz(pose)], radii=0.6 if kind == "drone" else 0.015, colors=[colour or GREY],
                           labels=[label], show_labels=shown)
    if kind == "fruit":
        rgb = {"removed": GREY, "in_bowl": DONE, "held": HELD}.get(entity.state, OBJECT)
        return rr.Points3D([xyz(pose)], radii=_float(entity, "width_m", 0.05) / 2, colors=[rgb], labels=[label],
                           show_labels=True)
    if kind == "container":
        return rr.LineStrips3D([circle(xyz(pose), _float(entity, "radius_m", 0.08))], colors=[GREY], labels=[label],
                               show_labels=False)
    if kind == "area":
        half = _float(entity, "half_width_m", 1.0)
        return rr.Boxes3D(half_sizes=[(half, half, 0.05)], centers=[xyz(pose)], colors=[AREA], labels=[label],
                          show_labels=False)
    if kind == "task":
        return rr.Points3D([xyz(pose)], radii=0.25, colors=[DONE if entity.state == "done" else (255, 255, 255)],
                           labels=[label], show_labels=False)
    if kind == "place":
        return rr.Boxes3D(half_sizes=[(0.05, 0.05, 0.002)], centers=[xyz(pose)],
                          rotation_axis_angles=[rr.RotationAxisAngle((0, 0, 1), radians=pose.yaw)], colors=[DONE],
                          labels=[label], show_labels=False)
    half, rgb = BOXES.get(kind, ((0.15, 0.15, 0.15), GREY))
    if kind == "robot":
        rgb = colour or rgb
    elif kind == "object" and entity.state in ("delivered", "done"):
        rgb = DONE
    elif kind == "object" and entity.state == "held":
        rgb = HELD
    centre = (pose.x, pose.y, pose.z + half[2])
    fill = rr.components.FillMode.Solid if kind in ("robot", "object", "block") else None
    return rr.Boxes3D(half_sizes=[half], centers=[centre], colors=[rgb], labels=[label], fill_mode=fill,
                      show_labels=shown or kind == "block",
                      rotation_axis_angles=[rr.RotationAxisAngle((0, 0, 1), radians=pose.yaw)])


def part(name: str) -> str:
    """A name as one part of an entity path (a space or a slash in an id does not split it)."""
    return rr.escape_entity_path_part(name)


def entity_path(entity: Entity) -> str:
    """Where an entity is drawn: under its type, so a person can hide a kind at once."""
    return f"{SCENE}/{part(entity.type or 'entity')}/{part(entity.id)}"


Segment = tuple[tuple[float, float, float], tuple[float, float, float], Rgb, str]


def relation_segments(state: WorldState) -> tuple[Segment, ...]:
    """The relations drawn as a line between subject and object (near: red, stopped_by: orange), with a label."""
    poses = {e.id: e.pose for e in state.entities if e.pose is not None}
    out = []
    for r in state.relations:
        colour = RELATION_COLOURS.get(r.predicate)
        if colour is None or r.subject not in poses or r.object not in poses:
            continue
        a, b = xyz(poses[r.subject]), xyz(poses[r.object])
        out.append((a, b, colour, f"{r.subject} {r.predicate} {r.object} ({math.dist(a, b):.1f} m)"))
    return tuple(out)


def segment_lines(segments: tuple[Segment, ...], radius: float = 0.03) -> rr.LineStrips3D | None:
    """Segments as one batch of lines; None when there are none."""
    if not segments:
        return None
    return rr.LineStrips3D([[a, b] for a, b, _, _ in segments], colors=[c for _, _, c, _ in segments],
                           labels=[t for _, _, _, t in segments], radii=radius)


GRAPH_SPACING = (240.0, 50.0)
"""The scene graph's layout: graph units between two columns and between two nodes of a column."""
GRAPH_COLUMNS = 10
"""Columns side by side in one band of the scene graph; more go into a band below."""
STATE_WORDS = 2
"""Words of an entity's state its node shows (the rest: "...")."""
HELD_BY = (Predicate.IN, Predicate.ON)
"""Relations that put an entity where its holder is (an apple in the fridge is in the fridge's column)."""


def graph_positions(state: WorldState) -> list[tuple[float, float]]:
    """A fixed layout for the scene graph: a column per place (what something is `at`, and every entity of its type,
    in the order of the state's entities), the place on top and what is at it (or in or on what is) below; a last
    column for the rest; columns side by side in bands of GRAPH_COLUMNS. Fixed so that a picture of it is the same
    each time (a force layout moves on, on a software renderer for a minute and more), and so that a person finds
    each room with what is in it."""
    index = {e.id: i for i, e in enumerate(state.entities)}
    at = {r.subject: r.object for r in state.relations if r.predicate == Predicate.AT and r.object in index}
    holder = {r.subject: r.object for r in state.relations if r.predicate in HELD_BY and r.object in index}
    kinds = {state.entities[index[place]].type for place in at.values()}   # a room with nothing in it is a place too
    columns: dict[str, list[int]] = {e.id: [i] for i, e in enumerate(state.entities) if e.type in kinds}
    rest: list[int] = []
    for i, entity in enumerate(state.entities):
        if entity.id in columns:
            continue
        where, seen = entity.id, set()
        while where not in at and where in holder and where not in seen:   # in the fridge, the fridge at the kitchen
            seen.add(where)
            where = holder[where]
        (columns[at[where]] if at.get(where) in columns else rest).append(i)
    laid = [*columns.values(), *([rest] if rest else [])]
    band_height = (max((len(c) for c in laid), default=1) + 1) * GRAPH_SPACING[1]
    positions = [(0.0, 0.0)] * len(state.entities)
    for c, members in enumerate(laid):
        x, top = (c % GRAPH_COLUMNS) * GRAPH_SPACING[0], (c // GRAPH_COLUMNS) * band_height
        for row, i in enumerate(members):
            positions[i] = (x, top + row * GRAPH_SPACING[1])
    return positions


def graph_label(entity: Entity) -> str:
    """A node's label: the id and the first STATE_WORDS words of its state."""
    words = [w.strip() for w in entity.state.split(",") if w.strip()]
    shown = ", ".join(words[:STATE_WORDS]) + (", ..." if len(words) > STATE_WORDS else "")
    return f"{entity.id}: {shown}" if shown else entity.id


def scene_graph(state: WorldState, colours: dict[str, Rgb] | None = None) -> tuple[tuple, rr.GraphNodes,
                                                                                     rr.GraphEdges]:
    """The state's scene graph: every entity a node (`graph_label`, placed by `graph_positions`, an agent in its
    colour from `colours`), every relation an edge; and a key that is equal for equal graphs."""
    ids = [e.id for e in state.entities]
    labels = [graph_label(e) for e in state.entities]
    edges = [(r.subject, r.object) for r in state.relations]
    positions = graph_positions(state)
    node_colours = [(colours or {}).get(i, GREY) for i in ids]
    return ((tuple(ids), tuple(labels), tuple(edges), tuple(positions), tuple(node_colours)),
            rr.GraphNodes(ids, labels=labels, show_labels=True, positions=positions, colors=node_colours),
            rr.GraphEdges(edges, graph_type=rr.components.GraphType.Directed))
