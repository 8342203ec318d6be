"""The valid skill calls of an action schema, enumerated (candidate scoring, constrained decoding, memory).

Torch-free: a server-backed planner enumerates them for its memory modules without the in-process model's modules.
"""

from __future__ import annotations

import itertools
import math

from brace_common.action_schema import ActionSchema, Step
from brace_common.validation import InvalidInput

MAX_CANDIDATES = 4096
"""The most skill calls a schema may enumerate (the cross product of its enumerated parameters): each is tokenised
into the constrained decoder and scored. The largest shipped schema (the warehouse at K = 8) has 106; above the cap a
schema is refused (docs/hardening.md measures the planner's cost at it)."""


class CandidateLimit(InvalidInput):
    """A schema enumerates more skill calls than MAX_CANDIDATES (an InvalidInput: a schema from the graph is
    refused and counted as `too_many_candidates`)."""

    def __init__(self, message: str) -> None:
        super().__init__("too_many_candidates", message)


def candidate_count(schema: ActionSchema) -> int:
    """How many skill calls `enumerate_steps` would list, computed without listing them."""
    total = 0
    for spec in schema.actions.values():
        required = [p for p in spec.parameters.values() if p.required]
        if all(p.choices is not None for p in required):
            total += math.prod(len(p.choices) for p in required)
    return total


def enumerate_steps(schema: ActionSchema, limit: int = MAX_CANDIDATES) -> list[Step]:
    """Every skill call whose parameters all have enumerated choices (optional ones left out); CandidateLimit when
    there would be more than `limit`."""
    count = candidate_count(schema)
    if count > limit:
        raise CandidateLimit(f"the schema enumerates {count} skill calls (at most {limit}: fewer choices per "
                             "parameter, or a parameter without enumerated choices)")
    steps = []
    for spec in schema.actions.values():
        required = {name: p for name, p in spec.parameters.items() if p.required}
        if any(p.choices is None for p in required.values()):
            continue
        names = list(required)
        for values in itertools.product(*(required[n].choices for n in names)):
            steps.append(Step(spec.name, dict(zip(names, values, strict=True))))
    return steps
