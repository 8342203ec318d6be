"""Typed, validated configuration of the controller and the trigger monitor.

Each field is one ROS parameter of the same name: `param()` attaches the
parameter's description and allowed range, the nodes declare parameters from
these fields, and `validate()` rejects bad values with a ConfigError that names
the parameter. The same dataclasses load from a ROS parameter YAML file
(`ros__parameters`) so benchmarks and nodes share one configuration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from brace_common.config import ConfigError, check_agent_ids, check_fields, diagnostics_period_param, package_file, param
from brace_common.vocabulary import Mode, TriggerKind

# --------------------------------------------------------------------------- budget profiles


@dataclass(frozen=True)
class ModeBudget:
    """Token budget B and latency SLO of one replanning mode."""

    token_budget: int
    slo_ms: float


@dataclass(frozen=True)
class KindScale:
    """Multipliers a trigger kind applies to its mode's budget and SLO."""

    budget_scale: float = 1.0
    slo_scale: float = 1.0


@dataclass(frozen=True)
class BudgetProfile:
    """One named profile of Eq. 2: per-mode (B, SLO), per-kind scales, bounds."""

    name: str
    modes: dict[Mode, ModeBudget]
    kinds: dict[TriggerKind, KindScale]
    min_token_budget: int
    max_token_budget: int
    hard_deadline_factor: float


