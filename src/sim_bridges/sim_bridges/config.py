"""Typed, validated parameters of the embedded_sim node (the same dataclass loads from YAML)."""

from __future__ import annotations

from dataclasses import dataclass

from brace_controller.config import ConfigError, check_fields, param

from .warehouse import WorldConfig


@dataclass
class SimConfig:
    """Parameters of embedded_sim."""

    agents: int = param(4, "K: agents in the warehouse", 1, 8)
    episodes: int = param(3, "episodes to run (seeds seed, seed+1, ...)", 1, 10**6)
    seed: int = param(0, "world seed of the first episode", 0, 2**31 - 1)
    max_steps: int = param(60, "steps after which an unfinished episode fails", 1, 10**6)
    grasp_failure: float = param(0.1, "probability that a pick slips", 0.0, 1.0)
    drift: float = param(0.02, "probability per step that a waiting object is moved to another shelf", 0.0, 1.0)
    hazard_distance: float = param(1.01, "d_min in cells for the near-miss count", 0.0, 100.0)
    handoff_tasks: int = param(1, "two-agent handoff tasks (agents 0+1, 2+3, ... pair up; every agent has one task)",
                               0, 4)
    task_docks: int = param(0, "tasks deliver to the first n docks only (0 = any dock; 1 = one congested dock)", 0, 3)
    observe_every: int = param(4, "every N steps each agent's observation also goes to the history (0 = never)",
                               0, 10**6)
    step_period_s: float = param(0.05, "wall time between steps when no call is in flight (s)", 0.001, 60.0)
    sim_step_s: float = param(0.5, "simulated seconds per step (/clock)", 0.001, 3600.0)
    hold_while_planning: bool = param(True, "do not step while an admitted call has not returned (lockstep)")
    hold_timeout_s: float = param(60.0, "longest hold for one call before stepping anyway (s)", 0.1, 3600.0)
    variant: str = param("", "label of the run's variant, copied into /brace/episode")
    frame_id: str = param("map", "frame of agent positions and markers")
    markers: bool = param(True, "publish /brace/markers")
    shutdown_when_done: bool = param(False, "exit the node's process after the last episode")

    def validate(self) -> None:
        """ConfigError naming the first invalid parameter."""
        check_fields(self)
        if not self.frame_id.strip():
            raise ConfigError("frame_id", "must not be empty")

    def world(self, episode: int) -> WorldConfig:
        """The world configuration of episode `episode`."""
        return WorldConfig(agents=self.agents, seed=self.seed + episode, max_steps=self.max_steps,
                           grasp_failure=self.grasp_failure, drift=self.drift,
                           hazard_distance=self.hazard_distance, handoff_tasks=self.handoff_tasks,
                           task_docks=self.task_docks)
