"""Schema-constrained plan decoding: greedy generation restricted to valid skill calls.

The planner writes `{"plan": [step, step, ...]}` token by token, but at every
position only tokens that continue a valid skill call of the action schema (or
close the plan) are allowed: a token trie over the tokenised candidate steps.
Where the trie has one continuation the token is forced (no choice, fed to the
model in one batch with the next ones); where it branches, the model's logits
over the allowed tokens choose. The output is always a parseable plan, every
choice is the model's, and pruning that removed what mattered changes the
choices. Runs over the (pruned) KV cache of the prefill.

With `end_by` a plan also ends at a step boundary when its next step would
finish after that instant: the steps chosen so far are the plan, each still
the model's choice, and the agent asks again when it has run them. Decoding is
the part of a call that B_t does not shrink; this keeps a long plan from
costing the call its SLO.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Optional

import torch

from brace_common.action_schema import Step

from .pruned_forward import CallAborted, ErecapModel, PrefillResult

PLAN_OPEN = '{"plan": ['
STEP_SEPARATOR = ", "
PLAN_CLOSE = "]}"


def step_json(step: Step) -> str:
    """A skill call as the plan's JSON writes it."""
    return json.dumps({"action": step.action, "parameters": step.parameters})


@dataclass
class _Node:
    children: dict[int, _Node] = field(default_factory=dict)
    option: int = -1  # index of the option that ends here (-1: none)


class TokenTrie:
    """Token sequences of a fixed option set, merged on shared prefixes."""

    def __init__(self, sequences: list[list[int]]):
        self.root = _Node()
        for index, seq in enumerate(sequences):
            if not seq:
                raise ValueError(f"option {index} tokenises to nothing")
            node = self.root
            for token in seq:
                node = node.children.setdefault(token, _Node())
            if node.children:
                raise ValueError(f"option {index} is a prefix of another option")
            node.option = index


@dataclass
class ConstrainedResult:
    """The decoded plan text, its steps, how many tokens / model forwards it took, and whether `end_by` ended it."""

    text: str
    steps: list[Step]
    tokens: int
    forwards: int
    cut: bool = False


