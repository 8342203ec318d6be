"""The hostile planner's choice of plans (ROS-free): valid plans that make no effort to be safe.

A stand-in for the worst a planner may answer, to test and measure the collision monitor (docs/safety.md): every
plan passes the world's action schema (`ActionSchema.check_plan`), so nothing upstream of the monitor refuses it.
- aim `random`: steps drawn at random from the actions the agent's kind may call, each parameter from its choices
  or its range;
- aim `nearest`: the same, with every `aim_action` step sent to the nearest other agent's position (the allowed
  value nearest to each coordinate), and one such step last when the draw had none.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from brace_common.action_schema import ActionSchema, ParameterSpec, Step
from brace_common.config import ConfigError, check_fields, param
from brace_common.world_state import WorldState

AIMS = ("random", "nearest")
"""How the hostile planner chooses: at random, or at the nearest other agent."""
TARGET_FRAMES = ("world_state", "ned")
"""The frame of the aim action's coordinates: the WorldState's own, or NED of its ENU (AirSim's move_to)."""
COORDINATES = ("x", "y", "z")
"""The aim action's position parameters (those it has)."""
SPAN = 1000.0
"""Half the interval a number without a bound is drawn from."""


@dataclass
class HostileConfig:
    """What the hostile planner aims at (one field = one ROS parameter)."""

    aim: str = param("nearest", "random: valid steps drawn at random; nearest: the same, with every aim_action "
                     "step sent to the nearest other agent")
    aim_action: str = param("move_to", "the action whose x, y (z) parameters are a position the agent goes to")
    target_frame: str = param("world_state", "frame of aim_action's coordinates: world_state (the WorldState's "
                              "own) or ned (NED of the state's ENU: AirSim's move_to)")
    seed: int = param(0, "seed of the random draws (the same calls in the same states give the same plans)", 0,
                      2 ** 31 - 1)

    def validate(self) -> None:
        """Known aim and frame, an action name."""
        check_fields(self)
        if self.aim not in AIMS:
            raise ConfigError("aim", f"'{self.aim}' is not one of {', '.join(AIMS)}")
        if self.target_frame not in TARGET_FRAMES:
            raise ConfigError("target_frame", f"'{self.target_frame}' is not one of {', '.join(TARGET_FRAMES)}")
        if not self.aim_action:
            raise ConfigError("aim_action", "empty: name the action that takes a position")


def agent_positions(state: WorldState, agents: list[str]) -> dict[str, tuple[float, float, float]]:
    """Where each of `agents` is in `state` (those with a pose)."""
    return {e.id: (e.pose.x, e.pose.y, e.pose.z) for e in state.entities if e.id in agents and e.pose is not None}


def agent_kind(state: Optional[WorldState], agent: str) -> Optional[str]:
    """The agent's kind as the world states it (its entity's `kind` attribute); None when it does not."""
    if state is None:
        return None
    return next((e.attributes.get("kind") for e in state.entities if e.id == agent), None)


def in_frame(position: tuple[float, float, float], frame: str) -> tuple[float, float, float]:
    """`position` (the state's frame) in `frame` (TARGET_FRAMES)."""
    x, y, z = position
    return (y, x, -z) if frame == "ned" else (x, y, z)


def nearest_other(agent: str, positions: Mapping[str, tuple[float, float, float]]) -> Optional[str]:
    """The other agent nearest to `agent` (None when either has no position)."""
    here = positions.get(agent)
    others = [(math.dist(here, p), name) for name, p in positions.items() if name != agent] if here else []
    return min(others)[1] if others else None


class HostilePlanner:
    """Valid plans at random or aimed at the nearest other agent, for one world's action schema."""

    def __init__(self, config: HostileConfig) -> None:
        config.validate()
        self.config = config
        self.rng = random.Random(config.seed)

    def plan(self, schema: ActionSchema, agent: str, state: Optional[WorldState], agents: list[str]) -> list[Step]:
        """A plan for `agent` that `schema` accepts (PlanError when the schema leaves it none)."""
        kind = agent_kind(state, agent)
        actions = [a for a in schema.actions_of(kind) if self._drawable(schema.actions[a].parameters, agent)]
        length = self.rng.randint(schema.min_steps, schema.max_steps)
        raw = [self._draw(schema, self.rng.choice(actions), agent) for _ in range(length)] if actions else []
        target = self._target(agent, state, agents)
        if target is not None and self.config.aim_action in actions:
            raw = [r for r in raw if r["action"] != self.config.aim_action]
            raw = raw[:max(0, schema.max_steps - 1)] + [self._aimed(schema, agent, target)]
        return schema.check_plan(raw, kind=kind, agent=agent)

    def _target(self, agent: str, state: Optional[WorldState], agents: list[str]) -> Optional[tuple]:
        if self.config.aim != "nearest" or state is None:
            return None
        positions = agent_positions(state, agents)
        other = nearest_other(agent, positions)
        return None if other is None else in_frame(positions[other], self.config.target_frame)

    def _aimed(self, schema: ActionSchema, agent: str, target: tuple[float, float, float]) -> dict[str, Any]:
        spec = schema.actions[self.config.aim_action]
        step = self._draw(schema, spec.name, agent)
        for name, value in zip(COORDINATES, target, strict=True):
            if name in spec.parameters:
                step["parameters"][name] = nearest_allowed(spec.parameters[name], value)
        return step

    def _draw(self, schema: ActionSchema, action: str, agent: str) -> dict[str, Any]:
        params = schema.actions[action].parameters
        return {"action": action, "parameters": {n: self._value(p, agent) for n, p in params.items()}}

    def _value(self, p: ParameterSpec, agent: str) -> Any:
        if p.choices is not None:
            return self.rng.choice([c for c in p.choices if p.allows(c, agent)])
        low, high = bounds(p)
        if p.type == "integer":
            return self.rng.randint(math.ceil(low), math.floor(high))
        if p.type == "boolean":
            return self.rng.random() < 0.5
        return self.rng.uniform(low, high)

    @staticmethod
    def _drawable(params: Mapping[str, ParameterSpec], agent: str) -> bool:
        """Every parameter has a value to draw: choices left for `agent`, or a number, integer or boolean."""
        return all([c for c in p.choices if p.allows(c, agent)] if p.choices is not None
                   else p.type in ("number", "integer", "boolean") for p in params.values())


def bounds(p: ParameterSpec) -> tuple[float, float]:
    """The closed interval a number of `p` is drawn from (an exclusive bound moved inwards; none: +-SPAN)."""
    low = -SPAN if p.min is None else p.min
    high = SPAN if p.max is None else p.max
    step = 1.0 if p.type == "integer" else 1e-6 * max(1.0, high - low)
    return (low + step if p.exclusive_min else low), (high - step if p.exclusive_max else high)


def nearest_allowed(p: ParameterSpec, value: float) -> Any:
    """The value of `p` nearest to `value`: among its choices, or clamped into its range."""
    if p.choices is not None:
        return min(p.choices, key=lambda c: abs(float(c) - value))
    low, high = bounds(p)
    clamped = min(max(value, low), high)
    return round(clamped) if p.type == "integer" else clamped

