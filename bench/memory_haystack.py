#!/usr/bin/env python3
"""The warehouse haystack (OmniAct Sec. 4.3, Table 1; App. E, Alg. 1): does memory keep a constraint given early in
a long shift, at what context size?

Every case (brace_training.haystack_cases, held-out `test` ids only) is a warehouse shift: three seed episodes, each
carrying a constraint (a dock that closes, a box that must be handed off or placed by its carrier, a shelf under
maintenance / an object moved), then templated irrelevant events until the history holds B tokens. Each row of
Table 1 streams the case online (Alg. 1 Stage 2, brace_training.haystack_memory) and then plans the query: the
agent's next skill call, scored by the candidates decoding over exactly two calls, one that keeps the queried
constraint and one that breaks it (balanced: a planner blind to the constraint scores about 50 %; the blind row, full
memory on the case with the constraint removed, shows chance). Rows: raw history (focus layout, the whole history;
SmolLM2's window is 8,192 tokens, so the prompt is capped at the window less the scored continuation's room and the
oldest history yields), 10-turn window, turn summary (each turn summarised on its own by an extractive template),
episodic only, full memory (episodic + reflective). The planner: SmolLM2-135M-Instruct with the warehouse adapter,
on the CPU, fp32 unless --dtype; no compressor (each row's own reduction is what is compared); B_t = --token-budget
sizes memory's reserve (memory_share of it) and nothing else.

Columns per row: constraint satisfaction % (and per constraint kind, per history budget), context tokens (the call's
prompt, MEMORY block included), compression (the mean of context / raw tokens per case, raw = the whole accumulated
history's prompt before any cap), how often the constraint is in the prompt at all, latency P50 / P95 of the call.
Target: full memory satisfies at least as many constraints as raw history with <= 30 % of its context.

Cases run one by one, every row, appended to <out>/memory_haystack_calls.csv as each ends, so an interrupted run
goes on where it stopped (--fresh starts over); the table and <out>/memory_haystack.{csv,png} cover every call in
the file. Exits 1 when a target is missed or a row has not run every case yet.
Run inside the workspace: `source scripts/env.sh && python bench/memory_haystack.py` (--quick: two small cases;
--avx2: under AVX2 dispatch caps; --threads 1 on a machine whose cores another job keeps busy).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from report import (
    append_rows,
    cpu_report,
    describe_cpu,
    fill_defaults,
    load_planner_model,
    print_written,
    read_rows,
    reexec_as_avx2,
    report_checks,
    save_plot,
    sim_planner_checkpoint,
    write_csv,
)

ADAPTER_PARAMETER = "adapter_path"
"""The sim planner's parameter naming the warehouse adapter (the default --adapter)."""
CONTINUATION_TOKENS = 64
"""Room the prompt cap leaves in the model's window for the scored continuation (JSON prefix and a call)."""
COMPRESSION_LIMIT = 0.30
"""Target: full memory's context is at most this share of raw history's."""
CALL_LIMIT_MS = 600_000.0
"""SLO_t and hard deadline of every call: none stops a call (latency is measured, not bounded)."""
CALLS_COLUMNS = ("case_id", "kind", "budget_tokens", "row", "satisfied", "chosen", "compliant", "context_tokens",
                 "raw_tokens", "compression", "constraint_in_context", "memory_tokens", "latency_ms",
                 "history_tokens", "evicted")


def run_case(path, tokenizer, case, rows, args) -> list[dict]:
    """Every row's call on `case`: one CSV row each."""
    from brace_training.haystack_memory import call_request, constraint_form, raw_tokens, stream

    raw = raw_tokens(case, tokenizer, path.system_prompt)
    path.set_schema(case.schema)
    request = call_request(case, args.token_budget, CALL_LIMIT_MS, CALL_LIMIT_MS)
    out_rows = []
    for row in rows:
        streamed = stream(case, row)
        path.memory = streamed.memory
        ids, _ = path.prompt(streamed.buffer, request)
        held = constraint_form(case, row) in tokenizer.decode(ids)
        evicted = path.render(streamed.buffer, request, case.schema).evicted
        out = path.run(streamed.buffer, request)
        retrieve = next(p for p in out.phases if p.phase == "retrieve")
        chosen = out.steps[0] if out.steps else None
        out_rows.append({
            "case_id": case.case_id, "kind": case.kind, "budget_tokens": case.budget_tokens, "row": row.name,
            "satisfied": int(case.satisfied(chosen)), "chosen": chosen.text() if chosen else f"none: {out.error}",
            "compliant": case.compliant.text(), "context_tokens": out.tokens_after, "raw_tokens": raw,
            "compression": round(out.tokens_after / raw, 4), "constraint_in_context": int(held),
            "memory_tokens": retrieve.tokens_out, "latency_ms": round(out.latency_ms, 1),
            "history_tokens": case.history_tokens, "evicted": evicted})
    return out_rows


