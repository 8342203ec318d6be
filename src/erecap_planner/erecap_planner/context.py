"""The replanning context C_t (paper Eq. 3): typed blocks of per-agent entries, rendered for the planner.

`ContextBuffer` holds the entries within `ContextLimits`; `render` makes one agent's chat-templated prompt in a layout
(`focus`, `stable_first`, `recap`) with a block / entry label per token, entries yielding by `yield_order` to fit a
token cap. Protection rules and layouts: docs/planner.md, "The context C_t".
"""

from __future__ import annotations

import bisect
import re
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Optional

from brace_common.episode_boundary import before_episode
from brace_common.vocabulary import Block, EntryKind

MAX_TOKENS_PER_CHAR = 4
"""No tokenizer makes more tokens of a character than its UTF-8 bytes: lines of at most max_tokens / 4 characters
certainly fit max_tokens tokens, and are not counted first."""
FIXED_TOKENS_PER_BLOCK = 8
"""Tokens a block's title takes, about (the fit to the rendered tokens corrects an error)."""
RENDER_CHECK_TOKENS = 16_384
"""Tokens labelled between two checkpoints of a render."""
PROTECTED_BLOCKS = frozenset({Block.TASK, Block.STATE, Block.CONSTRAINTS, Block.COORDINATION})
_ORDER = (Block.TASK, Block.CONSTRAINTS, Block.STATE, Block.COORDINATION, Block.HISTORY)
LAYOUTS = ("focus", "stable_first", "recap")
OVERFLOW_ORDER = (Block.COORDINATION, Block.STATE, Block.TASK, Block.CONSTRAINTS)
"""When a prompt's protected tokens exceed what a call keeps, protected entries yield in this block order: messages
oldest first, then a state's text from its front (the latest facts, e.g. the admissible commands, end it), then tasks
and constraints oldest first. The chat template, titles, GOALS and the request yield last (a compressor then keeps
the latest of them: the request whole)."""
_OVERFLOW_RANK = {block: rank for rank, block in enumerate(OVERFLOW_ORDER)}
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

    def protected_within(self, n: int) -> list[bool]:
        """The protected mask with at most `n` tokens marked (about: the template and request stay whole): past `n`,
        protected entries' tokens yield in `OVERFLOW_ORDER`, so a cut keeps the request, the goals and the rules
        before the oldest text of a long state."""
        mask = list(self.protected)
        excess = sum(mask) - max(n, 0)
        if excess <= 0:
            return mask

        # Once per entry, not per token; history entries are never protected, so their rank is never read.
        order = [(_OVERFLOW_RANK.get(Block(e.block), -1), e.step) for e in self.entries]

        def rank(i: int) -> tuple[int, int, int]:
            return *order[self.entry_of_token[i]], i

        for i in sorted((i for i, p in enumerate(mask) if p and self.entry_of_token[i] >= 0), key=rank)[:excess]:
            mask[i] = False
        return mask

    def entry_spans(self) -> dict[int, list[int]]:
        """Token indices of each entry."""
        spans: dict[int, list[int]] = {}
        for i, e in enumerate(self.entry_of_token):
            if e >= 0:
                spans.setdefault(e, []).append(i)
        return spans


def _no_check() -> None:
    """A checkpoint that never stops the work."""


@dataclass(frozen=True)
class ContextLimits:
    """What a ContextBuffer holds at most, enforced as entries arrive (so its memory is bounded, not only prompts).

    Per agent and per block task, constraints and coordination: at most `block_entries` entries and `block_chars`
    characters of text, the agent's oldest entry of that block yielding (the newest task / message stays). Each
    agent's state is its latest entry. History: at most `history` entries, the oldest yielding. In all (every
    agent, every block, the states included): at most `total_entries` entries and `total_chars` characters, the
    oldest history entry yielding first, then the oldest entry of any other block (a state included).
    """

    history: int = 20_000
    block_entries: int = 256
    block_chars: int = 65_536
    total_entries: int = 20_000
    total_chars: int = 1_048_576


DROP_REASONS = ("history", "block_entries", "block_chars", "total_entries", "total_chars")
"""Why a held entry yielded (the diagnostics count `dropped.context.<reason>`)."""


