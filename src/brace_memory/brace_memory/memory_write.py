"""A plan's explicit memory write (OmniAct Sec. 3.4, `store_memory`): a skill the planner may call to keep a note.

The skill joins the planner's action schema (every agent kind may call it), so a plan's write is validated like any
step. It never reaches the executor: the planner splits the writes off the plan it returns and reflective memory
keeps each text as a note record, retrieved by later calls. Its one parameter is free text, so only decodings that
write free text (the server backends, free generation) can call it; constrained and candidates decoding choose among
enumerated calls and never do.
"""

from __future__ import annotations

from collections.abc import Sequence

from brace_common.action_schema import ActionSchema, Step

MEMORY_WRITE_ACTION = "store_memory"
"""The skill of a plan's memory write."""
MEMORY_WRITE_TEXT = "text"
"""Its parameter: the note to keep (reflective memory keeps its first MAX_NOTE_CHARS characters)."""


def with_memory_write(schema: ActionSchema) -> ActionSchema:
    """`schema` with the memory-write skill, allowed to every agent kind; ValueError when the world already has a
    skill of that name."""
    if MEMORY_WRITE_ACTION in schema.actions:
        raise ValueError(f"the world's action schema already has a skill '{MEMORY_WRITE_ACTION}'")
    override = {"actions": {MEMORY_WRITE_ACTION: {MEMORY_WRITE_TEXT: {"type": "string"}}},
                "kinds": {kind: [*allowed, MEMORY_WRITE_ACTION] for kind, allowed in schema.kinds.items()}}
    return schema.extend(override)


def split_memory_writes(steps: Sequence[Step]) -> tuple[list[Step], list[str]]:
    """A validated plan's steps to execute and, in order, the texts of its memory writes."""
    keep = [s for s in steps if s.action != MEMORY_WRITE_ACTION]
    notes = [str(s.parameters.get(MEMORY_WRITE_TEXT, "")) for s in steps if s.action == MEMORY_WRITE_ACTION]
    return keep, [n for n in notes if n.strip()]
