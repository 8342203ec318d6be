#!/usr/bin/env python3
"""The retrieve phase's cost: memory modules with growing stores, timed as a call runs them.

Every row composes all four retrieving modules (episodic, reflective, rag_static, rag_memory) for one agent whose
store holds `records` failure records and `records` episodic records (what the warehouse writes: its skills, objects,
shelves and docks). The corpus is the warehouse's plus generated passages, `corpus` in all. Each call runs what
the planner's retrieve phase runs: the query, the ranked lines of every module, each line counted with SmolLM2's
tokenizer, the MEMORY block tokenized and fitted to the reserve (25% of B_t = 512). The store is an SQLite file,
as on the robot. Rows run side by side in one process.

Target: retrieve phase P95 <= 25 ms at 1,000 records of each kind (the store's default bound per agent and kind).
Writes <out>/memory_retrieval.{csv,png}; exits 1 when the target is missed.
Run inside the workspace: `source scripts/env.sh && python bench/memory_retrieval.py` (`--quick`: smaller stores,
fewer calls).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from report import cpu_report, describe_cpu, print_written, report_checks, save_plot, write_csv

from brace_common.action_schema import Step
from brace_common.config import resolve_path
from brace_common.vocabulary import Block, Failure, Mode
from brace_memory.rag import load_passages
from brace_memory.records import MemoryRecord, RecordKind
from brace_memory.reflective import Prior
from brace_memory.store import MemoryStore
from brace_memory.system import MODULES, MemorySystem, MemorySystemConfig
from erecap_planner.call_path import CallRequest
from erecap_planner.context import ContextBuffer, Entry
from erecap_planner.memory_phase import MemoryUse, memory_ids, retrieve

TARGET_P95_MS = 25.0
TOKEN_BUDGET = 512
SHARE = 0.25
CORPUS = "package://sim_bridges/config/warehouse_corpus.yaml"
OBJECTS = ["box_7", "cup_3", "drill_2", "shoe_5", "crate_1", "vase_4"]
SKILLS = ["pick", "place", "move_to", "handoff"]


def filled_store(path: Path, records: int, seed: int) -> MemoryStore:
    """A store holding `records` failure and `records` episodic records of agent_0 (max_records = records)."""
    rng = random.Random(seed)
    store = MemoryStore(path, max(records, 1))
    for n in range(records):
        skill, obj = rng.choice(SKILLS), rng.choice(OBJECTS)
        place = f"shelf_{rng.randint(1, 10)}" if skill == "pick" else f"dock_{rng.randint(1, 3)}"
        kind = rng.choice([f.label for f in Failure if f != Failure.NONE])
        store.put(MemoryRecord("agent_0", RecordKind.FAILURE, f"{skill}|{obj}|{place}|{kind}|{n}",
                               {"skill": skill, "object": obj, "location": place, "failure_kind": kind,
                                "detail": f"{skill} {obj} failed at {place}", "step": f"{skill}(object={obj})",
                                "strategy": "approach again"}, n, n + rng.randint(0, 5), 0.0, 0.7, rng.randint(1, 3)))
        store.put(MemoryRecord("agent_0", RecordKind.EPISODIC, f"e{n:09d}",
                               {"topic": rng.choice(["task done", "failure", "plan change"]),
                                "request": f"agent_0 must deliver {obj} to dock_{rng.randint(1, 3)}",
                                "actions": [f"reached {place}", f"picked {obj}"], "outcome": f"placed {obj}",
                                "observations": [f"at {place}, holding {obj}"]}, n, n + 3, 0.0, 0.5))
    return store


def corpus_of(size: int) -> list[Prior]:
    """The warehouse corpus plus generated passages, `size` in all."""
    passages = load_passages(resolve_path(CORPUS))
    rng = random.Random(1)
    while len(passages) < size:
        obj, shelf = rng.choice(OBJECTS), rng.randint(1, 10)
        passages.append(Prior(f"{obj} is usually stored on shelf_{shelf}; aisle {shelf} is narrow.", frozenset()))
    return passages[:size]


def run_row(tokenizer, folder: Path, records: int, corpus: int, calls: int) -> dict:
    """One configuration: `calls` retrieve phases, timed."""
    store = filled_store(folder / f"memory_{records}.sqlite", records, seed=records)
    system = MemorySystem(MemorySystemConfig(MODULES), store, corpus=corpus_of(corpus))
    use = MemoryUse(system, SHARE)
    system.on_entry("agent_0", 0, "task", "agent_0 must deliver box_7 to dock_2. box_7 is on shelf_3.")
    system.on_plan("agent_0", 1, Mode.FULL_REPLAN, [Step("move_to", {"target": "shelf_3"}),
                                                     Step("pick", {"object": "box_7"})])
    buffer = ContextBuffer()
    buffer.add(Entry("agent_0", 1, Block.STATE, "at shelf_3, empty-handed, next pick box_7"))
    reserve = use.reserve(TOKEN_BUDGET)
    times, tokens, lines = [], [], []
    for call in range(calls + 3):
        started = time.perf_counter()
        request = CallRequest("agent_0", TOKEN_BUDGET, slo_ms=0.0, hard_deadline_ms=0.0, step=2 + call)
        got = retrieve(use, tokenizer, buffer, request, reserve)
        block = memory_ids(tokenizer, got.lines, reserve)
        elapsed = (time.perf_counter() - started) * 1000.0
        if call >= 3:  # the first calls warm the tokenizer's caches
            times.append(elapsed)
            tokens.append(len(block))
            lines.append(len(got.lines))
    store.close()
    return {"records": records, "corpus": corpus, "calls": calls, "retrieve_p50_ms": float(np.percentile(times, 50)),
            "retrieve_p95_ms": float(np.percentile(times, 95)), "memory_tokens": float(np.mean(tokens)),
            "memory_lines": float(np.mean(lines)), "reserve_tokens": reserve}


def main(argv: list[str] | None = None) -> int:
    """Run the rows, print the table, write CSV / PNG; 1 when the target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default="bench/out")
    args = parser.parse_args(argv)
    # heavy: the tokenizer loads after the arguments are read
    from transformers import AutoTokenizer

    from erecap_planner.models import resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("smollm2-135m-instruct"))
    sizes = [(10, 10), (100, 100)] if args.quick else [(10, 10), (100, 100), (1000, 200), (1000, 1000)]
    calls = 20 if args.quick else 200
    with tempfile.TemporaryDirectory() as folder:
        rows = [run_row(tokenizer, Path(folder), records, corpus, calls) for records, corpus in sizes]
    cpu = cpu_report()
    print(f"Retrieve phase cost (4 modules, B_t = {TOKEN_BUDGET}, memory share {SHARE}); {describe_cpu(cpu)}")
    print("| records / kind | corpus | calls | P50 ms | P95 ms | memory tokens | lines |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['records']} | {r['corpus']} | {r['calls']} | {r['retrieve_p50_ms']:.2f} | "
              f"{r['retrieve_p95_ms']:.2f} | {r['memory_tokens']:.0f} | {r['memory_lines']:.1f} |")
    out = Path(args.out)
    csv_path = write_csv([{**r, **{"cpu": cpu["cpu"], "torch_capability": cpu["torch_capability"]}} for r in rows],
                         out / "memory_retrieval.csv")

    def draw(plt):
        fig, ax = plt.subplots(figsize=(6, 3.5))
        labels = [f"{r['records']}/{r['corpus']}" for r in rows]
        ax.bar(labels, [r["retrieve_p95_ms"] for r in rows], label="P95")
        ax.bar(labels, [r["retrieve_p50_ms"] for r in rows], label="P50")
        ax.axhline(TARGET_P95_MS, color="red", linestyle="--", label="target P95")
        ax.set_xlabel("records per kind / corpus passages")
        ax.set_ylabel("retrieve phase (ms)")
        ax.legend()
        return fig

    png = save_plot(out / "memory_retrieval.png", draw)
    print_written(csv_path, png)
    largest = max(rows, key=lambda r: (r["records"], r["corpus"]))
    return report_checks([(f"retrieve P95 <= {TARGET_P95_MS:.0f} ms at {largest['records']} records / kind",
                           largest["retrieve_p95_ms"] <= TARGET_P95_MS, f"{largest['retrieve_p95_ms']:.2f} ms")])


if __name__ == "__main__":
    sys.exit(main())
