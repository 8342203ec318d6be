"""The replanning context C_t (paper Eq. 3): typed blocks of per-agent entries, rendered for the planner.

Blocks task, state, constraints and coordination are protected from pruning
in what concerns the requested agent: its own entries, entries no agent
contributed (an agent contributes a state entry; a supervisor does not), and
entries that name it (a teammate's handoff task or message to it). Other
agents' entries in those blocks, and the whole history, are prunable, so the
protected part of a call's prompt stays small as the team grows. State keeps
only each agent's latest entry; the other blocks accumulate, so the context
grows with time and with the number of agents. The requested agent's own
task, state and the messages that name it are rendered last, in a `FOR
<agent>` section next to the request, where a small model reads them most
reliably (the tail of the prompt also survives every compressor). `render`
produces the planner prompt through the model's chat template and labels every
token with its block and entry, so compressors can respect protected blocks and
count tokens exactly with the model's tokenizer.

Two layouts. `focus` (the planner's original): the requested agent's own task,
messages and state are moved out of their blocks into the FOR section.
`stable_first`: everything that only grows (task, constraints, coordination,
history) comes first, in the order it arrived, as runs of consecutive entries
of one block under that block's title, the same for every agent; what changes
from call to call (the agents' states, the FOR section, the request) comes
last, and the FOR section repeats the agent's own task and messages (the
copies in the log are then prunable). A new entry of any block only appends to
that log, so consecutive calls share their prompt up to the newest entry,
whichever agent they plan for, and the prefill of that shared prefix can be
reused (`prefix_cache.py`). (Whole blocks in a fixed order would not do: a new
coordination message or finished task would land before the history and
invalidate all of it; at K = 8 those calls ran cold.)
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Optional

from brace_common.vocabulary import Block, EntryKind

MAX_CHARS_PER_TOKEN = 16
"""No tokenizer packs more characters than this into a token on ordinary text: a prompt of more than
max_tokens x this many characters certainly has more than max_tokens tokens."""
PROTECTED_BLOCKS = frozenset({Block.TASK, Block.STATE, Block.CONSTRAINTS, Block.COORDINATION})
_ORDER = (Block.TASK, Block.CONSTRAINTS, Block.STATE, Block.COORDINATION, Block.HISTORY)
LAYOUTS = ("focus", "stable_first")
# The requested agent's own task, messages to it and its state close the context, next to the request.
FOCUS_BLOCKS = frozenset({Block.TASK, Block.STATE, Block.COORDINATION})
_FOCUS_ORDER = (Block.TASK, Block.COORDINATION, Block.STATE)
_TITLES = {Block.TASK: "TASK", Block.CONSTRAINTS: "CONSTRAINTS", Block.STATE: "STATE",
           Block.COORDINATION: "COORDINATION", Block.HISTORY: "HISTORY"}

DEFAULT_SYSTEM_PROMPT = (
    "You are the planner of an embodied agent team. Read the context and choose the next skill call "
    "for the requested agent. Reply with exactly one JSON object."
)


@dataclass(frozen=True)
class Entry:
    """One context entry contributed by an agent at a controller step."""

    agent_id: str
    step: int
    block: Block
    text: str
    kind: str = EntryKind.OBSERVATION.value
    stamp: float = 0.0

    def line(self) -> str:
        """How the entry reads in the prompt."""
        return f"[t={self.step} {self.agent_id}] {self.text}"


@dataclass
class RenderedContext:
    """A rendered prompt with a block / entry label for every token."""

    text: str
    token_ids: list[int]
    protected: list[bool]                  # token must survive every compressor (template, request, protected blocks)
    entry_of_token: list[int]              # index into `entries`, -1 for template / header / request tokens
    entries: list[Entry] = field(default_factory=list)
    request_start: int = -1                # first token of the REQUEST line (retrieved memory goes before it)
    evicted: int = 0                       # oldest history entries left out to fit max_tokens
    content_span: tuple[int, int] = (0, -1)  # tokens [start, end) of the user message (the rest: chat template)

    def __len__(self) -> int:
        return len(self.token_ids)

    def entry_spans(self) -> dict[int, list[int]]:
        """Token indices of each entry."""
        spans: dict[int, list[int]] = {}
        for i, e in enumerate(self.entry_of_token):
            if e >= 0:
                spans.setdefault(e, []).append(i)
        return spans


class ContextBuffer:
    """Accumulates ContextEntries; renders the planner prompt for one agent.

    Every entry but the agents' states is kept in one log in arrival order (the
    blocks are views of it); each agent's latest state replaces its previous one.
    """

    def __init__(self, max_history: int = 100_000):
        self.max_history = max_history
        self.log: list[Entry] = []
        self.state: dict[str, Entry] = {}
        self.dropped = 0
        self._history_count = 0

    def _block(self, block: Block) -> list[Entry]:
        return [e for e in self.log if e.block == block]

    @property
    def task(self) -> list[Entry]:
        """Task entries in arrival order."""
        return self._block(Block.TASK)

    @property
    def constraints(self) -> list[Entry]:
        """Constraint entries in arrival order."""
        return self._block(Block.CONSTRAINTS)

    @property
    def coordination(self) -> list[Entry]:
        """Coordination entries in arrival order."""
        return self._block(Block.COORDINATION)

    @property
    def history(self) -> list[Entry]:
        """History entries in arrival order (the oldest beyond `max_history` dropped)."""
        return self._block(Block.HISTORY)

    def add(self, entry: Entry) -> None:
        """Add one entry; ValueError on an empty agent id or text, or an unknown block."""
        if not entry.agent_id.strip():
            raise ValueError("agent_id is empty")
        if not entry.text.strip():
            raise ValueError("text is empty")
        block = Block(entry.block)
        if block == Block.STATE:
            self.state[entry.agent_id] = entry
            return
        self.log.append(entry)
        if block == Block.HISTORY:
            self._history_count += 1
            if self._history_count > self.max_history:
                oldest = next(i for i, e in enumerate(self.log) if e.block == Block.HISTORY)
                del self.log[oldest]
                self._history_count -= 1
                self.dropped += 1

    def extend(self, entries: Iterable[Entry]) -> None:
        """Add several entries."""
        for entry in entries:
            self.add(entry)

    def snapshot(self) -> ContextBuffer:
        """A copy that later `add` calls do not change (entries are immutable, containers are copied)."""
        copy = ContextBuffer(self.max_history)
        copy.log, copy.state = list(self.log), dict(self.state)
        copy.dropped, copy._history_count = self.dropped, self._history_count
        return copy

    def clear(self) -> None:
        """Forget everything."""
        self.__init__(self.max_history)

    def forget_before(self, stamp: float) -> int:
        """Forget every entry stamped before `stamp` (a new episode began then); how many were forgotten."""
        kept = [e for e in self.log if e.stamp >= stamp]
        states = {a: e for a, e in self.state.items() if e.stamp >= stamp}
        forgotten = len(self.log) - len(kept) + len(self.state) - len(states)
        self.log, self.state = kept, states
        self._history_count = sum(e.block == Block.HISTORY for e in kept)
        return forgotten

    def blocks(self, layout: str = "focus") -> list[tuple[Block, list[Entry]]]:
        """The blocks in prompt order with their entries.

        `focus`: one run per block in a fixed order. `stable_first`: the log's
        runs of consecutive same-block entries in arrival order, then the states.
        """
        state = sorted(self.state.values(), key=lambda e: e.agent_id)
        if layout != "stable_first":
            return [(b, state if b == Block.STATE else self._block(b)) for b in _ORDER]
        runs: list[tuple[Block, list[Entry]]] = []
        for entry in self.log:
            if runs and runs[-1][0] == entry.block:
                runs[-1][1].append(entry)
            else:
                runs.append((Block(entry.block), [entry]))
        return [*runs, (Block.STATE, state)]

    def render(self, tokenizer, agent_id: str, request: str, system_prompt: str = DEFAULT_SYSTEM_PROMPT,
               entries: Optional[list[tuple[Block, list[Entry]]]] = None, layout: str = "focus",
               max_tokens: Optional[int] = None) -> RenderedContext:
        """The chat-templated prompt asking for `agent_id`'s next step, with per-token labels.

        With `max_tokens`, a prompt longer than that leaves out its oldest history entries until it fits (the
        other blocks are kept whole; `RenderedContext.evicted` counts what was left out).
        """
        if max_tokens is not None:
            entries = self._within_chars(entries if entries is not None else self.blocks(layout),
                                         max_tokens * MAX_CHARS_PER_TOKEN)
        ctx = self._render(tokenizer, agent_id, request, system_prompt, entries, layout)
        if max_tokens is None or len(ctx) <= max_tokens:
            return ctx
        excess = len(ctx) - max_tokens
        sizes = [0] * len(ctx.entries)
        for e in ctx.entry_of_token:
            if e >= 0:
                sizes[e] += 1
        evict: set[int] = set()  # ids of the oldest history entries whose tokens cover the excess
        for index in sorted((i for i, e in enumerate(ctx.entries) if e.block == Block.HISTORY),
                            key=lambda i: (ctx.entries[i].step, i)):
            if excess <= 0:
                break
            evict.add(id(ctx.entries[index]))
            excess -= sizes[index]
        kept = [(block, [e for e in block_entries if id(e) not in evict])
                for block, block_entries in (entries if entries is not None else self.blocks(layout))]
        trimmed = self._render(tokenizer, agent_id, request, system_prompt, kept, layout)
        trimmed.evicted = len(evict)
        return trimmed

    @staticmethod
    def _within_chars(blocks: list[tuple[Block, list[Entry]]], limit: int) -> list[tuple[Block, list[Entry]]]:
        """`blocks` without their oldest history entries beyond `limit` characters in all (before tokenising:
        a prompt that long has more than max_tokens tokens whatever the tokenizer, so its tail is never read)."""
        total = sum(len(e.text) for _, block_entries in blocks for e in block_entries)
        if total <= limit:
            return blocks
        history = sorted((e for b, es in blocks if b == Block.HISTORY for e in es), key=lambda e: e.step)
        evict: set[int] = set()
        for entry in history:
            if total <= limit:
                break
            evict.add(id(entry))
            total -= len(entry.text)
        return [(b, [e for e in es if id(e) not in evict]) for b, es in blocks]

    def _render(self, tokenizer, agent_id: str, request: str, system_prompt: str,
                entries: Optional[list[tuple[Block, list[Entry]]]], layout: str) -> RenderedContext:
        if layout not in LAYOUTS:
            raise ValueError(f"layout '{layout}' is not one of {LAYOUTS}")
        stable = layout == "stable_first"
        pieces: list[tuple[str, int, bool]] = []  # (text, entry index or -1, protected)
        all_entries: list[Entry] = []
        agents = set(self.state)
        named = re.compile(rf"\b{re.escape(agent_id)}\b")
        focus: list[Entry] = []

        def mine(entry: Entry) -> bool:  # the requested agent's entry, or one that names it
            return entry.agent_id == agent_id or bool(named.search(entry.text))

        def emit(title: str, block_entries: list[Entry], copied: bool = False) -> None:
            pieces.append((f"{title}:\n", -1, True))
            for entry in block_entries:
                all_entries.append(entry)
                # The agent's own entries are protected where the FOR section has them, not in their block too.
                concerns = (mine(entry) and not copied) or entry.agent_id not in agents
                pieces.append((entry.line() + "\n", len(all_entries) - 1, entry.block in PROTECTED_BLOCKS and concerns))

        for block, block_entries in entries if entries is not None else self.blocks(layout):
            copied = stable and block != Block.STATE
            if block in FOCUS_BLOCKS:
                focus.extend(e for e in block_entries if mine(e))
                if not copied:  # stable_first keeps the growing blocks whole, the same for every agent
                    block_entries = [e for e in block_entries if not mine(e)]
            if block_entries:
                emit(_TITLES[block], block_entries, copied and block in FOCUS_BLOCKS)
        if focus:
            focus.sort(key=lambda e: _FOCUS_ORDER.index(e.block))
            emit(f"FOR {agent_id}", focus)
        pieces.append((f"REQUEST: {request}", -1, True))
        content = "".join(p[0] for p in pieces)
        messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": content}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        offset = text.find(content)
        if offset < 0:
            raise ValueError("the chat template altered the context text")
        starts, labels = [], []
        pos = offset
        for piece, entry_index, protected in pieces:
            starts.append(pos)
            labels.append((entry_index, protected))
            pos += len(piece)
        end = pos
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        protected_mask, entry_of_token = [], []
        request_char = starts[-1]
        request_start, content = -1, [-1, -1]
        for begin, _ in enc["offset_mapping"]:
            if request_start < 0 and begin >= request_char:
                request_start = len(protected_mask)
            if content[0] < 0 and begin >= offset:
                content[0] = len(protected_mask)
            if content[1] < 0 and begin >= end:
                content[1] = len(protected_mask)
            if offset <= begin < end:
                entry_index, protected = labels[bisect.bisect_right(starts, begin) - 1]
            else:
                entry_index, protected = -1, True  # chat template: system prompt, role markers, generation prompt
            protected_mask.append(protected)
            entry_of_token.append(entry_index)
        span = (content[0], content[1] if content[1] >= 0 else len(protected_mask))
        return RenderedContext(text, list(enc["input_ids"]), protected_mask, entry_of_token, all_entries, request_start,
                               content_span=span)

    def token_count(self, tokenizer, agent_id: str, request: str, system_prompt: str = DEFAULT_SYSTEM_PROMPT,
                    layout: str = "focus") -> int:
        """N_t: exact tokens of the rendered prompt."""
        return len(self.render(tokenizer, agent_id, request, system_prompt, layout=layout))
