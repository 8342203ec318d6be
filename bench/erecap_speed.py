#!/usr/bin/env python3
"""E-RECAP speed on a real pretrained model (SmolLM2-135M-Instruct by default), side by side.

For each context length N and keep ratio r: prefill time, end-to-end call time
(prefill + a fixed 16-token decode on the pruned KV cache), pruning overhead
(predictor scoring + selection) as a share of the call, tokens kept after the
last pruning layer, and memory (KV cache after prefill; peak CUDA memory on a
GPU). Repeats are interleaved (every (N, r) once per round, shuffled) and the
median is reported, because absolute times on shared machines drift.

Targets: at r = 0.7 and N >= 2048 prefill >= 2.2x faster than unpruned;
end-to-end never slower than unpruned; pruning overhead <= 3% of call time.
The end-to-end speedup is printed next to the Amdahl bound computed from the
measured decode share (prefill accelerated by its measured speedup, decode not).
Writes bench/out/erecap_speed.{csv,png}. `source scripts/env.sh` first.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import torch
from report import print_written, report_checks, save_plot, write_csv  # bench/report.py (the script folder is on sys.path)

from brace_training.datagen import make_case
from erecap_planner.models import SMOLLM2, load_model
from erecap_planner.predictor import PredictorBank
from erecap_planner.pruned_forward import ErecapModel
from erecap_planner.pruning import PruneSchedule, table8_layers

OUT = Path(__file__).resolve().parent / "out"
DECODE_TOKENS = 16


def prompt_ids(tokenizer, n: int) -> torch.Tensor:
    """A rendered OmniAct-style context trimmed to exactly n tokens (middle removed, head and tail kept)."""
    target = n + 64
    while True:
        case = make_case(f"speed-{n}", target, tokenizer)
        ids = case.buffer.render(tokenizer, case.agent_id, "Plan the next step for agent_0.").token_ids
        if len(ids) >= n:
            break
        target += n // 8 + 16
    if len(ids) > n:
        cut = len(ids) - n
        mid = len(ids) // 2
        ids = ids[: mid - cut // 2] + ids[mid - cut // 2 + cut:]
    return torch.tensor(ids[:n])


def measure(runner: ErecapModel, ids: torch.Tensor, device: torch.device) -> dict:
    """One call: prefill, then a fixed-length decode on the pruned cache."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    pre = runner.prefill(ids)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t1 = time.perf_counter()
    kv = pre.cache.nbytes()  # the filled keys and values (the kept tokens per layer)
    runner.decode(pre, DECODE_TOKENS, eos_token_ids=())
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t2 = time.perf_counter()
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
    return {"prefill_ms": (t1 - t0) * 1e3, "decode_ms": (t2 - t1) * 1e3, "prune_ms": pre.prune_ms,
            "tokens_after": pre.tokens_after, "kv_mb": kv / 2**20, "peak_cuda_mb": peak / 2**20}


