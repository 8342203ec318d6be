"""Constrained decoding of a ReCAP answer (ReCAP Alg. 1's (T, S) = π(C) or ρ(C)) over the (pruned) KV cache.

The planner writes `{"think": "<T>", "subtasks": [<entry>, ...]}`: the thought token by token from the model's
logits over the tokens that keep it a JSON string (no quote, backslash or control character) until the model picks
the token that closes it or `think_tokens` are written; then the subtasks from a token trie over the schema's
primitive skill calls and composite subtasks (constrained.TokenTrie), where the first entry may also close an empty
S (the frame is done). At the deepest frame the trie holds no composite. Every choice is the model's; the output
always parses (plan_parser.parse_recap). `token_ids` and `choice_mask` give what a fine-tune trains on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

import torch

from brace_common.action_schema import Step, Subtask

from .constrained import STEP_SEPARATOR, ConstrainedResult, TokenTrie, step_json
from .plan_parser import COMPOSITE_KEY, SUBTASKS_KEY, THINK_KEY
from .pruned_forward import CallAborted, ErecapModel, PrefillResult

THINK_OPEN = f'{{"{THINK_KEY}": "'
THINK_CLOSE = f'", "{SUBTASKS_KEY}": ['
SUBTASKS_CLOSE = "]}"
FORBIDDEN_IN_THOUGHT = '"\\\ufffd'
"""Characters a thought's token may not hold (with control characters): each keeps the thought a JSON string, and
a token that is part of a character (it decodes to U+FFFD alone) would leave a thought that is not text."""


def subtask_json(subtask: Subtask) -> str:
    """A subtask as the answer's JSON writes it: a skill call, or `{"subtask": name, "parameters": {...}}`."""
    if subtask.composite:
        return json.dumps({COMPOSITE_KEY: subtask.step.action, "parameters": subtask.step.parameters})
    return step_json(subtask.step)


def thought_tokens(tokenizer) -> list[int]:
    """The vocabulary's tokens a thought may hold: those whose text has no quote, backslash, control character or
    piece of a character (special tokens excluded)."""
    special = set(tokenizer.all_special_ids)
    out = []
    for token in range(len(tokenizer)):
        if token in special:
            continue
        text = tokenizer.decode([token])
        if text and not any(c in FORBIDDEN_IN_THOUGHT or ord(c) < 32 for c in text):
            out.append(token)
    return out


@dataclass
class RecapResult(ConstrainedResult):
    """A decoded ReCAP answer: its text and (T, S) besides what a constrained plan reports."""

    thought: str = ""
    subtasks: Optional[list[Subtask]] = None


