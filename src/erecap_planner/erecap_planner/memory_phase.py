"""The retrieve phase of a call (paper Alg. 1 line 9) and what memory changes in the context a call renders.

Memory lives inside B_t: a call reserves at most `memory_share` x B_t tokens for the MEMORY block (its header
included), and the context is compressed to the rest (in-model E-RECAP prunes the whole prompt to B_t with the
memory protected; a baseline compressor is given B_t minus the reserve, since it runs before retrieval, Alg. 1
lines 8-9). The ReCAP layout adds the agent's goal stack before the request and keeps a window of the newest
history; episodic memory drops the history entries its records folded. Reflective memory does not repeat a
constraint the context's CONSTRAINTS block holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from brace_common.vocabulary import Block
from brace_memory.system import MemorySystem, Retrieved

from .context import ContextBuffer, Entry

if TYPE_CHECKING:  # call_path imports this module
    from .call_path import CallRequest

MEMORY_HEADER = "MEMORY:\n"
"""The title of the retrieved lines in the prompt."""


@dataclass(frozen=True)
class MemoryUse:
    """How a call path uses memory: the modules' system, memory's share of B_t, the layout's history window."""

    system: MemorySystem
    share: float = 0.25
    recap_window: int = 8

    def reserve(self, token_budget: int, enabled: bool = True) -> int:
        """Tokens of B_t reserved for retrieved memory (0 when no retrieving module is on or the call has none)."""
        if not enabled or not self.system.retrieving():
            return 0
        return int(math.floor(self.share * token_budget))


def history_filter(memory: Optional[MemoryUse], layout: str,
                   agent_id: str = "") -> Optional[Callable[[list[Entry]], list[Entry]]]:
    """What leaves a call's history: entries episodic records folded, and (layout recap) all but the newest
    `recap_window`; with ReCAP's recursion the window is `agent_id`'s own entries since its top frame opened (per
    agent and per frame). None when nothing leaves."""
    if memory is None:
        return None
    folding = memory.system.on("episodic")
    window = memory.recap_window if layout == "recap" else None
    recursion = memory.system.recursion and layout == "recap" and bool(agent_id)
    since = memory.system.window_since(agent_id) if recursion else -1
    if not folding and window is None:
        return None

    def keep(history: list[Entry]) -> list[Entry]:
        if folding:
            folded = {}
            for entry in history:
                if entry.agent_id not in folded:
                    folded[entry.agent_id] = memory.system.folded_through(entry.agent_id)
            history = [e for e in history if e.step > folded[e.agent_id]]
        if recursion:
            history = [e for e in history if e.agent_id == agent_id and e.step >= since]
        if window is None:
            return history
        return history[-window:] if window > 0 else []

    return keep


def call_blocks(buffer: ContextBuffer, layout: str, memory: Optional[MemoryUse], agent_id: str = ""):
    """The blocks a call for `agent_id` renders (None: the buffer's own, unchanged)."""
    keep = history_filter(memory, layout, agent_id)
    if keep is None:
        return None
    return [(block, keep(entries) if block == Block.HISTORY else entries)
            for block, entries in buffer.blocks(layout)]


def goal_stack(memory: Optional[MemoryUse], layout: str, agent_id: str) -> list[str]:
    """The goal stack lines a call renders before its request (layout recap only)."""
    return memory.system.goal_stack(agent_id) if memory is not None and layout == "recap" else []


def retrieve(memory: Optional[MemoryUse], tokenizer, buffer: ContextBuffer, request: CallRequest, reserve: int,
             layout: str = "focus") -> Retrieved:
    """The retrieved lines of `request`'s call within `reserve` tokens (header included); the constraints the
    buffer's CONSTRAINTS block holds (and, in layout recap, the goal stack's) are in the prompt already and not
    retrieved again."""
    if memory is None or reserve <= 0:
        return Retrieved()
    header = len(tokenizer(MEMORY_HEADER, add_special_tokens=False)["input_ids"])
    agent_id = request.agent_id
    state = buffer.state.get(agent_id)
    query = memory.system.query(agent_id, state.text if state is not None else "")

    def count(lines: list[str]) -> list[int]:
        return [len(ids) for ids in tokenizer([line + "\n" for line in lines], add_special_tokens=False)["input_ids"]]

    in_prompt = [entry.text for entry in buffer.constraints]
    if layout == "recap":
        in_prompt += memory.system.goal_constraints(agent_id)
    return memory.system.retrieve(agent_id, query, request.step, reserve - header, count, in_prompt)


def memory_ids(tokenizer, lines: list[str], reserve: int) -> list[int]:
    """The MEMORY block's tokens for `lines`, the last lines left out until it fits `reserve` tokens (a line's
    tokens counted alone may merge differently in the block)."""
    lines = list(lines)
    while lines:
        ids = tokenizer(MEMORY_HEADER + "".join(f"{line}\n" for line in lines), add_special_tokens=False)["input_ids"]
        if len(ids) <= reserve:
            return list(ids)
        lines.pop()
    return []


def splice_memory(memory_ids: list[int], kept_ids: list[int], request_at: int,
                  protect: Optional[list[bool]] = None) -> tuple[list[int], Optional[list[bool]]]:
    """The MEMORY block's `memory_ids` before the request: (ids, protect mask)."""
    if not memory_ids:
        return kept_ids, protect
    kept_ids = kept_ids[:request_at] + memory_ids + kept_ids[request_at:]
    if protect is not None:
        protect = protect[:request_at] + [True] * len(memory_ids) + protect[request_at:]
    return kept_ids, protect