class ConstrainedPlanDecoder:
    """Greedy decoding of a plan whose every step is one of `steps` (`min_steps` to `max_steps` of them)."""

    def __init__(self, tokenizer, steps: list[Step], max_steps: int, min_steps: int = 1,
                 encoded: Optional[dict[str, list[int]]] = None):
        if not steps:
            raise ValueError("constrained decoding needs at least one candidate step")
        if max_steps < 1:
            raise ValueError("max_steps must be >= 1")
        if not 1 <= min_steps <= max_steps:
            raise ValueError("min_steps must be in [1, max_steps]")
        self.steps = steps
        self.max_steps = max_steps
        self.min_steps = min_steps
        self.tokenizer = tokenizer
        self.encoded = {} if encoded is None else encoded  # text -> token ids, shared with restricted decoders

        def encode(text: str) -> list[int]:
            if text not in self.encoded:
                self.encoded[text] = tokenizer(text, add_special_tokens=False)["input_ids"]
            return self.encoded[text]

        self.encode = encode
        self.open_ids = encode(PLAN_OPEN)
        # Options 0..n-1 write a step and close the plan; n..2n-1 write a step and continue.
        self.more = TokenTrie([encode(step_json(s) + PLAN_CLOSE) for s in steps]
                              + [encode(step_json(s) + STEP_SEPARATOR) for s in steps])
        self.last = TokenTrie([encode(step_json(s) + PLAN_CLOSE) for s in steps])
        self.cont = TokenTrie([encode(step_json(s) + STEP_SEPARATOR) for s in steps])  # before min_steps: no close

    def restricted(self, steps: list[Step]) -> ConstrainedPlanDecoder:
        """A decoder over `steps` (some of this one's: an agent's own), reusing this one's tokenisation."""
        return ConstrainedPlanDecoder(self.tokenizer, steps, self.max_steps, self.min_steps, self.encoded)

    def token_ids(self, steps: list[Step]) -> list[int]:
        """The token ids this decoder produces for `steps`: what a fine-tune must train on.

        Tokenising the plan text in one piece merges tokens across step
        boundaries (' [{', ' {"'), which this decoder never writes.
        """
        if not 1 <= len(steps) <= self.max_steps:
            raise ValueError(f"a plan has 1..{self.max_steps} steps, not {len(steps)}")
        ids = list(self.open_ids)
        for i, step in enumerate(steps):
            ids += self.encode(step_json(step) + (PLAN_CLOSE if i == len(steps) - 1 else STEP_SEPARATOR))
        return ids

    def choice_mask(self, steps: list[Step]) -> list[bool]:
        """Per token of `token_ids(steps)`: True where this decoder's trie branches (the model's logits choose),
        False where the token is forced. Training weights its loss on the choices (adapter_training)."""
        ids = self.token_ids(steps)
        mask = [False] * len(self.open_ids)
        position = len(self.open_ids)
        for i in range(len(steps)):
            if i == self.max_steps - 1:
                trie = self.last
            elif i < self.min_steps - 1:
                trie = self.cont
            else:
                trie = self.more
            node = trie.root
            while node.option < 0:
                mask.append(len(node.children) > 1)
                if ids[position] not in node.children:
                    raise ValueError(f"step {i + 1} ({step_json(steps[i])}) is not one of this decoder's steps")
                node = node.children[ids[position]]
                position += 1
        return mask

    @torch.inference_mode()
    def decode(self, runner: ErecapModel, prefill: PrefillResult, should_abort=lambda: False,
               max_steps: Optional[int] = None, end_by: Optional[float] = None) -> ConstrainedResult:
        """Decode over `prefill.cache` (extended in place); raises CallAborted via `should_abort` checks.

        `max_steps` (<= the decoder's) caps this plan's length: a short plan for a small replanning mode.
        `end_by` (a time.monotonic() instant): once `min_steps` are chosen, the plan ends at the step boundary
        where one more step, as long as the longest one so far, would end after it.
        """
        limit = self.max_steps if not max_steps else max(1, min(self.max_steps, max_steps))
        cache, position = prefill.cache, prefill.next_position
        pending: list[int] = list(self.open_ids)
        produced: list[int] = []
        chosen: list[Step] = []
        forwards = 0
        n = len(self.steps)
        longest = 0.0
        cut = False
        while True:
            began = time.monotonic()
            if len(chosen) == limit - 1:
                trie, closes = self.last, (lambda i: True)
            elif len(chosen) < min(self.min_steps, limit) - 1:
                trie, closes = self.cont, (lambda i: False)
            else:
                trie, closes = self.more, (lambda i: i < n)
            node = trie.root
            while node.option < 0:
                if len(node.children) == 1:
                    token = next(iter(node.children))
                else:
                    if should_abort():
                        raise CallAborted("deadline or cancel during constrained decoding")
                    ids = torch.tensor([pending], device=runner.device)
                    allowed = list(node.children)
                    # Only the allowed tokens' logits are computed: the choice needs nothing else, and they come
                    # from the float LM head rows even when the decode's projections run in int8.
                    logits = runner.stack.extend(cache, ids, position, last_only=True,
                                                 token_ids=torch.tensor(allowed, device=runner.device))[0, -1]
                    forwards += 1
                    position += len(pending)
                    produced.extend(pending)
                    pending = []
                    token = allowed[int(torch.argmax(logits))]
                pending.append(token)
                node = node.children[token]
            index = node.option
            chosen.append(self.steps[index % n])
            if closes(index):  # the option closed the plan
                break
            now = time.monotonic()
            longest = max(longest, now - began)
            if end_by is not None and len(chosen) >= self.min_steps and now + longest > end_by:
                cut = True
                break
        produced.extend(pending)
        text = PLAN_OPEN + STEP_SEPARATOR.join(step_json(s) for s in chosen) + PLAN_CLOSE
        return ConstrainedResult(text, chosen, len(produced), forwards, cut)