def percent(values: list[float]) -> float:
    """100 x the mean, one decimal (nan when empty)."""
    return round(100.0 * float(np.mean(values)), 1) if values else float("nan")


def summary(row_names: list[str], calls: list[dict], kinds: tuple[str, ...], budgets: list[int]) -> list[dict]:
    """One line per row over every call in the file (a column per constraint kind and per budget run)."""
    kinds = tuple(k for k in kinds if any(r["kind"] == k for r in calls))
    out = []
    for name in row_names:
        c = [r for r in calls if r["row"] == name]
        if not c:
            continue
        lat = [float(r["latency_ms"]) for r in c]
        line = {"row": name, "cases": len(c),
                "satisfaction_percent": percent([int(r["satisfied"]) for r in c])}
        for kind in kinds:
            line[f"{kind}_percent"] = percent([int(r["satisfied"]) for r in c if r["kind"] == kind])
        for budget in budgets:
            line[f"history_{budget}_percent"] = percent([int(r["satisfied"]) for r in c
                                                         if int(r["budget_tokens"]) == budget])
        line.update({
            "context_tokens": round(float(np.mean([int(r["context_tokens"]) for r in c]))),
            "raw_tokens": round(float(np.mean([int(r["raw_tokens"]) for r in c]))),
            "compression_percent": percent([float(r["compression"]) for r in c]),
            "constraint_in_context_percent": percent([int(r["constraint_in_context"]) for r in c]),
            "memory_tokens": round(float(np.mean([int(r["memory_tokens"]) for r in c]))),
            "latency_p50_ms": round(float(np.percentile(lat, 50))),
            "latency_p95_ms": round(float(np.percentile(lat, 95)))})
        out.append(line)
    return out


def checks(table: list[dict], cases_wanted: int) -> list[tuple[str, bool, str]]:
    """The target on the summary, and that every row ran every case."""
    by = {r["row"]: r for r in table}
    out = [(f"every row ran {cases_wanted} cases", bool(table) and all(r["cases"] >= cases_wanted for r in table),
            ", ".join(f"{r['row']} {r['cases']}" for r in table))]
    raw, full = by.get("raw_history"), by.get("full_memory")
    if raw and full:
        out.append(("full memory satisfies >= as many constraints as raw history",
                    full["satisfaction_percent"] >= raw["satisfaction_percent"],
                    f"{full['satisfaction_percent']}% vs {raw['satisfaction_percent']}% (blind control "
                    f"{by['blind_full_memory']['satisfaction_percent'] if 'blind_full_memory' in by else '-'}%)"))
        out.append((f"full memory's context <= {COMPRESSION_LIMIT:.0%} of raw history's",
                    full["compression_percent"] <= 100 * COMPRESSION_LIMIT,
                    f"{full['compression_percent']}% ({full['context_tokens']} of {full['raw_tokens']} tokens)"))
    return out


def draw(table: list[dict]):
    """Satisfaction per row (chance at 50 %) and context per row, side by side."""
    def figure(plt):
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
        names = [r["row"] for r in table]
        left.bar(names, [r["satisfaction_percent"] for r in table], color="tab:blue")
        left.axhline(50, color="grey", ls=":", label="chance")
        left.set_ylabel("constraint satisfaction (%)")
        left.set_ylim(0, 100)
        left.legend(fontsize=8)
        right.bar(names, [r["compression_percent"] for r in table], color="tab:orange")
        right.axhline(100 * COMPRESSION_LIMIT, color="grey", ls=":", label="target for full memory")
        right.set_ylabel("context, % of raw history's")
        right.set_ylim(0, 100)
        right.legend(fontsize=8)
        for ax in (left, right):
            ax.tick_params(axis="x", labelrotation=30, labelsize=8)
        fig.suptitle("Warehouse haystack (OmniAct Table 1 rows)")
        fig.tight_layout()
        return fig
    return figure


