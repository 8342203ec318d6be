"""Typed, validated parameters of the world nodes: how a node runs episodes (EpisodeRunConfig), and each node's
world on top (the embedded warehouse's WorldConfig, the AirSim intersection's IntersectionConfig)."""

from __future__ import annotations

from dataclasses import dataclass

from brace_common.config import ConfigError, ReadinessConfig, autostart_param, check_fields, param

from ..airsim.intersection import IntersectionConfig
from .warehouse_world import WorldConfig


@dataclass
class EpisodeRunConfig(ReadinessConfig):
    """How a world node runs seeded episodes in the closed loop: pacing, lockstep holds, readiness, output."""

    episodes: int = param(3, "episodes to run (seeds seed, seed+1, ...)", 1, 10**6)
    observe_every: int = param(4, "every N steps each agent's observation also goes to the history (0 = never)",
                               0, 10**6)
    step_period_s: float = param(0.05, "wall time between steps when no call is in flight (s, steady clock)",
                                 0.001, 60.0)
    sim_step_s: float = param(0.5, "simulated seconds per step: /clock advances by this each step (and each episode "
                              "start), monotonic over the run", 0.001, 3600.0)
    hold_while_planning: bool = param(True, "do not step while an admitted call has not returned (lockstep)")
    hold_timeout_s: float = param(60.0, "longest hold for one call before stepping anyway (s)", 0.1, 3600.0)
    variant: str = param("", "label of the run's variant, copied into the episode messages")
    frame_id: str = param("map", "frame of agent positions and markers")
    markers: bool = param(True, "publish markers")
    shutdown_when_done: bool = param(False, "exit the node's process after the last episode")

    def check_run(self) -> None:
        """ConfigError naming the first invalid episode-running parameter."""
        if not self.frame_id.strip():
            raise ConfigError("frame_id", "must not be empty")
        self.check_readiness()


@dataclass
class SimConfig(EpisodeRunConfig, WorldConfig):
    """Parameters of embedded_sim: every WorldConfig field, then how the node runs episodes of that world."""

    lookahead_states: int = param(3, "lookahead also answers about this many states before the live one (a planner "
                                  "that read the state a step or two late); 0 = the live state only", 0, 64)

    def validate(self) -> None:
        """ConfigError naming the first invalid parameter."""
        check_fields(self)
        self.check_run()

    def world(self, episode: int) -> WorldConfig:
        """The world configuration of episode `episode`."""
        return WorldConfig(**{**self.world_fields(), "seed": self.seed + episode})


@dataclass
class AirSimBridgeConfig(EpisodeRunConfig, IntersectionConfig):
    """Parameters of airsim_bridge: the intersection scenario, how episodes run, and the AirSim connection."""

    host: str = param("127.0.0.1", "AirSim RPC server host (the simulator, or brace-airsim-peer)")
    port: int = param(41451, "AirSim RPC port (AirSim's ApiServerPort)", 1, 65535)
    timeout_s: float = param(10.0, "longest wait for one RPC reply (s); longer is a lost connection", 0.1, 3600.0)
    reconnect_period_s: float = param(2.0, "while the connection is lost, try to reconnect this often (s)", 0.1, 600.0)
    lockstep: bool = param(True, "pause the simulator and advance it sim_step_s per step (simContinueForTime); "
                           "false: the simulator runs in real time and a step reads it every step_period_s")
    autostart: bool = autostart_param()

    def validate(self) -> None:
        """ConfigError naming the first invalid parameter."""
        IntersectionConfig.validate(self)
        self.check_run()
        if not self.host.strip():
            raise ConfigError("host", "must not be empty")
        if self.hold_while_planning and not self.lockstep:
            raise ConfigError("hold_while_planning", "holds only a paused simulator: set lockstep true, or "
                              "hold_while_planning false for a simulator in real time")

    def scenario(self, episode: int) -> IntersectionConfig:
        """The scenario of episode `episode`."""
        return IntersectionConfig(**{**self.scenario_fields(), "seed": self.seed + episode})