def _profile_from_dict(name: str, raw: dict[str, Any]) -> BudgetProfile:
    where = f"budget profile '{name}'"
    try:
        modes: dict[Mode, ModeBudget] = {}
        for label, entry in (raw.get("modes") or {}).items():
            mode = Mode.from_label(label)
            modes[mode] = ModeBudget(int(entry["token_budget"]), float(entry["slo_ms"]))
        kinds = {
            TriggerKind.from_label(label): KindScale(
                float(entry.get("budget_scale", 1.0)), float(entry.get("slo_scale", 1.0))
            )
            for label, entry in (raw.get("kinds") or {}).items()
        }
        profile = BudgetProfile(
            name=name,
            modes=modes,
            kinds=kinds,
            min_token_budget=int(raw.get("min_token_budget", 16)),
            max_token_budget=int(raw.get("max_token_budget", 8192)),
            hard_deadline_factor=float(raw.get("hard_deadline_factor", 2.0)),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError("budget_profiles_file", f"{where} is malformed: {exc}") from None
    needed = {Mode.FULL_REPLAN, Mode.PARTIAL_REPLAN, Mode.REUSE_SUBPLAN}
    if missing := needed - set(profile.modes):
        raise ConfigError("budget_profiles_file", f"{where} lacks modes {sorted(m.label for m in missing)}")
    if Mode.DEFER_REPLAN in profile.modes:
        raise ConfigError("budget_profiles_file", f"{where}: defer_replan makes no call and takes no budget")
    if not 0 < profile.min_token_budget <= profile.max_token_budget:
        raise ConfigError("budget_profiles_file", f"{where}: need 0 < min_token_budget <= max_token_budget")
    for mode, mb in profile.modes.items():
        if not profile.min_token_budget <= mb.token_budget <= profile.max_token_budget:
            raise ConfigError("budget_profiles_file", f"{where}: {mode.label} budget outside [min, max]")
        if not (math.isfinite(mb.slo_ms) and mb.slo_ms > 0):
            raise ConfigError("budget_profiles_file", f"{where}: {mode.label} slo_ms must be > 0")
    for kind, ks in profile.kinds.items():
        if not (ks.budget_scale > 0 and ks.slo_scale > 0):
            raise ConfigError("budget_profiles_file", f"{where}: {kind.label} scales must be > 0")
    if not profile.hard_deadline_factor >= 1.0:
        raise ConfigError("budget_profiles_file", f"{where}: hard_deadline_factor must be >= 1")
    return profile


def load_profiles(path: str | Path) -> dict[str, BudgetProfile]:
    """Load every budget profile of a profiles YAML file (see config/budget_profiles.yaml)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("budget_profiles_file", f"no such file: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError("budget_profiles_file", f"{path} is not valid YAML: {exc}") from None
    raw_profiles = data.get("profiles")
    if not isinstance(raw_profiles, dict) or not raw_profiles:
        raise ConfigError("budget_profiles_file", f"{path} has no 'profiles' mapping")
    return {name: _profile_from_dict(name, raw) for name, raw in raw_profiles.items()}


def default_profiles_path() -> Path:
    """The budget profiles shipped with the package (installed share, else the source tree)."""
    return package_file("brace_controller", "config/budget_profiles.yaml", Path(__file__).resolve().parents[1])


# --------------------------------------------------------------------------- controller


@dataclass
class ControllerConfig:
    """Parameters of the BRACE controller (gate Eq. 1, policy Eq. 2, overrides, adaptive budget)."""

    cooldown_steps: int = param(3, "delta: minimum controller steps between an agent's replanning calls", 0, 10**6)
    commit_steps: int = param(2, "omega: minimum steps a changed plan of an agent survives before replacement", 0, 10**6)
    team_cooldown_steps: int = param(0, "delta for the team: minimum steps between any two calls (0 = off)", 0, 10**6)
    team_commit_steps: int = param(0, "omega for the team: minimum steps between any two plan changes (0 = off)", 0, 10**6)
    override_after_failures: int = param(3, "k: consecutive failures after which gates are bypassed (0 = never)", 0, 10**6)
    override_budget_scale: float = param(1.5, "budget multiplier per failure at or past k (bounded)", 1.0, 100.0)
    override_slo_scale: float = param(1.5, "SLO multiplier while an override is active", 1.0, 100.0)
    override_max_token_budget: int = param(4096, "upper bound of an override's raised budget", 1, 10**7)
    max_consecutive_deferrals: int = param(8, "suppressions in a row after which an agent is admitted despite team gates "
        "and SLO infeasibility (0 = off)", 0, 10**6)
    reuse_severity: float = param(0.5, "periodic triggers below this severity reuse the current subplan", 0.0, 1.0)
    recap_depth_budget_ratio: float = param(1.0, "ReCAP: B_t of a call for a frame at depth d is the mode's B_t x "
                                            "this^d (1 = every depth alike)", 0.05, 1.0)
    recap_max_follow_ups: int = param(16, "ReCAP: calls in a row the controller raises itself for an agent whose "
                                      "frame stack left it nothing to execute (a frame to decompose, a parent whose "
                                      "child closed); past it the agent waits for its next trigger", 1, 10**6)
    budget_profile: str = param("default", "name of the budget profile of Eq. 2 in budget_profiles_file")
    budget_profiles_file: str = param("", "YAML file of budget profiles; empty = the one shipped with brace_controller")
    adaptive_budget: bool = param(True, "fit latency vs tokens online and lower B_t so backlog + predicted P95 <= SLO_t x guard "
        "(off = paper-faithful)")
    adaptive_guard_ratio: float = param(0.9, "fraction of SLO_t the predicted P95 may use", 0.05, 1.0)
    adaptive_window: int = param(256, "recent calls the latency model is fitted on", 8, 100000)
    adaptive_min_samples: int = param(8, "calls needed before the latency model is used", 3, 100000)
    adaptive_tail_quantile: float = param(0.95, "quantile of fit residuals added as tail margin", 0.5, 0.999)
    defer_when_infeasible: bool = param(True, "defer non-critical triggers when the planner backlog plus the call "
        "is predicted to miss SLO_t x guard even at the minimum budget (at B_t without adaptive_budget; "
        "off with adaptive_budget off = paper-faithful)")
    memory_off_when_infeasible: bool = param(True, "admit a call whose predicted P95 misses SLO_t x guard even at "
        "its fitted budget without retrieved memory (Replan.memory_off): the planner skips the retrieve phase")
    quality_floor_tokens: int = param(0, "the smallest B_t the adaptive budget gives at start (0 = the profile's "
        "min_token_budget); it rises as calls near it return plans naming unknown entities (quality_floor.py)",
        0, 10**7)
    quality_floor_step: int = param(64, "tokens the quality floor rises by", 1, 10**6)
    quality_floor_window: int = param(8, "latest calls near the floor it judges by", 1, 10**6)
    quality_floor_max_error_rate: float = param(0.25, "share of those calls that may name unknown entities before "
        "the floor rises", 0.0, 0.99)

    def validate(self) -> None:
        """Raise ConfigError naming the first invalid parameter."""
        check_fields(self)
        if not self.budget_profile.strip():
            raise ConfigError("budget_profile", "must name a profile")
        if self.adaptive_min_samples > self.adaptive_window:
            raise ConfigError("adaptive_min_samples", "must not exceed adaptive_window")

    def profiles_path(self) -> Path:
        """The budget profiles file this config names (the shipped one when empty)."""
        return Path(self.budget_profiles_file) if self.budget_profiles_file else default_profiles_path()

    def load_profile(self) -> BudgetProfile:
        """Load the selected budget profile; ConfigError('budget_profile') when it is unknown."""
        profiles = load_profiles(self.profiles_path())
        if self.budget_profile not in profiles:
            raise ConfigError(
                "budget_profile", f"unknown profile '{self.budget_profile}' (known: {', '.join(sorted(profiles))})"
            )
        return profiles[self.budget_profile]


# --------------------------------------------------------------------------- trigger monitor


@dataclass
class MonitorConfig:
    """Parameters of the trigger detectors."""

    agents: list[str] = param([], "agent ids the monitor expects before their first state ([] = the world's: an "
                              "agent joins with its first AgentState of an episode, initial plan included)")
    step_source: str = param("timer", "'timer': step advances every step_period_s; 'agent_state': step follows AgentState.step")
    step_period_s: float = param(0.1, "controller step period when step_source is 'timer' (s)", 0.001, 3600.0)
    periodic_interval_steps: int = param(10, "steps between periodic triggers per agent (0 = off)", 0, 10**6)
    periodic_stagger_steps: int = param(0, "the i-th agent's periodic (and initial-plan) triggers come i x this many "
        "steps after the first agent's (0 = all agents at the same step)", 0, 10**6)
    plan_done_idle_steps: int = param(0, "an agent without a goal for this many steps that moved more than "
        "deadlock_progress_m since its last such trigger raises a periodic trigger 'plan finished' (0 = off)", 0, 10**6)
    failure_threshold: int = param(2, "k: consecutive failed outcomes that raise a failure trigger (0 = off)", 0, 10**6)
    drift_threshold_m: float = param(0.5, "tracking error (the AgentState's, else the world state's) above which a step "
                                     "counts as drifting (m)", 0.0, 1e6)
    drift_steps: int = param(3, "m: consecutive drifting steps that raise a drift trigger (0 = off)", 0, 10**6)
    hazard_distance_m: float = param(0.5, "d_min: inter-agent distance below which a hazard "
        "trigger is raised (m; 0 = off)", 0.0, 1e6)
    hazard_repeat_steps: int = param(5, "while a hazard persists, raise it again every this many steps", 1, 10**6)
    deadlock_window: int = param(3, "w: steps of stall evidence summed into Z_t (Eq. 12; 0 = off)", 0, 10**6)
    deadlock_threshold: int = param(3, "Z_t at or above which a deadlock trigger is raised", 1, 10**6)
    deadlock_progress_m: float = param(0.05, "movement per step below which an agent with a goal counts as stalled (m)", 0.0, 1e6)
    preempt_min_confidence: float = param(0.5, "verifier confidence needed to raise a preempt trigger", 0.0, 1.0)
    recap_refine: bool = param(False, "ReCAP: raise a refine trigger after each step that succeeded (rho may refine "
        "the agent's frame; suppressed, the frame's subtasks run on) and for a finished plan instead of a periodic one "
        "(the planner runs recap_recursion)")
    loop_detection: bool = param(False, "raise a loop trigger when an agent is back in a state it held earlier in "
        "the episode (GiG's loop detection on the world_state topic's scene graphs; false = off)")
    loop_view_hops: int = param(2, "an agent's state: the scene graph its relations reach within this many edges, "
        "not through other agents (0 = the whole scene: a one-agent world)", 0, 100)
    loop_cell_m: float = param(1.0, "grid cell (m) the agent's own pose is rounded to in its state (0 = pose left "
        "out)", 0.0, 1e6)
    loop_repeat_steps: int = param(5, "after an agent's loop trigger, steps before another loop of the agent raises "
        "one", 1, 10**6)
    initial_plan: bool = param(True, "after an episode start (episode topic), raise a periodic trigger for "
                               "every agent at the episode's first step, staggered like the periodic ones "
                               "(false = no initial plan: the open-loop baseline)")

    def validate(self) -> None:
        """Raise ConfigError naming the first invalid parameter."""
        check_fields(self)
        if self.step_source not in ("timer", "agent_state"):
            raise ConfigError("step_source", f"'{self.step_source}' is not 'timer' or 'agent_state'")
        check_agent_ids("agents", self.agents)
        if len(set(self.agents)) != len(self.agents):
            raise ConfigError("agents", "agent ids must be unique")
        if self.deadlock_window and self.deadlock_threshold > self.deadlock_window:
            raise ConfigError("deadlock_threshold", "cannot exceed deadlock_window (Z_t <= w)")


@dataclass
class ControllerNodeConfig:
    """Parameters of the controller node that are about ROS, not about the gate."""

    replan_action: str = param("replan", "name of the Replan action served by the planner (relative: in the "
                               "node's namespace)")
    deadline_check_period_s: float = param(0.01, "how often in-flight calls are checked against "
        "their hard deadline (s)", 0.001, 10.0)
    state_period_s: float = param(0.5, "period of controller_state (s)", 0.01, 3600.0)
    diagnostics_period_s: float = diagnostics_period_param()
    server_load_stale_after_s: float = param(1.0, "a planner server's load (server_load) older than this counts as "
                                         "none (s); 0 = the server's load is not used", 0.0, 3600.0)
    server_release_jitter_s: float = param(0.5, "when the server's other requests fall, held triggers are decided "
                                           "again after a random delay up to this (s), so that robots of a fleet "
                                           "that all waited do not all call at once", 0.0, 60.0)

    def validate(self) -> None:
        """Raise ConfigError naming the first invalid parameter."""
        check_fields(self)
        if not self.replan_action.strip():
            raise ConfigError("replan_action", "must name an action")


@dataclass
class MonitorNodeConfig:
    """Parameters of the trigger monitor node that are about ROS, not about detection."""

    diagnostics_period_s: float = diagnostics_period_param()
    wait_for_episode: bool = param(True, "raise no trigger until a world announces an episode (a START on episode, "
        "or the latched world_info of a running one): a call before then plans for a world that has not begun "
        "(false: from the first state on, for a robot with no world announcing episodes)")

    def validate(self) -> None:
        """Raise ConfigError naming the first invalid parameter."""
        check_fields(self)