def main() -> int:
    """Run the rows on the cases not in the calls file yet, print the table, check the target."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--avx2", action="store_true", help="run under AVX2 dispatch caps (scripts/avx2.sh)")
    parser.add_argument("--cases", type=int, default=None, help="held-out cases per constraint kind (even: balanced)")
    parser.add_argument("--first-case", type=int, default=0, help="index of the first case of each kind")
    parser.add_argument("--kinds", nargs="*", default=None, help="constraint kinds (default: all three)")
    parser.add_argument("--budgets", type=int, nargs="*", default=None,
                        help="history budgets B in tokens; case i gets budgets[i %% len(budgets)]")
    parser.add_argument("--rows", nargs="*", default=None, help="rows to run (default: Table 1's five and the blind)")
    parser.add_argument("--token-budget", type=int, default=2048, help="B_t of every call (sizes memory's reserve)")
    parser.add_argument("--adapter", default=None, help="default: the sim planner's warehouse adapter")
    parser.add_argument("--dtype", default="float32", help="float32 (what any CPU runs) | bfloat16 | auto")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--fresh", action="store_true", help="forget the calls already in the calls file")
    parser.add_argument("--out", default="bench/out")
    args = parser.parse_args()
    if args.avx2:
        reexec_as_avx2()
    fill_defaults(args, {"cases": 1, "budgets": [512]}, {"cases": 10, "budgets": [4096, 12288, 40960]})
    # heavy: torch and the planner load after the dispatch caps are set
    import torch

    from brace_training.haystack_cases import CONSTRAINT_KINDS, make_cases
    from brace_training.haystack_memory import BLIND_ROW, ROWS, row_named
    from erecap_planner.call_path import CallOptions, LocalModel, PlannerCallPath

    if args.threads:
        torch.set_num_threads(args.threads)
    kinds = tuple(args.kinds or CONSTRAINT_KINDS)
    rows = [*ROWS, BLIND_ROW]
    if args.rows:
        try:
            rows = [row_named(name) for name in args.rows]
        except ValueError as exc:
            parser.error(str(exc))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    calls_csv = out / "memory_haystack_calls.csv"
    if args.fresh or args.quick:
        calls_csv.unlink(missing_ok=True)
    cpu = cpu_report()
    model, tokenizer = load_planner_model(args.adapter or sim_planner_checkpoint(ADAPTER_PARAMETER), "cpu", args.dtype)
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    window = int(model.config.max_position_embeddings)
    options = CallOptions(compressor="none", decoding="candidates", layout="focus",
                          max_context_tokens=window - CONTINUATION_TOKENS)
    path = PlannerCallPath(LocalModel(model, tokenizer), options)

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    if args.quick:  # two small cases: a dock that closes and a box to hand off or place
        cases = make_cases("test", 1, args.budgets, count, kinds=kinds[:1]) + \
            make_cases("test", 1, args.budgets, count, kinds=kinds[1:2], first=1)
    else:
        cases = make_cases("test", args.cases, args.budgets, count, kinds=kinds, first=args.first_case)
    assert all(c.split == "test" for c in cases), "the benchmark evaluates held-out (test) cases only"
    print(f"# Warehouse haystack: {len(cases)} held-out cases ({', '.join(kinds)}), history budgets "
          f"{args.budgets} tokens, prompt cap {window - CONTINUATION_TOKENS} (window {window}), B_t "
          f"{args.token_budget}, {dtype} on {describe_cpu(cpu)}", flush=True)
    done = {(r["case_id"], r["row"]) for r in read_rows(calls_csv)}
    for case in cases:
        todo = [row for row in rows if (case.case_id, row.name) not in done]
        if not todo:
            continue
        started = time.monotonic()
        results = run_case(path, tokenizer, case, todo, args)
        append_rows([{**r, "cpu": cpu["cpu"], "torch_capability": cpu["torch_capability"], "dtype": dtype,
                      "threads": cpu["threads"]} for r in results], calls_csv)
        print(f"{case.case_id} B={case.budget_tokens} ({case.history_tokens} tokens): "
              + " ".join(f"{r['row']}={'ok' if r['satisfied'] else 'x'}" for r in results)
              + f" ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
    wanted = {c.case_id for c in cases}
    calls = [r for r in read_rows(calls_csv) if r["case_id"] in wanted]
    table = summary([r.name for r in rows], calls, kinds, sorted(set(args.budgets)))
    columns = list(table[0]) if table else []
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for r in table:
        print("| " + " | ".join(str(r[c]) for c in columns) + " |")
    csv_path = write_csv([{**r, "cpu": cpu["cpu"], "torch_capability": cpu["torch_capability"], "flags": cpu["flags"],
                           "threads": cpu["threads"], "dtype": dtype} for r in table], out / "memory_haystack.csv")
    png = save_plot(out / "memory_haystack.png", draw(table))
    print_written(csv_path, calls_csv, png)
    return report_checks(checks(table, len(cases)))


if __name__ == "__main__":
    sys.exit(main())
