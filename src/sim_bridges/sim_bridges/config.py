"""Typed, validated parameters of the embedded_sim node: the world's (WorldConfig) and the node's own."""

from __future__ import annotations

from dataclasses import dataclass

from brace_common import names
from brace_common.config import ConfigError, check_fields, param

from .warehouse import WorldConfig


@dataclass
class SimConfig(WorldConfig):
    """Parameters of embedded_sim: every WorldConfig field, then how the node runs episodes of that world."""

    episodes: int = param(3, "episodes to run (seeds seed, seed+1, ...)", 1, 10**6)
    observe_every: int = param(4, "every N steps each agent's observation also goes to the history (0 = never)",
                               0, 10**6)
    step_period_s: float = param(0.05, "wall time between steps when no call is in flight (s, steady clock)",
                                 0.001, 60.0)
    sim_step_s: float = param(0.5, "simulated seconds per step: /clock advances by this each step (and each episode "
                              "start), monotonic over the run", 0.001, 3600.0)
    hold_while_planning: bool = param(True, "do not step while an admitted call has not returned (lockstep)")
    hold_timeout_s: float = param(60.0, "longest hold for one call before stepping anyway (s)", 0.1, 3600.0)
    wait_for_nodes: list[str] = param([], "nodes (names in this node's namespace) that must be in the graph before "
                                      "the first episode starts, e.g. [trigger_monitor, brace_controller]")
    replan_action: str = param("", "Replan action whose server must answer before the first episode starts "
                               f"(e.g. '{names.REPLAN}'); '' = do not wait for a planner")
    wait_timeout_s: float = param(120.0, "after this long without the peers above, diagnostics say ERROR (the node "
                                  "keeps waiting)", 0.1, 86400.0)
    wait_settle_s: float = param(1.0, "once every peer is up, wait this long more for their subscriptions to match "
                                 "(s)", 0.0, 60.0)
    variant: str = param("", "label of the run's variant, copied into the episode messages")
    frame_id: str = param("map", "frame of agent positions and markers")
    markers: bool = param(True, "publish markers")
    shutdown_when_done: bool = param(False, "exit the node's process after the last episode")

    def validate(self) -> None:
        """ConfigError naming the first invalid parameter."""
        check_fields(self)
        if not self.frame_id.strip():
            raise ConfigError("frame_id", "must not be empty")
        if any(not n.strip() or "/" in n for n in self.wait_for_nodes):
            raise ConfigError("wait_for_nodes", f"{self.wait_for_nodes}: each must be a node name without a namespace")

    def world(self, episode: int) -> WorldConfig:
        """The world configuration of episode `episode`."""
        return WorldConfig(**{**self.world_fields(), "seed": self.seed + episode})
