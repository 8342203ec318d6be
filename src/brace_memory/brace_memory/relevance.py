"""Lexical relevance of a text to a query: BM25 over word tokens (cheap enough for the retrieve phase on a CPU).

The modules score a record's relevance to the call (the agent's task, state and next step) with it; Generative
Agents' relevance is an embedding similarity, which a 2-core robot computer cannot afford within the retrieve
phase's budget for every record: BM25 keeps the same role (which records concern what the agent does now).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

WORD = re.compile(r"[a-z0-9]+(?:_[a-z0-9]+)*")
"""A word: letters and digits, with underscores inside (`shelf_3`, `box_7` stay one word)."""
STOPWORDS = frozenset("a an and the of to in on at is it for from with by be or as this that its".split())
BM25_K1 = 1.2
BM25_B = 0.75


def words(text: str) -> list[str]:
    """Lower-cased words of `text` without stop words (`shelf_3` is one word: it names one place)."""
    return [word for word in WORD.findall(text.lower()) if word not in STOPWORDS]


@lru_cache(maxsize=65_536)
def term_counts(text: str) -> Counter:
    """The words of `text` with their counts (remembered: a record's line is scored at every call; not to mutate)."""
    return Counter(words(text))


def bm25(query: str, documents: Sequence[str]) -> list[float]:
    """BM25 score of every document for `query`, normalised to [0, 1] by the best one (all 0 when none matches)."""
    if not documents:
        return []
    docs = [term_counts(d) for d in documents]
    lengths = [sum(d.values()) for d in docs]
    mean_length = (sum(lengths) / len(lengths)) or 1.0
    terms = set(words(query))
    frequency = {t: sum(1 for d in docs if t in d) for t in terms}
    n = len(docs)
    scores = []
    for doc, length in zip(docs, lengths, strict=True):
        score = 0.0
        for term in terms:
            tf = doc.get(term, 0)
            if not tf:
                continue
            idf = math.log(1.0 + (n - frequency[term] + 0.5) / (frequency[term] + 0.5))
            score += idf * tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * length / mean_length))
        scores.append(score)
    best = max(scores)
    return [s / best if best > 0 else 0.0 for s in scores]