class RecapDecoder:
    """Greedy decoding of a ReCAP answer whose entries are `primitives` and `composites` (at most `max_steps`),
    with a thought of at most `think_tokens` tokens (0: always empty)."""

    def __init__(self, tokenizer, primitives: list[Step], composites: list[Step], max_steps: int,
                 think_tokens: int = 32, vocabulary: Optional[list[int]] = None,
                 encoded: Optional[dict[str, list[int]]] = None) -> None:
        if not primitives:
            raise ValueError("ReCAP decoding needs at least one primitive skill call")
        if max_steps < 1 or think_tokens < 0:
            raise ValueError("max_steps must be >= 1 and think_tokens >= 0")
        self.tokenizer = tokenizer
        self.max_steps = max_steps
        self.think_tokens = think_tokens
        self.encoded = {} if encoded is None else encoded
        self.options = [Subtask(s) for s in primitives] + [Subtask(s, True) for s in composites]
        self.open_ids = self.encode(THINK_OPEN)
        self.close_ids = self.encode(THINK_CLOSE)
        self.empty_ids = self.encode(THINK_OPEN + THINK_CLOSE)  # no thought: the prefix is forced whole
        self.vocabulary = vocabulary if vocabulary is not None else (thought_tokens(tokenizer) if think_tokens else [])
        if self.close_ids[0] in set(self.vocabulary):
            raise ValueError("the thought's closing token is also a thought token")
        self.tries = {deep: self._tries(deep) for deep in (False, True)}
        self.thought_choices = self.vocabulary + [self.close_ids[0]]   # a thought's token, or the one closing it
        self._mask: Optional[torch.Tensor] = None

    def _thought_mask(self, size: int, device) -> torch.Tensor:
        """The thought's choices as a mask over the model's `size` logits (made once)."""
        if self._mask is None or self._mask.shape[0] != size or self._mask.device != device:
            mask = torch.zeros(size, dtype=torch.bool, device=device)
            mask[torch.tensor([t for t in self.thought_choices if t < size], device=device)] = True
            self._mask = mask
        return self._mask

    def encode(self, text: str) -> list[int]:
        """`text`'s token ids (shared cache)."""
        if text not in self.encoded:
            self.encoded[text] = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return self.encoded[text]

    def _tries(self, deepest: bool) -> dict[str, tuple[TokenTrie, list[tuple[Optional[Subtask], bool]]]]:
        """The tries of one depth, each with what its options mean, (entry, closes) with entry None for the empty S:
        `first` (may close an empty S), `more`, `last` (every option closes)."""
        entries = [s for s in self.options if not (deepest and s.composite)]

        def trie(first: bool, last: bool) -> tuple[TokenTrie, list[tuple[Optional[Subtask], bool]]]:
            sequences, meaning = [], []
            for entry in entries:
                sequences.append(self.encode(subtask_json(entry) + SUBTASKS_CLOSE))
                meaning.append((entry, True))
                if not last:
                    sequences.append(self.encode(subtask_json(entry) + STEP_SEPARATOR))
                    meaning.append((entry, False))
            if first:
                sequences.append(self.encode(SUBTASKS_CLOSE))
                meaning.append((None, True))
            return TokenTrie(sequences), meaning

        return {"first": trie(True, self.max_steps == 1), "more": trie(False, False), "last": trie(False, True)}

    def _trie_at(self, tries: dict, index: int) -> tuple[TokenTrie, list]:
        """The trie of the `index`-th entry of S."""
        return tries["first" if index == 0 else "last" if index == self.max_steps - 1 else "more"]

    def token_ids(self, thought: str, subtasks: list[Subtask]) -> list[int]:
        """The token ids this decoder produces for (thought, subtasks): what a fine-tune trains on (a thought longer
        than think_tokens cut to them, as decoding cuts it)."""
        return self._sequence(thought, subtasks)[0]

    def choice_mask(self, thought: str, subtasks: list[Subtask]) -> list[bool]:
        """Per token of `token_ids`: True where the model chooses (every thought token and the one closing it, and
        where the subtask trie branches), False where the token is forced."""
        return self._sequence(thought, subtasks)[1]

    def _sequence(self, thought: str, subtasks: list[Subtask]) -> tuple[list[int], list[bool]]:
        if len(subtasks) > self.max_steps:
            raise ValueError(f"at most {self.max_steps} subtasks, not {len(subtasks)}")
        if self.think_tokens == 0 or not thought:
            ids, mask = list(self.empty_ids), [False] * len(self.empty_ids)
            if self.think_tokens:  # the model chose to close the thought at once
                ids, mask = self.open_ids + self.close_ids, [False] * len(self.open_ids) + [True] + \
                    [False] * (len(self.close_ids) - 1)
        else:
            words = self.encode(thought)[:self.think_tokens]   # cut where decoding would close it
            allowed = set(self.vocabulary)
            if any(t not in allowed for t in words):
                raise ValueError(f"the thought {thought!r} holds a token a thought may not")
            ids = self.open_ids + words + self.close_ids
            closes_by_choice = len(words) < self.think_tokens
            mask = [False] * len(self.open_ids) + [True] * len(words) + [closes_by_choice] + \
                [False] * (len(self.close_ids) - 1)
        tries = self.tries[False]
        pieces = [subtask_json(st) + (SUBTASKS_CLOSE if i == len(subtasks) - 1 else STEP_SEPARATOR)
                  for i, st in enumerate(subtasks)] or [SUBTASKS_CLOSE]
        for i, text in enumerate(pieces):
            node = self._trie_at(tries, i)[0].root
            for token in self.encode(text):
                if token not in node.children:
                    raise ValueError(f"subtask {i} ({text}) is not one of this decoder's entries")
                mask.append(len(node.children) > 1)
                node = node.children[token]
                ids.append(token)
        return ids, mask

    @torch.inference_mode()
    def decode(self, runner: ErecapModel, prefill: PrefillResult, deepest: bool = False,
               should_abort=lambda: False) -> RecapResult:
        """Decode over `prefill.cache` (extended in place); at the `deepest` frame no composite may be written.
        Raises CallAborted via `should_abort` checks."""
        cache, position = prefill.cache, prefill.next_position
        pending: list[int] = []
        produced: list[int] = []
        forwards = 0

        def choose(allowed: list[int]) -> int:
            nonlocal pending, position, forwards
            if should_abort():
                raise CallAborted("deadline or cancel during ReCAP decoding")
            ids = torch.tensor([pending], device=runner.device)
            thought = allowed is self.thought_choices
            # A thought chooses among most of the vocabulary: the whole LM head, masked, costs less than gathering
            # its rows; a trie branch chooses among a few, whose rows alone are computed.
            logits = runner.stack.extend(cache, ids, position, last_only=True,
                                         token_ids=None if thought else torch.tensor(allowed, device=runner.device))[0, -1]
            forwards += 1
            position += len(pending)
            produced.extend(pending)
            pending = []
            if thought:
                return int(torch.argmax(logits.masked_fill(~self._thought_mask(logits.shape[-1], logits.device),
                                                           float("-inf"))))
            return allowed[int(torch.argmax(logits))]

        words: list[int] = []
        if self.think_tokens == 0:
            pending = list(self.empty_ids)
        else:
            pending = list(self.open_ids)
            while len(words) < self.think_tokens:
                token = choose(self.thought_choices)
                if token == self.close_ids[0]:
                    break
                words.append(token)
                pending.append(token)
            pending += self.close_ids
        tries = self.tries[deepest]
        chosen: list[Subtask] = []
        while True:
            trie, meaning = self._trie_at(tries, len(chosen))
            node = trie.root
            while node.option < 0:
                token = next(iter(node.children)) if len(node.children) == 1 else choose(list(node.children))
                pending.append(token)
                node = node.children[token]
            entry, closes = meaning[node.option]
            if entry is not None:
                chosen.append(entry)
            if closes:
                break
        produced.extend(pending)
        thought = self.tokenizer.decode(words).strip()
        text = json.dumps({THINK_KEY: thought, SUBTASKS_KEY: [json.loads(subtask_json(s)) for s in chosen]})
        return RecapResult(text, [s.step for s in chosen if not s.composite], len(produced), forwards, False,
                           thought, chosen)
