"""Fine-tuning examples from the warehouse haystack's training cases: a planner that acts on a constraint it reads.
ROS-free.

Each `train` case (haystack_cases; the benchmark reads only `test` ids) is streamed through one of Table 1's rows
(haystack_memory.stream, the row drawn per case) and rendered as the row's call reads it, capped at the training
prompt length (the oldest history yields, as the planner's window does); the label is the compliant skill call as
the candidates decoding scores it. A rendering whose prompt lost the constraint teaches nothing it could read, so it
is not an example: the planner learns to look for the rule that names its object or place and keep it, wherever the
context holds it (history, summary, MEMORY block).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

from brace_training.adapter_training import PlanExample
from erecap_planner.call_path import CallOptions, LocalModel, PlannerCallPath
from erecap_planner.pruning import PruneSchedule
from erecap_planner.scoring import candidate_target

from .haystack_cases import CONSTRAINT_KINDS, HaystackCase, case_ids, make_case
from .haystack_memory import LAYOUT, ROWS, call_request, constraint_form, stream

TRAIN_BUDGETS = (1024, 2048, 4096)
"""History budgets of the training cases (tokens): the constraint stays within a training prompt more often."""
TOKEN_BUDGET = 2048
"""B_t of a rendered call (sizes memory's reserve), as the benchmark's default."""


def haystack_points(model, tokenizer, count: int, max_tokens: int, rng: random.Random,
                    kinds: Sequence[str] = CONSTRAINT_KINDS, first: int = 0) -> Iterator[tuple[HaystackCase, str,
                                                                                              PlanExample]]:
    """`count` (case, row name, example) from `train` cases (ids from `first` on, kinds in turn), each rendered through
    a row drawn by `rng`, at most `max_tokens` tokens, kept only when the prompt holds the queried constraint."""
    path = PlannerCallPath(LocalModel(model, tokenizer, PruneSchedule((), 1.0)),
                           CallOptions(compressor="none", decoding="candidates", layout=LAYOUT,
                                       max_context_tokens=max_tokens))

    def count_tokens(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    made, index = 0, first
    while made < count:
        for case_id in case_ids("train", 1, kinds, index):
            case = make_case(case_id, rng.choice(TRAIN_BUDGETS), count_tokens)
            if case.split != "train":
                raise ValueError(f"{case_id}: fine-tuning reads training cases only")
            row = rng.choice(ROWS)
            streamed = stream(case, row)
            path.memory = streamed.memory
            path.set_schema(case.schema)
            ids, protect = path.prompt(streamed.buffer, call_request(case, TOKEN_BUDGET, 0.0, 0.0))
            if constraint_form(case, row) in tokenizer.decode(ids) and made < count:
                made += 1
                target, choice = candidate_target(tokenizer, case.compliant)
                yield case, row.name, PlanExample(ids, target, protect=protect, choice=choice)
        index += 1


def haystack_examples(model, tokenizer, count: int, max_tokens: int, rng: random.Random) -> list[PlanExample]:
    """`count` training examples of `haystack_points`."""
    return [example for _, _, example in haystack_points(model, tokenizer, count, max_tokens, rng)]
