#!/usr/bin/env python3
"""E-RECAP quality at matched budgets: does the planner still pick the correct next action?

Cases are OmniAct App. E-style contexts (one task-relevant seed constraint hidden
among distractor events; see brace_training/datagen.py) that the predictor was
not trained on. For every case and budget B, each method compresses the same
rendered context to at most B tokens and the planner (SmolLM2-135M-Instruct by
default) chooses among the case's valid skill calls by log-likelihood
(candidate scoring on the pruned KV cache):

  none              full context (no compression)
  erecap            in-model E-RECAP, trained predictor, r = 0.7, final budget B
  erecap_untrained  the same with an untrained (random) predictor
  random / recency / summary  budget-matched baselines (prompt-level)

Reported per method and budget: action accuracy (the chosen call equals the
correct one), seed recall (share of the seed constraint's tokens that reach the
planner), tokens after compression. Targets: trained E-RECAP beats random and
recency at every budget and stays within 5 points of no compression.
Writes <out>/erecap_quality.{csv,png} (--out, default bench/out). Exits 1 when a target is missed, 2 when the
trained predictor is missing (`erecap-train` writes it). `source scripts/env.sh` first.

Quick mode (`--quick`, what `make test` runs): 1 case of N ~ 384 tokens at one budget (B = 0.4 N), every method. Without a
trained predictor it runs the erecap row with an untrained (random) one instead of stopping, says so in the
table's `predictor` column and on stdout, and checks no target; options given explicitly still win.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from report import (  # bench/report.py (the script folder is on sys.path)
    fill_defaults,
    print_written,
    report_checks,
    save_plot,
    write_csv,
)

from brace_common.action_schema import Step
from brace_training.datagen import AGENTS, DOCKS, OBJECTS, SHELVES, make_case
from brace_training.erecap_train_cli import REQUEST, default_output
from erecap_planner.compressors import make_compressor
from erecap_planner.models import SMOLLM2, load_model
from erecap_planner.predictor import PredictorBank
from erecap_planner.pruned_forward import ErecapModel
from erecap_planner.pruning import PruneSchedule, table8_layers
from erecap_planner.scoring import best_step

OUT = Path(__file__).resolve().parent / "out"
METHODS = ["none", "erecap", "erecap_untrained", "random", "recency", "summary"]


def case_candidates(case) -> list[Step]:
    """Every valid skill call for the case's object (the object is named in the task)."""
    obj = next(o for o in OBJECTS if o in case.buffer.task[0].text)
    steps = [Step("move_to", {"target": t}) for t in SHELVES + DOCKS]
    steps += [Step("pick", {"object": obj})]
    steps += [Step("place", {"object": obj, "target": d}) for d in DOCKS]
    steps += [Step("handoff", {"object": obj, "to_agent": a}) for a in AGENTS[1:]]
    return steps + [Step("wait", {})]


def seed_tokens(ctx, seed_text: str) -> list[int]:
    """Token positions of the seed constraint's entry."""
    index = next(i for i, e in enumerate(ctx.entries) if e.text == seed_text)
    return ctx.entry_spans()[index]