class TokenCounts:
    """Tokens of each entry's prompt line by one tokenizer, remembered while the entry lives.

    A call that fits a long context to its token cap counts only the entries that arrived since the last call;
    the counting runs in batches of `BATCH_CHARS` characters with a checkpoint between them.
    """

    BATCH_CHARS = 65_536

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self._counts: weakref.WeakKeyDictionary[Entry, int] = weakref.WeakKeyDictionary()

    def count(self, entries: list[Entry], checkpoint: Callable[[], None] = _no_check) -> list[int]:
        """Tokens of `entry.line()` plus its newline for each entry (`checkpoint()` between batches)."""
        batch: list[Entry] = []
        size = 0
        for entry in entries:
            if entry in self._counts:
                continue
            batch.append(entry)
            size += len(entry.text)
            if size >= self.BATCH_CHARS:
                self._encode(batch)
                checkpoint()
                batch, size = [], 0
        if batch:
            self._encode(batch)
        return [self._counts[e] for e in entries]

    def _encode(self, batch: list[Entry]) -> None:
        ids = self.tokenizer([e.line() + "\n" for e in batch], add_special_tokens=False)["input_ids"]
        for entry, tokens in zip(batch, ids, strict=True):
            self._counts[entry] = len(tokens)


def _unique(blocks: list[tuple[Block, list[Entry]]]) -> list[Entry]:
    """The entries of `blocks`, each once (an entry may be in two blocks' lists), in order of first appearance."""
    return list({id(e): e for _, block_entries in blocks for e in block_entries}.values())


def _without(blocks: list[tuple[Block, list[Entry]]], evict: set[int]) -> list[tuple[Block, list[Entry]]]:
    """`blocks` without the entries whose id is in `evict`."""
    return [(block, [e for e in block_entries if id(e) not in evict]) for block, block_entries in blocks]


