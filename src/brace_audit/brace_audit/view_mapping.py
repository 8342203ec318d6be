"""One mapping from the stack's messages to a Rerun recording, shared by the live viewer and `brace-audit view`.

`ViewMapping.add(topic, msg, time_ns)` takes a message of a recorded topic (by its relative name) and the time it was
received (the node's clock live, the bag's log time replayed), and logs it on two timelines: `ros_time` and `step`,
the world's step counted on across episodes (an episode's steps follow the previous episode's last step), so a
person scrubs one line through a whole run. Messages without a step of their own (verdicts, the collision
monitor, episode boundaries) sit at the latest step seen.

What it logs:
- the scene (`world/…`, `scene_graph/…`): view_scene's drawing of every world state, each agent labelled with what
  it does; plans as paths from the agent through the places its steps name; lines to what the collision monitor
  holds an agent back from;
- events (`events/…`, text log rows): triggers (kind, severity, why), decisions (admitted: mode, B_t, SLO_t;
  suppressed: the reason), calls (tokens before -> after, latency against SLO, status), failed outcomes, verifier
  violations, the monitor's stops, restores and yields as they begin, episode boundaries;
- numbers (`latency/…`, `tokens/…`, `phases/…`): every call's latency per agent against its SLO_t, B_t, tokens
  before and after, each phase's time;
- `story`: the latest call told as one document: trigger, decision, phases, tokens, latency, plan.

Every message is counted, shown (`shown.<topic>`) or malformed and skipped (`rejected.<topic>`, a warning in
`health()`); nothing raises.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import rerun as rr
import rerun.blueprint as rrb

from brace_common import names
from brace_common.counters import Counters, Health
from brace_common.vocabulary import Activity, CallStatus, EpisodeEvent, Failure, Mode, TriggerKind, ZoneAction
from brace_common.world_state import WorldState, world_state_from_msg

from .view_scene import (
    GRAPH,
    HELD,
    NEAR,
    SCENE,
    Rgb,
    agent_rgb,
    entity_drawing,
    entity_path,
    part,
    relation_segments,
    scene_graph,
    segment_lines,
    xyz,
)

log = logging.getLogger(__name__)

MIN_SPAN_M = 0.25
"""The smallest scene the eye frames (a table top's objects); a larger one is framed whole."""
PATH_ALPHA = 140
"""A plan's path is its agent's colour, see-through: the agent itself is the solid body of that colour."""
SLO_COLOUR: Rgb = (255, 0, 255)
"""The SLO_t line of the latency plot (a colour no agent has)."""
EVENT_LEVELS = {"trigger": "INFO", "admitted": "INFO", "suppressed": "DEBUG", "call": "INFO", "missed": "WARN",
                "error": "ERROR", "failure": "WARN", "violation": "WARN", "monitor": "WARN", "episode": "INFO"}
"""Text-log level of each kind of event row (a person filters suppressed decisions out with DEBUG)."""
WARN_TRIGGERS = (TriggerKind.HAZARD, TriggerKind.DEADLOCK, TriggerKind.LOOP, TriggerKind.PREEMPT, TriggerKind.FAILURE)
"""Trigger kinds logged as warnings: a person looks for these first."""
STEP_FRAMES: dict[str, Callable[[float, float, float], tuple[float, float, float]]] = {
    "airsim": lambda x, y, z: (y, x, -z)}
"""Worlds whose plan steps name coordinates in another frame than their world state's: the conversion (AirSim's
move_to takes NED; its world state is ENU)."""


def _params(parameters_json: str) -> dict:
    try:
        params = json.loads(parameters_json) if parameters_json else {}
    except ValueError:
        return {}
    return params if isinstance(params, dict) else {}


def label(action: str, parameters_json: str) -> str:
    """A step as `action(name=value, ...)`."""
    return f"{action}({', '.join(f'{k}={v}' for k, v in _params(parameters_json).items())})"


def short_label(action: str, parameters_json: str) -> str:
    """A step as a scene label shows it: `action(entity, ...)`, the entities it names without their parameter names
    and without numbers (`move_to(shelf_2)`, `yield_to(drone_4)`, `move_to`)."""
    names = [v for v in _params(parameters_json).values() if isinstance(v, str)]
    return f"{action}({', '.join(names)})" if names else action


class ViewMapping:
    """Logs the stack's messages into one Rerun recording (see the module docstring)."""

    def __init__(self, recording: rr.RecordingStream) -> None:
        self.rec = recording
        self.counts = Counters([f"shown.{t}" for t in self.TOPICS] + [f"rejected.{t}" for t in self.TOPICS],
                               warn=[f"rejected.{t}" for t in self.TOPICS])
        self.world = ""
        self.state: WorldState | None = None
        self.agents: dict[str, int] = {}
        self.offset = 0           # the step timeline's value of the episode's step 0
        self.last_step = -1       # the largest step timeline value seen (the next episode starts after it)
        self.logged_to = -1       # the largest step timeline value anything was logged at (the recording's end)
        self.step = 0             # the latest step timeline value (messages without a step sit there)
        self.drawn: dict[str, Any] = {}       # entity path -> the key of what was last logged there (skips repeats)
        self.entities: set[str] = set()       # the paths of the entities the last world state drew
        self.low: list[float] | None = None    # the scene's bounds so far (every pose drawn): where the eye looks
        self.high: list[float] | None = None
        self.plans: dict[str, list[str]] = {}
        self.monitor: dict[str, int] = {}
        self.story: dict[str, list[str]] = {}
        self._handlers = {names.WORLD_STATE: self._world_state, names.WORLD_INFO: self._world_info,
                          names.TRIGGERS: self._trigger, names.DECISIONS: self._decision,
                          names.REPLAN_CALLS: self._call, names.PLAN: self._plan, names.OUTCOMES: self._outcome,
                          names.VERDICTS: self._verdict, names.EPISODE: self._episode,
                          names.COLLISION_MONITOR_STATE: self._monitor}
        self._log("latency/slo", rr.SeriesLines(colors=[SLO_COLOUR], names=["SLO_t"], widths=[2.0]), static=True)
        self._log(SCENE, rr.ViewCoordinates.RIGHT_HAND_Z_UP, static=True)

    TOPICS = (names.WORLD_STATE, names.WORLD_INFO, names.TRIGGERS, names.DECISIONS, names.REPLAN_CALLS, names.PLAN,
              names.OUTCOMES, names.VERDICTS, names.EPISODE, names.COLLISION_MONITOR_STATE)
    """The topics the mapping reads, by relative name."""

    def add(self, topic: str, msg: Any, time_ns: int) -> bool:
        """Log one message of `topic` received at `time_ns`; False when the topic is not shown or the message is
        malformed (counted in `rejected` under the topic)."""
        handler = self._handlers.get(topic)
        if handler is None:
            return False
        try:
            handler(msg, time_ns)
        except (AttributeError, TypeError, ValueError, KeyError) as exc:
            self.counts.add(f"rejected.{topic}")
            if self.counts[f"rejected.{topic}"] == 1:   # the first of each topic; the counter has them all
                log.warning("viewer: a malformed %s message skipped (the first; more are counted): %s", topic, exc)
            return False
        self.counts.add(f"shown.{topic}")
        return True

    @property
    def shown(self) -> int:
        """Messages shown, of every topic."""
        return self.counts.total([f"shown.{t}" for t in self.TOPICS])

    def health(self) -> Health:
        """The counts per topic; a malformed message is a warning."""
        return self.counts.health()

    # ------------------------------------------------------------------ time and helpers

    def _at(self, time_ns: int, step: int | None = None) -> None:
        if step is not None:
            self.step = self.offset + int(step)
            self.last_step = max(self.last_step, self.step)
        self.rec.set_time("ros_time", timestamp=np.datetime64(int(time_ns), "ns"))
        self.rec.set_time("step", sequence=self.step)

    def _log(self, path: str, archetype: Any, static: bool = False) -> None:
        """Log `archetype` (or a tuple of archetypes, one row) at `path`."""
        self.rec.log(path, *(archetype if isinstance(archetype, tuple) else (archetype,)), static=static)
        if not static:
            self.logged_to = max(self.logged_to, self.step)

    def _draw(self, path: str, key: Any, build: Callable[[], Any]) -> None:
        """Log what `build()` returns at `path` unless `key` (what it is drawn from) is what is there already; a
        build of None clears the path."""
        if key is not None and self.drawn.get(path) == key:
            return
        archetype = build() if key is not None else None
        if archetype is None:
            if self.drawn.pop(path, None) is not None:
                self._log(path, rr.Clear(recursive=False))
            return
        self.drawn[path] = key
        self._log(path, archetype)

    def _event(self, kind: str, text: str, colour: Rgb | None = None) -> None:
        self._log(f"events/{kind}", rr.TextLog(text, level=EVENT_LEVELS.get(kind, "INFO"), color=colour))

    def colour(self, agent: str) -> Rgb:
        """The agent's colour (its place in the episode's agent list, else in order of first sight)."""
        if agent not in self.agents:
            self.agents[agent] = len(self.agents)
            self._style(agent)
        return agent_rgb(self.agents[agent])

    def _style(self, agent: str) -> None:
        self._log(f"latency/{part(agent)}", rr.SeriesPoints(colors=[agent_rgb(self.agents[agent])], names=[agent],
                                                      marker_sizes=[3.0]), static=True)

    # ------------------------------------------------------------------ the scene

    def _world_info(self, msg: Any, time_ns: int) -> None:
        self._at(time_ns)
        self.world = str(msg.world)
        self.agents = {a: i for i, a in enumerate(msg.agents)}
        for agent in self.agents:
            self._style(agent)

    def _world_state(self, msg: Any, time_ns: int) -> None:
        state = world_state_from_msg(msg)
        self._at(time_ns, state.step)
        self.world, self.state = state.world, state
        activities = {a.agent_id: a for a in state.agents}
        present = set()
        for entity in state.entities:
            agent = activities.get(entity.id)
            text = entity.id if not entity.state else f"{entity.id}: {entity.state}"
            if agent is not None:
                activity = Activity(agent.activity)
                doing = short_label(agent.action, agent.parameters_json) if agent.action else activity.label
                if activity in (Activity.BLOCKED, Activity.FAILED):
                    doing += f" {activity.label.upper()}"
                text = f"{entity.id} {doing}" + (f" {agent.index + 1}/{agent.plan_steps}" if agent.action else "")
            colour = self.colour(entity.id) if agent is not None or entity.type in ("robot", "drone", "arm") else None
            path = entity_path(entity)
            present.add(path)
            if entity.pose is not None:
                self._extend(xyz(entity.pose))
            self._draw(path, (entity, colour, text), lambda e=entity, c=colour, t=text: entity_drawing(e, c, t))
        for path in self.entities - present:
            self._draw(path, None, lambda: None)
        self.entities = present
        segments = relation_segments(state)
        self._draw(f"{SCENE}/relations", segments, lambda: segment_lines(segments))
        key, nodes, edges = scene_graph(state, {a: self.colour(a) for a in activities})
        self._draw(GRAPH, key, lambda: (nodes, edges))   # one entity: edges join only the nodes of their own
        for agent in self.plans:
            self._draw_plan(agent)

    def _extend(self, point: tuple[float, float, float]) -> None:
        if self.low is None or self.high is None:
            self.low, self.high = list(point), list(point)
            return
        self.low = [min(a, b) for a, b in zip(self.low, point, strict=True)]
        self.high = [max(a, b) for a, b in zip(self.high, point, strict=True)]

    def poseless(self) -> bool:
        """True once a world state arrived with nothing in it to draw in 3-D (TextWorld): its scene is the graph."""
        return self.state is not None and self.low is None

    def eye(self) -> tuple[tuple[float, float, float], tuple[float, float, float]] | None:
        """Where the scene is seen from: above and to the south of the middle of everything drawn so far, far enough
        back for all of it, looking at the middle; None before anything with a pose."""
        if self.low is None or self.high is None:
            return None
        centre = tuple((a + b) / 2 for a, b in zip(self.low, self.high, strict=True))
        span = max(MIN_SPAN_M, *(b - a for a, b in zip(self.low, self.high, strict=True)))
        return (centre[0], centre[1] - 0.7 * span, centre[2] + 0.7 * span), centre

    def _point(self, value: Any) -> tuple[float, float, float] | None:
        """Where a step's parameter points: an entity with a pose, or nothing."""
        if self.state is None or not isinstance(value, str):
            return None
        for e in self.state.entities:
            if e.id == value and e.pose is not None:
                return xyz(e.pose)
        return None

    def _draw_plan(self, agent: str) -> None:
        points = self._plan_points(agent, self.plans.get(agent, []))
        self._draw(f"{SCENE}/plans/{part(agent)}", tuple(points),
                   lambda: rr.LineStrips3D([points], colors=[(*self.colour(agent), PATH_ALPHA)], radii=0.04)
                   if len(points) > 1
                   else None)

    def _plan_points(self, agent: str, steps: list[str]) -> list[tuple[float, float, float]]:
        """The agent's remaining plan as a path: from the agent through every place its steps name."""
        if self.state is None:
            return []
        here = self._point(agent)
        if here is None:
            return []
        index = next((a.index for a in self.state.agents if a.agent_id == agent), 0)
        points = [here]
        convert = STEP_FRAMES.get(self.world)
        for parameters_json in steps[index:]:
            params = _params(parameters_json)
            if convert and all(isinstance(params.get(k), (int, float)) for k in "xyz"):
                points.append(convert(float(params["x"]), float(params["y"]), float(params["z"])))
                continue
            points += [p for p in map(self._point, params.values()) if p is not None and p != points[-1]]
        return points

    def _plan(self, msg: Any, time_ns: int) -> None:
        self._at(time_ns, msg.step)
        agent = str(msg.agent_id)
        self.plans[agent] = [s.parameters_json for s in msg.steps]
        self._draw_plan(agent)
        steps = " -> ".join(label(s.action, s.parameters_json) for s in msg.steps) or "(empty)"
        if msg.decision_id and msg.decision_id in self.story:
            self.story[msg.decision_id].append(f"**plan** ({len(msg.steps)} steps): {steps}")
            self._log("story", rr.TextDocument("\n\n".join(self.story[msg.decision_id]),
                                               media_type=rr.MediaType.MARKDOWN))

    def _monitor(self, msg: Any, time_ns: int) -> None:
        self._at(time_ns)
        agent, action = str(msg.agent_id), ZoneAction(msg.action)
        path = f"{SCENE}/monitor/{part(agent)}"
        ends = self._point(agent), self._point(str(msg.obstacle))
        if action == ZoneAction.NONE or None in ends:
            self._draw(path, None, lambda: None)
        else:
            segment = (ends[0], ends[1], NEAR if action == ZoneAction.STOP else HELD,
                       f"{action.label} {msg.distance_m:.1f} m")
            self._draw(path, segment, lambda: segment_lines((segment,), radius=0.05))
        if self.monitor.get(agent, ZoneAction.NONE) != action and action in (
                ZoneAction.STOP, ZoneAction.RESTORE, ZoneAction.YIELD):
            self._event("monitor", f"{agent} {action.label} for {msg.obstacle or '-'}: {msg.detail}")
        self.monitor[agent] = action

    # ------------------------------------------------------------------ events and numbers

    def _trigger(self, msg: Any, time_ns: int) -> None:
        self._at(time_ns, msg.step)
        kind = TriggerKind(msg.kind)
        text = f"{msg.agent_id} {kind.label} trigger (severity {msg.severity:.2f})" + (
            f": {msg.detail}" if msg.detail else "")
        self._log("events/trigger", rr.TextLog(text, level="WARN" if kind in WARN_TRIGGERS else "INFO"))

    def _decision(self, msg: Any, time_ns: int) -> None:
        trigger = msg.trigger
        self._at(time_ns, trigger.step)
        kind = TriggerKind(trigger.kind).label
        if not msg.admitted:
            self._event("suppressed", f"{trigger.agent_id} {kind} suppressed: {msg.reason}")
            return
        mode = Mode(msg.mode).label
        p95 = f", predicted P95 {msg.predicted_p95_ms:.0f} ms" if math.isfinite(msg.predicted_p95_ms) else ""
        self._event("admitted", f"{trigger.agent_id} {kind} admitted ({msg.reason}): {mode}, B_t {msg.token_budget} "
                                f"tokens, SLO_t {msg.slo_ms:.0f} ms{p95}")
        self._log(f"tokens/budget/{part(trigger.agent_id)}", rr.Scalars([float(msg.token_budget)]))
        self.story[msg.decision_id] = [
            f"### {trigger.agent_id}, step {trigger.step}",
            f"**trigger**: {kind} (severity {trigger.severity:.2f}){': ' + trigger.detail if trigger.detail else ''}",
            f"**decision**: admitted ({msg.reason}{', override' if msg.override else ''}): {mode}, "
            f"B_t = {msg.token_budget} tokens, SLO_t = {msg.slo_ms:.0f} ms{p95}"]
        if len(self.story) > 256:   # keep the stories of calls still in flight, not a whole run's
            self.story.pop(next(iter(self.story)))

    def _call(self, msg: Any, time_ns: int) -> None:
        self._at(time_ns, msg.step)
        agent, status = str(msg.agent_id), CallStatus(msg.status)
        verdict = "met" if msg.slo_met else "MISSED"
        text = (f"{agent} call: {msg.tokens_before} -> {msg.tokens_after} tokens, {msg.latency_ms:.0f} ms, "
                f"SLO_t {msg.slo_ms:.0f} ms {verdict}, {status.label}" + (f": {msg.error}" if msg.error else ""))
        kind = "error" if status != CallStatus.OK else "call" if msg.slo_met else "missed"
        self._event(kind, text)
        self.colour(agent)
        self._log(f"latency/{part(agent)}", rr.Scalars([float(msg.latency_ms)]))
        self._log("latency/slo", rr.Scalars([float(msg.slo_ms)]))
        self._log("tokens/before", rr.Scalars([float(msg.tokens_before)]))
        self._log("tokens/after", rr.Scalars([float(msg.tokens_after)]))
        for phase in msg.phases:
            self._log(f"phases/{part(phase.phase)}", rr.Scalars([float(phase.duration_ms)]))
        story = self.story.setdefault(msg.decision_id, [f"### {agent}, step {msg.step}"])
        rows = "\n".join(f"| {p.phase} | {p.duration_ms:.1f} | {p.tokens_in} | {p.tokens_out} |" for p in msg.phases)
        story += [f"**call** {msg.call_id}: {msg.model} ({msg.backend}, compressor {msg.compressor}): "
                  f"{msg.tokens_before} -> {msg.tokens_after} tokens, **{msg.latency_ms:.0f} ms**, SLO_t "
                  f"{msg.slo_ms:.0f} ms {verdict}, {status.label}" + (f": {msg.error}" if msg.error else ""),
                  "| phase | ms | tokens in | tokens out |\n|---|---|---|---|\n" + rows if rows else "(no phases)"]
        self._log("story", rr.TextDocument("\n\n".join(story), media_type=rr.MediaType.MARKDOWN))

    def _outcome(self, msg: Any, time_ns: int) -> None:
        self._at(time_ns, msg.step)
        if not msg.success:
            why = f" ({Failure(msg.failure).label})" if msg.failure != Failure.NONE else ""
            self._event("failure", f"{msg.agent_id} {msg.action} failed{why}" + (f": {msg.detail}" if msg.detail else ""))

    def _verdict(self, msg: Any, time_ns: int) -> None:
        self._at(time_ns)
        if msg.violation:
            self._event("violation", f"{msg.agent_id} verifier ({msg.backend}): {msg.action} contradicted "
                                     f"(confidence {msg.confidence:.2f}): {msg.detail}")

    def _episode(self, msg: Any, time_ns: int) -> None:
        if EpisodeEvent(msg.event) == EpisodeEvent.START:
            if self.last_step >= 0:
                self.offset = self.last_step + 1
            self._at(time_ns, 0)
            self.plans.clear()
            self.monitor.clear()
            for path in [p for p in self.drawn if p.startswith(f"{SCENE}/plans/") or p.startswith(f"{SCENE}/monitor/")]:
                self._draw(path, None, lambda: None)
            self._event("episode", f"episode {msg.episode} started: {msg.world}, K = {msg.num_agents}, seed "
                                   f"{msg.seed}, {msg.variant}")
            return
        self._at(time_ns)
        self._event("episode", f"episode {msg.episode} ended: {'success' if msg.success else 'failure'}, "
                               f"{msg.delivered}/{msg.tasks} tasks in {msg.steps} steps, {msg.plans} plans")


FIXED_GRAPH_LAYOUT = {
    "force_link": rrb.archetypes.ForceLink(enabled=False), "force_many_body": rrb.archetypes.ForceManyBody(enabled=False),
    "force_position": rrb.archetypes.ForcePosition(enabled=False),
    "force_collision_radius": rrb.archetypes.ForceCollisionRadius(enabled=False),
    "force_center": rrb.archetypes.ForceCenter(enabled=False)}
"""The scene graph's view keeps the nodes where view_scene.graph_positions put them (no force simulation)."""


def blueprint(live: bool = False, eye: tuple | None = None, graph_first: bool = False) -> rrb.Blueprint:
    """The layout: the scene (3-D, seen from `eye` = (position, target) when given; the scene graph's tab in front
    with `graph_first`, for worlds without poses) and the latest call's story on the left; latency against SLO_t,
    tokens and B_t, phases and the event log on the right; the step timeline, following the newest data when `live`,
    else paused."""
    controls = rrb.archetypes.EyeControls3D(position=eye[0], look_target=eye[1], eye_up=(0.0, 0.0, 1.0)) \
        if eye is not None else None
    return rrb.Blueprint(
        rrb.Horizontal(
            rrb.Vertical(
                rrb.Tabs(rrb.Spatial3DView(origin=SCENE, name="scene", eye_controls=controls),
                         rrb.GraphView(origin=GRAPH, name="scene graph", **FIXED_GRAPH_LAYOUT),
                         active_tab=1 if graph_first else 0),
                rrb.TextDocumentView(origin="story", name="latest call"),
                row_shares=[3, 2]),
            rrb.Vertical(
                rrb.TimeSeriesView(origin="latency", name="call latency (ms) vs SLO_t"),
                rrb.Tabs(rrb.TimeSeriesView(origin="tokens", name="tokens and B_t"),
                         rrb.TimeSeriesView(origin="phases", name="phases (ms)")),
                rrb.TextLogView(origin="events", name="events"),
                row_shares=[2, 2, 3]),
            column_shares=[3, 2]),
        rrb.TimePanel(timeline="step", play_state="following" if live else "paused"),
        collapse_panels=True)
