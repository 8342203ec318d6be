"""OmniAct Table 1's rows on a warehouse haystack case (haystack_cases.py): Alg. 1's Stage 2, each row streaming
the case's entries online into its context buffer and memory as the planner node takes them off `context`, and what
the row's call reads. ROS-free.

Rows (`ROWS`, OmniAct Sec. 4.3): raw history (the focus layout with the whole history), 10-turn window (the newest
`WINDOW_TURNS` history entries), turn summary (each history entry replaced, as it arrives, by its own extractive
summary, `haystack_cases.turn_summary`), episodic only (memory module `episodic`: event-boundary records, the
history entries they fold leave the prompt) and full memory (`episodic` + `reflective`: constraints also
consolidate into reflective records). Every row renders in the `focus` layout; a call's prompt is capped at the
planner's window by the call path (`max_context_tokens`: the oldest history yields). The blind control
(`BLIND_ROW`) is full memory on the case without its queried constraint.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from brace_common.vocabulary import Block, Mode
from brace_memory.system import MemorySystem, MemorySystemConfig
from erecap_planner.call_path import CallRequest, request_text
from erecap_planner.config import PlannerConfig
from erecap_planner.context import ContextBuffer
from erecap_planner.memory_phase import MemoryUse

from .haystack_cases import HaystackCase, turn_summary

WINDOW_TURNS = 10
"""The sliding window's history entries (OmniAct: the most recent 10 turns)."""
PLANNER = PlannerConfig()
"""The planner's defaults: memory_share, memory_max_lines and recap_window of every row with memory."""
LAYOUT = "focus"
"""Every row's context layout."""


@dataclass(frozen=True)
class HaystackRow:
    """One row of Table 1: the memory modules composed, the history window, whether turns are summarised, whether
    its cases lose their queried constraint (the blind control)."""

    name: str
    modules: tuple[str, ...] = ()
    window: Optional[int] = None
    summarised: bool = False
    blind: bool = False


ROWS = (HaystackRow("raw_history"),
        HaystackRow("window_10", window=WINDOW_TURNS),
        HaystackRow("turn_summary", summarised=True),
        HaystackRow("episodic_only", ("episodic",)),
        HaystackRow("full_memory", ("episodic", "reflective")))
"""Table 1's rows, in its order."""
BLIND_ROW = HaystackRow("blind_full_memory", ("episodic", "reflective"), blind=True)
"""The control: full memory on the case with its queried constraint removed (chance made visible)."""
ROW_NAMES = tuple(r.name for r in (*ROWS, BLIND_ROW))


@dataclass
class Streamed:
    """A row's state after a case streamed in: the context buffer and the memory the call path uses."""

    row: HaystackRow
    case: HaystackCase
    buffer: ContextBuffer
    memory: Optional[MemoryUse]


def row_named(name: str) -> HaystackRow:
    """The row called `name`; ValueError listing the rows otherwise."""
    for row in (*ROWS, BLIND_ROW):
        if row.name == name:
            return row
    raise ValueError(f"'{name}' is not a row ({', '.join(ROW_NAMES)})")


def stream(case: HaystackCase, row: HaystackRow, planner: PlannerConfig = PLANNER) -> Streamed:
    """Alg. 1, Stage 2: every entry of `case` (the blind one for a blind row) into a fresh buffer and memory of
    `row`, one at a time, so event-boundary folding and consolidation happen in the loop."""
    if row.blind:
        case = case.without_constraint()
    buffer = ContextBuffer(max_history=row.window) if row.window is not None else ContextBuffer()
    memory = None
    if row.modules:
        settings = MemorySystemConfig(row.modules, max_lines=planner.memory_max_lines)
        memory = MemoryUse(MemorySystem(settings), planner.memory_share, planner.recap_window)
    for entry in case.entries:
        if row.summarised and entry.block == Block.HISTORY:
            entry = replace(entry, text=turn_summary(entry.text))
        buffer.add(entry)
        if memory is not None:
            memory.system.on_context_entry(entry, frozenset(buffer.state))
    return Streamed(row, case, buffer, memory)


def call_request(case: HaystackCase, token_budget: int, slo_ms: float, hard_deadline_ms: float) -> CallRequest:
    """The query's call: a full replan of the case's agent at the query step."""
    return CallRequest(case.agent_id, token_budget, slo_ms, hard_deadline_ms, int(Mode.FULL_REPLAN), case.step)


def raw_tokens(case: HaystackCase, tokenizer, system_prompt: str) -> int:
    """The raw history's prompt tokens for the query, uncapped: the whole accumulated history (the 100 % of
    Table 1's compression column)."""
    streamed = stream(case, ROWS[0])
    request = request_text(case.schema, case.agent_id, int(Mode.FULL_REPLAN))
    return len(streamed.buffer.render(tokenizer, case.agent_id, request, system_prompt, layout=LAYOUT))


def constraint_form(case: HaystackCase, row: HaystackRow) -> str:
    """The queried constraint as it reads in the row's prompt, when the row kept it (summarised for turn summary)."""
    text = case.constraint.text
    return turn_summary(text) if row.summarised else " ".join(text.split())