def main() -> int:
    """Evaluate every method at every budget; print, write CSV and PNG."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=SMOLLM2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--predictor", default=str(default_output()), help="trained checkpoint (erecap-train)")
    parser.add_argument("--cases", type=int, help="evaluation cases (default 24)")
    parser.add_argument("--tokens", type=int, help="context length N of each case (default 768)")
    parser.add_argument("--budgets", type=float, nargs="+", help="B as a fraction of N (default 0.5 0.3)")
    parser.add_argument("--keep-ratio", type=float, default=0.7)
    parser.add_argument("--out", type=Path, default=OUT, help="folder of the CSV and PNG")
    parser.add_argument("--quick", action="store_true", help="smoke run (see the module docstring)")
    args = parser.parse_args()
    fill_defaults(args, quick=dict(cases=1, tokens=384, budgets=[0.4]),
                  full=dict(cases=24, tokens=768, budgets=[0.5, 0.3]))
    trained_file = Path(args.predictor).expanduser()
    if not trained_file.is_file() and not args.quick:
        print(f"no trained predictor at {args.predictor}: run `erecap-train` first (see docs/planner.md)")
        return 2
    predictor = f"trained {trained_file}" if trained_file.is_file() else f"UNTRAINED (random): none at {trained_file}"
    print(f"erecap predictor: {predictor}", flush=True)

    model, tokenizer = load_model(args.model, args.device)
    layers = table8_layers(model.config.num_hidden_layers)
    schedule = PruneSchedule(tuple(layers), args.keep_ratio)
    trained = PredictorBank.load(trained_file, model.config) if trained_file.is_file() else \
        PredictorBank.for_model(model.config, layers, seed=0)  # quick mode only: a stand-in, said so
    runners = {
        "erecap": ErecapModel(model, schedule, trained),
        "erecap_untrained": ErecapModel(model, schedule, PredictorBank.for_model(model.config, layers, seed=123)),
    }
    plain = ErecapModel(model)
    results: dict[tuple[str, float], list[tuple[bool, float, int]]] = {}
    for c in range(args.cases):
        case = make_case(f"eval-{c}", args.tokens, tokenizer)
        ctx = case.buffer.render(tokenizer, case.agent_id, REQUEST)
        seed = seed_tokens(ctx, case.seed_text)
        candidates = case_candidates(case)
        for frac in args.budgets:
            budget = int(frac * len(ctx))
            for method in METHODS:
                if method == "none" and frac != args.budgets[0]:
                    results[(method, frac)] = results[(method, args.budgets[0])]
                    continue
                if method.startswith("erecap"):
                    pre = runners[method].prefill(torch.tensor(ctx.token_ids), token_budget=budget,
                                                  protect=torch.tensor(ctx.protected))
                    kept = set(pre.kept_index.tolist())
                    runner = runners[method]
                else:
                    out = make_compressor(method).compress(ctx, budget)
                    kept = set(out.kept_index)
                    pre = plain.prefill(torch.tensor(out.token_ids))
                    runner = plain
                step, _ = best_step(runner, pre, tokenizer, candidates)
                recall = sum(i in kept for i in seed) / len(seed)
                results.setdefault((method, frac), []).append((step == case.target, recall, len(kept)))
        print(f"  case {c + 1}/{args.cases} ({case.seed_kind})", flush=True)

    rows = []
    for frac in args.budgets:
        for method in METHODS:
            r = results[(method, frac)]
            rows.append({"budget_frac": frac, "method": method, "cases": len(r),
                         "accuracy_pct": round(100.0 * sum(x[0] for x in r) / len(r), 1),
                         "seed_recall_pct": round(100.0 * sum(x[1] for x in r) / len(r), 1),
                         "tokens_after": round(sum(x[2] for x in r) / len(r), 1),
                         "predictor": predictor if method == "erecap" else ""})
    print(f"\n{'B/N':>6} {'method':>18} {'accuracy %':>11} {'seed recall %':>14} {'tokens after':>13}")
    for row in rows:
        print(f"{row['budget_frac']:>6} {row['method']:>18} {row['accuracy_pct']:>11} {row['seed_recall_pct']:>14} "
              f"{row['tokens_after']:>13}" + ("  (untrained predictor)" if row["predictor"].startswith("UNTRAINED") else ""))
    checks = []
    for frac in args.budgets if trained_file.is_file() else ():
        acc = {row["method"]: row["accuracy_pct"] for row in rows if row["budget_frac"] == frac}
        checks.append((f"B/N={frac}: erecap beats random and recency",
                       acc["erecap"] > acc["random"] and acc["erecap"] > acc["recency"],
                       f"{acc['erecap']} vs {acc['random']} / {acc['recency']}"))
        checks.append((f"B/N={frac}: erecap within 5 points of no compression", acc["none"] - acc["erecap"] <= 5.0,
                       f"{acc['erecap']} vs {acc['none']}"))
    print()
    if not trained_file.is_file():
        print("targets not checked: the erecap row ran an untrained predictor")
    status = report_checks(checks)

    csv_path = write_csv(rows, args.out / "erecap_quality.csv")
    print_written(csv_path, save_plot(args.out / "erecap_quality.png", lambda plt: plot(plt, rows, args)))
    return status


def plot(plt, rows: list[dict], args: argparse.Namespace):
    """Accuracy per method, one bar group per budget."""
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(args.budgets)
    for k, frac in enumerate(args.budgets):
        vals = [next(r["accuracy_pct"] for r in rows if r["method"] == m and r["budget_frac"] == frac) for m in METHODS]
        ax.bar([i + k * width for i in range(len(METHODS))], vals, width, label=f"B = {frac:.0%} of N")
    ax.set_xticks([i + width * (len(args.budgets) - 1) / 2 for i in range(len(METHODS))], METHODS, fontsize=8)
    ax.set(ylabel="correct next action (%)", title=f"Matched-budget quality, {args.cases} cases, N~{args.tokens}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    sys.exit(main())
