"""The prompts training examples are made of, built by the planner's own call path (no second prompt format).

ROS-free. A `prompt_path` is the sim planner's CallPath (constrained decoding, the stable_first layout) on a backend
that renders and never runs a model: a flat example and one with memory go through the same `CallPath.prompt` the
planner's uncompressed calls read, at the B_t the controller would give the call (`call_budget`: the demo's
`embedded` budget profile for the point's mode, lowered as the adaptive budget lowers it).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Optional

from brace_common.action_schema import ActionSchema
from brace_common.counters import Health
from brace_common.vocabulary import Mode
from erecap_planner.call_path import BackendUnavailable, CallOptions, CallPath, CallRequest
from erecap_planner.memory_phase import MemoryUse

from .plan_data import DecisionPoint, context_buffer

LAYOUT = "stable_first"
"""The layout the sim planner runs (params/erecap_planner_sim.yaml)."""
PROFILE = "embedded"
"""The budget profile of the demo's controller (runs/demo.yaml)."""
ADAPTIVE_SCALES = (1.0, 1.0, 0.75, 0.5)
"""What the adaptive budget does to the profile's B (kept as is, or lowered to fit the SLO), drawn per example."""


@dataclass
class RenderOnly:
    """A call path backend that tokenises and renders but runs no model: calls through it are unavailable."""

    tokenizer: Any
    name: str = "render_only"
    model_name: str = ""

    def generate(self, *_args, **_kwargs):
        """Never: a render-only path has no model."""
        raise BackendUnavailable("a render-only call path runs no model")

    def health(self) -> Health:
        """Nothing to report but what it is."""
        return Health({"backend": self.name})


def prompt_path(tokenizer, schema: ActionSchema) -> CallPath:
    """The sim planner's call path for `schema` on a render-only backend; its `use.constrained` is the decoder the
    planner decodes with (target ids and choice masks come from it)."""
    return CallPath(RenderOnly(tokenizer), CallOptions(compressor="none", decoding="constrained", layout=LAYOUT),
                    None, schema)


def use_memory(path: CallPath, memory: Optional[MemoryUse]) -> None:
    """Make the next prompts read `memory` (None: flat history), told the schema's skill calls as the node tells it."""
    path.memory = memory
    if memory is not None and path.use is not None:
        memory.system.on_schema(path.use.candidates)


def mode_budgets(profile: str = PROFILE) -> tuple[dict[Mode, int], int]:
    """(B per mode, the profile's minimum B) of a budget profile of brace_controller's config."""
    # heavy-ish: the controller's config reads its YAML; only training needs it
    from brace_controller.config import default_profiles_path, load_profiles

    chosen = load_profiles(default_profiles_path())[profile]
    return {mode: m.token_budget for mode, m in chosen.modes.items()}, chosen.min_token_budget


def call_budget(mode: Mode, budgets: tuple[dict[Mode, int], int], rng: random.Random) -> int:
    """The B_t a call of `mode` gets: the profile's, scaled by a draw of ADAPTIVE_SCALES, not below its minimum."""
    per_mode, floor = budgets
    return max(floor, int(per_mode[mode] * rng.choice(ADAPTIVE_SCALES)))


def call_prompt(path: CallPath, point: DecisionPoint, token_budget: int) -> tuple[list[int], list[bool]]:
    """The prompt (ids, protected) a call at `point` with B_t = `token_budget` reads before compression, memory (as it
    is now) included."""
    return path.prompt(context_buffer(point.entries), CallRequest(point.agent_id, token_budget, 0.0, 0.0,
                                                                  int(point.mode), point.step))