def main() -> int:
    """Run the sweep; print the table; write CSV and PNG."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=SMOLLM2, help="model_path (default: packaged SmolLM2-135M-Instruct)")
    parser.add_argument("--device", default="cpu", help="cpu | cuda | auto")
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    parser.add_argument("--ratios", type=float, nargs="+", default=[1.0, 0.9, 0.8, 0.7, 0.6, 0.5])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--predictor", default="", help="predictor checkpoint (speed does not depend on training)")
    parser.add_argument("--out", default=str(OUT / "erecap_speed"), help="output path prefix")
    parser.add_argument("--quick", action="store_true", help="N = 256, r in {1.0, 0.7}, 1 repeat")
    args = parser.parse_args()
    if args.quick:
        args.lengths, args.ratios, args.repeats = [256], [1.0, 0.7], 1
    if 1.0 not in args.ratios:
        args.ratios = [1.0, *args.ratios]

    model, tokenizer = load_model(args.model, args.device)
    device = model.device
    layers = table8_layers(model.config.num_hidden_layers)
    bank = PredictorBank.load(args.predictor, model.config) if args.predictor else PredictorBank.for_model(model.config, layers)
    runners = {r: ErecapModel(model, PruneSchedule(tuple(layers), r), bank) for r in args.ratios}
    prompts = {n: prompt_ids(tokenizer, n) for n in args.lengths}
    print(f"model {args.model} ({model.config.num_hidden_layers} layers) on {device}, pruning layers {layers}, "
          f"{torch.get_num_threads()} CPU threads, {args.repeats} interleaved repeats")
    runners[1.0].decode(runners[1.0].prefill(prompts[args.lengths[0]][:128]), 2)  # warm-up

    samples: dict[tuple[int, float], list[dict]] = {(n, r): [] for n in args.lengths for r in args.ratios}
    rng = random.Random(0)
    for rep in range(args.repeats):
        order = list(samples)
        rng.shuffle(order)
        for n, r in order:
            samples[(n, r)].append(measure(runners[r], prompts[n], device))
        print(f"  round {rep + 1}/{args.repeats} done", flush=True)

    rows = []
    for n in args.lengths:
        base = {k: statistics.median(s[k] for s in samples[(n, 1.0)]) for k in ("prefill_ms", "decode_ms")}
        base_e2e = base["prefill_ms"] + base["decode_ms"]
        decode_share = base["decode_ms"] / base_e2e
        for r in args.ratios:
            med = {k: statistics.median(s[k] for s in samples[(n, r)]) for k in samples[(n, r)][0]}
            e2e = med["prefill_ms"] + med["decode_ms"]
            prefill_speedup = base["prefill_ms"] / med["prefill_ms"]
            rows.append({
                "N": n, "r": r, "tokens_after": int(med["tokens_after"]),
                "prefill_ms": round(med["prefill_ms"], 1), "decode_ms": round(med["decode_ms"], 1),
                "e2e_ms": round(e2e, 1), "prefill_speedup": round(prefill_speedup, 3),
                "e2e_speedup": round(base_e2e / e2e, 3),
                "amdahl_bound": round(1.0 / ((1 - decode_share) / prefill_speedup + decode_share), 3),
                "prune_share_pct": round(100.0 * med["prune_ms"] / e2e, 2), "kv_mb": round(med["kv_mb"], 2),
                "peak_cuda_mb": round(med["peak_cuda_mb"], 1),
            })

    header = ["N", "r", "tokens_after", "prefill_ms", "decode_ms", "e2e_ms", "prefill_speedup", "e2e_speedup",
              "amdahl_bound", "prune_share_pct", "kv_mb"]
    print("\n" + " ".join(f"{h:>15}" for h in header))
    for row in rows:
        print(" ".join(f"{row[h]:>15}" for h in header))

    checks = []
    for row in rows:
        if row["r"] == 0.7 and row["N"] >= 2048:
            checks.append((f"prefill speedup at N={row['N']}, r=0.7 >= 2.2x", row["prefill_speedup"] >= 2.2,
                           f"{row['prefill_speedup']:.2f}x"))
    checks.append(("end-to-end never slower than unpruned", all(r["e2e_speedup"] >= 1.0 for r in rows),
                   f"min {min(r['e2e_speedup'] for r in rows):.2f}x"))
    checks.append(("pruning overhead <= 3% of call time", all(r["prune_share_pct"] <= 3.0 for r in rows),
                   f"max {max(r['prune_share_pct'] for r in rows):.2f}%"))
    print()
    status = report_checks(checks)

    out = Path(args.out)
    print_written(write_csv(rows, out.with_suffix(".csv")),
                  save_plot(out.with_suffix(".png"), lambda plt: plot(plt, rows, args.lengths)))
    return status


def plot(plt, rows: list[dict], lengths: list[int]):
    """Prefill and end-to-end speedup against the keep ratio, one line per context length."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for n in lengths:
        sub = [r for r in rows if r["N"] == n]
        axes[0].plot([r["r"] for r in sub], [r["prefill_speedup"] for r in sub], "o-", label=f"N={n}")
        axes[1].plot([r["r"] for r in sub], [r["e2e_speedup"] for r in sub], "o-", label=f"N={n}")
        axes[1].plot([r["r"] for r in sub], [r["amdahl_bound"] for r in sub], ":", color="gray")
    axes[0].axhline(2.2, color="r", ls="--", lw=0.8, label="target 2.2x (r=0.7, N>=2048)")
    axes[1].axhline(1.0, color="r", ls="--", lw=0.8, label="unpruned")
    axes[0].set(xlabel="keep ratio r", ylabel="prefill speedup", title="Prefill")
    axes[1].set(xlabel="keep ratio r", ylabel="end-to-end speedup", title="Call (prefill + 16-token decode); dotted: Amdahl")
    for ax in axes:
        ax.invert_xaxis()
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    sys.exit(main())
