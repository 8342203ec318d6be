"""BRACE's retrieval rows (paper Tables 3, 20, 22): RAG Static over a fixed corpus, RAG Memory over this run's memory.

A corpus is a YAML file of passages (skills, map facts, procedures), each a `text` and optional `keys` (words that
retrieve it by key as a reflective prior). Retrieval ranks passages (or the agent's memory records) by BM25
relevance to the call's query and drops those that share no word with it.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from .reflective import Prior
from .relevance import bm25, words

MAX_PASSAGES = 10_000
MAX_PASSAGE_CHARS = 1_000


def load_passages(path: str | Path) -> list[Prior]:
    """The passages of a corpus file: a YAML list of `{text, keys}` mappings (or of strings); ValueError naming the
    file and the passage when it is malformed."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"cannot read corpus {path}: {exc}") from None
    if isinstance(data, dict):
        data = data.get("passages")
    if not isinstance(data, list) or len(data) > MAX_PASSAGES:
        raise ValueError(f"corpus {path} must be a list of at most {MAX_PASSAGES} passages (or 'passages: [...]')")
    passages = []
    for index, item in enumerate(data):
        if isinstance(item, str):
            item = {"text": item}
        text = item.get("text") if isinstance(item, dict) else None
        if not isinstance(text, str) or not text.strip() or len(text) > MAX_PASSAGE_CHARS:
            raise ValueError(f"corpus {path}: passage {index} needs a text of 1..{MAX_PASSAGE_CHARS} characters")
        keys = item.get("keys", [])
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise ValueError(f"corpus {path}: passage {index} keys must be a list of words")
        passages.append(Prior(" ".join(text.split()), frozenset(w for k in keys for w in words(k))))
    return passages


def ranked_by_relevance(query: str, texts: list[str]) -> list[str]:
    """`texts` that share a word with `query`, most relevant first (BM25; ties keep the newer, later one first)."""
    scores = bm25(query, texts)
    order = sorted((i for i, s in enumerate(scores) if s > 0), key=lambda i: (-scores[i], -i))
    return [texts[i] for i in order]