class ContextBuffer:
    """Accumulates ContextEntries within `ContextLimits`; renders the planner prompt for one agent.

    Every entry but the agents' states is kept in one log in arrival order (the
    blocks are views of it); each agent's latest state replaces its previous one.
    An entry beyond a limit makes the oldest one the limit names yield, counted
    by reason in `dropped_by`.
    """

    def __init__(self, max_history: Optional[int] = None, limits: Optional[ContextLimits] = None):
        limits = limits or ContextLimits()
        self.limits = limits if max_history is None else replace(limits, history=max_history)
        self._seq = 0
        self._log: OrderedDict[int, Entry] = OrderedDict()      # arrival number -> entry (every block but state)
        self._history: deque[int] = deque()                      # arrival numbers of the history entries
        self._blocks: dict[tuple[str, Block], deque[int]] = {}   # (agent, block) -> its entries' arrival numbers
        self._block_chars: dict[tuple[str, Block], int] = {}
        self.state: dict[str, Entry] = {}
        self._state_seq: OrderedDict[str, int] = OrderedDict()  # agent -> arrival number of its state, oldest first
        self.chars = 0                                           # characters of every held text
        self.dropped_by = dict.fromkeys(DROP_REASONS, 0)

    @property
    def max_history(self) -> int:
        """History entries kept (the oldest beyond it yield)."""
        return self.limits.history

    @property
    def dropped(self) -> int:
        """Entries that yielded to a limit, all reasons."""
        return sum(self.dropped_by.values())

    @property
    def log(self) -> list[Entry]:
        """Every held entry but the states, in arrival order."""
        return list(self._log.values())

    def __len__(self) -> int:
        return len(self._log) + len(self.state)

    def _block(self, block: Block) -> list[Entry]:
        return [e for e in self._log.values() if e.block == block]

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
        """Add one entry, making older ones yield to the limits; ValueError on an empty agent id or text, or an
        unknown block."""
        if not entry.agent_id.strip():
            raise ValueError("agent_id is empty")
        if not entry.text.strip():
            raise ValueError("text is empty")
        block = Block(entry.block)
        self._seq += 1
        self._insert(self._seq, entry, block)
        limits = self.limits
        if block == Block.HISTORY:
            while len(self._history) > limits.history:
                self._drop(self._history[0], "history")
        elif block != Block.STATE:
            key = (entry.agent_id, block)
            while key in self._blocks and len(self._blocks[key]) > limits.block_entries:
                self._drop(self._blocks[key][0], "block_entries")
            while key in self._blocks and self._block_chars[key] > limits.block_chars:
                self._drop(self._blocks[key][0], "block_chars")
        while len(self) > limits.total_entries or self.chars > limits.total_chars:
            self._drop_oldest("total_entries" if len(self) > limits.total_entries else "total_chars")

    def _insert(self, seq: int, entry: Entry, block: Block) -> None:
        if block == Block.STATE:
            old = self.state.pop(entry.agent_id, None)
            if old is not None:
                self.chars -= len(old.text)
                del self._state_seq[entry.agent_id]
            self.state[entry.agent_id] = entry
            self._state_seq[entry.agent_id] = seq
        else:
            self._log[seq] = entry
            if block == Block.HISTORY:
                self._history.append(seq)
            else:
                key = (entry.agent_id, block)
                self._blocks.setdefault(key, deque()).append(seq)
                self._block_chars[key] = self._block_chars.get(key, 0) + len(entry.text)
        self.chars += len(entry.text)

    def _drop(self, seq: int, reason: str) -> None:
        """Drop the log entry `seq`, the oldest of its block (and agent)."""
        entry = self._log.pop(seq)
        if entry.block == Block.HISTORY:
            self._history.popleft()
        else:
            key = (entry.agent_id, Block(entry.block))
            self._blocks[key].popleft()
            self._block_chars[key] -= len(entry.text)
            if not self._blocks[key]:
                del self._blocks[key], self._block_chars[key]
        self.chars -= len(entry.text)
        self.dropped_by[reason] += 1

    def _drop_oldest(self, reason: str) -> None:
        """The oldest history entry yields, else the oldest entry of any block."""
        if self._history:
            self._drop(self._history[0], reason)
            return
        oldest_log = next(iter(self._log), None)
        oldest_state = next(iter(self._state_seq.items()), None)
        if oldest_state is not None and (oldest_log is None or oldest_state[1] < oldest_log):
            self.chars -= len(self.state.pop(oldest_state[0]).text)
            del self._state_seq[oldest_state[0]]
            self.dropped_by[reason] += 1
        elif oldest_log is not None:
            self._drop(oldest_log, reason)

    def extend(self, entries: Iterable[Entry]) -> None:
        """Add several entries."""
        for entry in entries:
            self.add(entry)

    def _rebuild(self, log: list[tuple[int, Entry]], states: list[tuple[int, Entry]]) -> None:
        """Hold exactly `log` and `states` (arrival number, entry); the counts of what yielded stay."""
        seq, dropped_by = self._seq, self.dropped_by
        self.__init__(limits=self.limits)
        for number, entry in sorted([*log, *states], key=lambda item: item[0]):
            self._insert(number, entry, Block(entry.block))
        self._seq, self.dropped_by = seq, dropped_by

    def snapshot(self) -> ContextBuffer:
        """A copy that later `add` calls do not change (entries are immutable, containers are copied)."""
        copy = ContextBuffer(limits=self.limits)
        copy._seq, copy.chars, copy.dropped_by = self._seq, self.chars, dict(self.dropped_by)
        copy._log, copy._history = OrderedDict(self._log), deque(self._history)
        copy._blocks = {key: deque(seqs) for key, seqs in self._blocks.items()}
        copy._block_chars = dict(self._block_chars)
        copy.state, copy._state_seq = dict(self.state), OrderedDict(self._state_seq)
        return copy

    def clear(self) -> None:
        """Forget everything."""
        self.__init__(limits=self.limits)

    def forget_before(self, stamp: float) -> int:
        """Forget every entry from before the episode that began at `stamp`: stamped earlier (unstamped ones too:
        they arrived before the start), or from before it by brace_common.episode_boundary; how many were forgotten."""
        held = len(self)
        log = [(seq, e) for seq, e in self._log.items() if self._in_episode(e, stamp)]
        states = [(self._state_seq[a], e) for a, e in self.state.items() if self._in_episode(e, stamp)]
        self._rebuild(log, states)
        return held - len(self)

    @staticmethod
    def _in_episode(entry: Entry, start: float) -> bool:
        return entry.stamp >= start and not before_episode(entry.stamp, entry.step, start)

    def blocks(self, layout: str = "focus") -> list[tuple[Block, list[Entry]]]:
        """The blocks in prompt order with their entries.

        `focus`: one run per block in a fixed order. `stable_first`: the log's
        runs of consecutive same-block entries in arrival order, then the states.
        """
        state = sorted(self.state.values(), key=lambda e: e.agent_id)
        if layout != "stable_first":
            return [(b, state if b == Block.STATE else self._block(b)) for b in _ORDER]
        runs: list[tuple[Block, list[Entry]]] = []
        for entry in self._log.values():
            if runs and runs[-1][0] == entry.block:
                runs[-1][1].append(entry)
            else:
                runs.append((Block(entry.block), [entry]))
        return [*runs, (Block.STATE, state)]

    def yield_order(self, agent_id: str, entries: list[Entry]) -> list[int]:
        """Indices of `entries` in the order they leave a prompt for `agent_id` that is over its token cap.

        History first, then what concerns other agents only (their entries in the protected blocks, their
        states), then what concerns `agent_id` (its own entries, the entries that name it or that no agent
        contributed), its own state last; within each, the oldest (step, then position) first.
        """
        agents = set(self.state)
        named = re.compile(rf"\b{re.escape(agent_id)}\b")

        def tier(entry: Entry) -> int:
            if entry.block == Block.HISTORY:
                return 0
            if entry.agent_id != agent_id and entry.agent_id in agents and not named.search(entry.text):
                return 1
            return 3 if entry.block == Block.STATE else 2

        return sorted(range(len(entries)), key=lambda i: (tier(entries[i]), entries[i].step, i))

    def render(self, tokenizer, agent_id: str, request: str, system_prompt: str = DEFAULT_SYSTEM_PROMPT, *,
               entries: Optional[list[tuple[Block, list[Entry]]]] = None, layout: str = "focus",
               max_tokens: Optional[int] = None, checkpoint: Callable[[], None] = _no_check,
               counts: Optional[TokenCounts] = None, goal_stack: Sequence[str] = ()) -> RenderedContext:
        """The chat-templated prompt asking for `agent_id`'s next step, with per-token labels.

        `goal_stack` lines (layout recap) form a protected GOALS section before the request.

        With `max_tokens`, entries leave a longer prompt in `yield_order` until it fits (history first, the
        protected blocks' oldest entries after it; `RenderedContext.evicted` counts what was left out); the
        entries' tokens are counted first (`counts` remembers them across calls), so only a prompt of about
        `max_tokens` tokens is rendered. `checkpoint()` runs between bounded pieces of the work and may raise
        to stop it (a call's deadline or cancel).
        """
        blocks = entries if entries is not None else self.blocks(layout)
        evicted = 0
        if max_tokens is not None:
            blocks, evicted = self._fit(tokenizer, agent_id, "".join(goal_stack) + request, system_prompt, blocks,
                                        max_tokens, checkpoint, counts or TokenCounts(tokenizer))
        checkpoint()
        ctx = self._render(tokenizer, agent_id, request, system_prompt, blocks, layout, checkpoint, goal_stack)
        ctx.evicted = evicted
        if max_tokens is None or len(ctx) <= max_tokens:
            return ctx
        # What rendering adds (titles, the FOR section's copies, merges across lines) overshot: fit to the
        # rendered tokens.
        rendered: dict[int, int] = {}
        for e in ctx.entry_of_token:
            if e >= 0:
                key = id(ctx.entries[e])
                rendered[key] = rendered.get(key, 0) + 1
        unique = _unique(blocks)
        evict = self._evict(agent_id, unique, [rendered.get(id(e), 0) for e in unique], len(ctx) - max_tokens)
        checkpoint()
        trimmed = self._render(tokenizer, agent_id, request, system_prompt, _without(blocks, evict), layout,
                               checkpoint, goal_stack)
        trimmed.evicted = evicted + len(evict)
        return trimmed

    def _fit(self, tokenizer, agent_id: str, request: str, system_prompt: str,
             blocks: list[tuple[Block, list[Entry]]], max_tokens: int, checkpoint: Callable[[], None],
             counts: TokenCounts) -> tuple[list[tuple[Block, list[Entry]]], int]:
        """`blocks` without the entries that yield until their lines' tokens fit `max_tokens` less the prompt's
        fixed part; how many yielded."""
        unique = _unique(blocks)
        fixed = len(tokenizer(system_prompt + request, add_special_tokens=False)["input_ids"]) \
            + FIXED_TOKENS_PER_BLOCK * (len(blocks) + 2)
        room = max_tokens - fixed
        if MAX_TOKENS_PER_CHAR * sum(len(e.text) + len(e.agent_id) + 16 for e in unique) <= room:
            return blocks, 0  # certainly within the cap: nothing to count
        sizes = counts.count(unique, checkpoint)
        evict = self._evict(agent_id, unique, sizes, sum(sizes) - room)
        return (_without(blocks, evict), len(evict)) if evict else (blocks, 0)

    def _evict(self, agent_id: str, unique: list[Entry], sizes: Sequence[int], excess: int) -> set[int]:
        """Ids of the entries of `unique` that yield, in `yield_order`, until their `sizes` (tokens, one per entry)
        cover `excess` tokens (none when `excess` <= 0)."""
        evict: set[int] = set()
        if excess <= 0:
            return evict
        for index in self.yield_order(agent_id, unique):
            if excess <= 0:
                break
            evict.add(id(unique[index]))
            excess -= sizes[index]
        return evict

    def _render(self, tokenizer, agent_id: str, request: str, system_prompt: str,
                entries: Optional[list[tuple[Block, list[Entry]]]], layout: str,
                checkpoint: Callable[[], None] = _no_check, goal_stack: Sequence[str] = ()) -> RenderedContext:
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
        if goal_stack:
            pieces.append((f"GOALS {agent_id}:\n" + "".join(f"{line}\n" for line in goal_stack), -1, True))
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
        checkpoint()
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        checkpoint()
        protected_mask, entry_of_token = [], []
        request_char = starts[-1]
        request_start, content = -1, [-1, -1]
        for n, (begin, _) in enumerate(enc["offset_mapping"]):
            if n % RENDER_CHECK_TOKENS == RENDER_CHECK_TOKENS - 1:
                checkpoint()
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
