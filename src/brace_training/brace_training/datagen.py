"""Long-horizon embodied contexts in the manner of OmniAct App. E (Alg. 1, stage 1).

A case hides one seed constraint (`relocated`, `dock_closed`, `handoff`) among distractor events up to a target token
length; the correct next action depends on it. Seeded by the case id's SHA-256 (docs/training.md).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from brace_common.action_schema import ActionSchema, Step
from brace_common.vocabulary import Block
from erecap_planner.context import ContextBuffer, Entry

SHELVES = [f"shelf_{i}" for i in range(1, 7)]
DOCKS = [f"dock_{i}" for i in range(1, 4)]
OBJECTS = ["cup_3", "box_7", "drill_2", "shoe_5", "can_9"]
AGENTS = [f"agent_{i}" for i in range(4)]
SEED_KINDS = ("relocated", "dock_closed", "handoff")

_DISTRACTORS = (
    "inventory audit of {shelf}: {n} items counted, no discrepancy",
    "battery at {pct}%, charging not needed",
    "aisle {k} checked clear, floor dry",
    "display note: {shelf} label reprinted",
    "temperature in zone {k} is {t} C",
    "{agent} passed {shelf} heading north",
    "scanner recalibrated on {shelf}",
    "lights in aisle {k} at {pct}% brightness",
)


def warehouse_schema() -> ActionSchema:
    """The skills of the warehouse agents, with every valid value enumerated."""
    return ActionSchema.from_dict({
        "max_steps": 8,
        "actions": {
            "move_to": {"target": {"choices": SHELVES + DOCKS}},
            "pick": {"object": {"choices": OBJECTS}},
            "place": {"object": {"choices": OBJECTS}, "target": {"choices": DOCKS}},
            "handoff": {"object": {"choices": OBJECTS}, "to_agent": {"choices": AGENTS}},
            "wait": {},
        },
    })


@dataclass
class Case:
    """One generated context with its correct next action."""

    case_id: str
    buffer: ContextBuffer
    agent_id: str
    target: Step
    seed_kind: str
    seed_text: str


def _rng(case_id: str) -> random.Random:
    return random.Random(int.from_bytes(hashlib.sha256(case_id.encode()).digest()[:8], "little"))


# Coordination chatter: messages like the seed, so a compressor cannot find the seed by its kind alone.
_CHATTER = (
    "{agent} -> all: heading to the charger for a few minutes",
    "{agent} -> all: aisle {k} is crowded, slowing down",
    "{agent} -> all: I can help with lifting after my current task",
    "{agent} -> all: {shelf} restock finished",
    "{agent} -> all: scanner on {shelf} was slow, retried",
)


def _distractor(rng: random.Random) -> tuple[str, str]:
    template, kind = (rng.choice(_CHATTER), "message") if rng.random() < 0.3 else (rng.choice(_DISTRACTORS), "observation")
    text = template.format(shelf=rng.choice(SHELVES), n=rng.randint(3, 90), pct=rng.randint(20, 99),
                           k=rng.randint(1, 9), t=rng.randint(12, 30), agent=rng.choice(AGENTS))
    return text, kind


def make_case(case_id: str, target_tokens: int, tokenizer, seed_kind: str | None = None,
              seed_position: float | None = None) -> Case:
    """A case whose rendered prompt has about `target_tokens` tokens (never fewer than the seed needs)."""
    rng = _rng(case_id)
    kind = seed_kind or rng.choice(SEED_KINDS)
    agent = "agent_0"
    obj = rng.choice(OBJECTS)
    listed_shelf, actual_shelf = rng.sample(SHELVES, 2)
    task_dock, open_dock = rng.sample(DOCKS, 2)
    other = rng.choice(AGENTS[1:])
    buffer = ContextBuffer()
    buffer.add(Entry(agent, 0, Block.TASK, f"Deliver {obj} (listed on {listed_shelf}) to {task_dock}.", "task"))
    if kind == "relocated":
        seed = f"{obj} was moved from {listed_shelf} to {actual_shelf} by the night shift"
        state = "at the start area, holding nothing"
        target = Step("move_to", {"target": actual_shelf})
    elif kind == "dock_closed":
        seed = f"{task_dock} is closed for repairs; deliveries go to {open_dock}"
        state = f"at {task_dock} approach, holding {obj}"
        target = Step("place", {"object": obj, "target": open_dock})
    else:
        seed = f"supervisor: {obj} is reserved for {other}, hand it over instead of delivering it"
        state = f"at {listed_shelf}, holding {obj}"
        target = Step("handoff", {"object": obj, "to_agent": other})
    buffer.add(Entry(agent, 0, Block.STATE, state, "state"))

    # Stage 1 of App. E Alg. 1: distractors until the prompt reaches the target length, seed hidden among them.
    request = "Plan the next step for agent_0."
    base = buffer.token_count(tokenizer, agent, request)
    per_event = max(1, len(tokenizer(_distractor(rng)[0] + " [t=00 agent_0]\n", add_special_tokens=False)["input_ids"]))
    n_events = max(1, (target_tokens - base) // per_event)
    events = [(*_distractor(rng), rng.choice(AGENTS)) for _ in range(n_events)]
    position = seed_position if seed_position is not None else rng.uniform(0.05, 0.6)
    seed_at = min(len(events), int(position * len(events)))
    events.insert(seed_at, (seed, "message", "supervisor"))
    for t, (text, kind_label, source) in enumerate(events, start=1):
        buffer.add(Entry(source, t, Block.HISTORY, text, kind_label))
    return Case(case_id, buffer, agent, target, kind, seed)
