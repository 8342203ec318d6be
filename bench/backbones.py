"""Table 27 on the embedded warehouse: No-Pruning vs E-RECAP (r = 0.7) on each planner backbone, side by side.

For each backbone (`--models`: a packaged model name or a local model folder, with its warehouse adapter and E-RECAP
predictor where one is shipped):

- **closed loop** (bench/closed_loop_trace.py's ROS-free loop: K agents, seeds 0 .. E-1, the sim runs' planner
  configuration, B_t from the controller's 'embedded' profile, every trigger served): success, delivered objects,
  tokens per replan, call latency (mean, P95), oracle agreement of the plans' first steps;
- **decision points** (bench/planner_choice.py's oracle-driven states of seeds 0-1, the same for every method; E-RECAP
  at B = 384, the demo's full-mode budget): agreement of the first step and of the whole plan with the oracle's;
- **prefill** at N tokens (bench/erecap_speed.py's rendered contexts, Table 8's pruning layers at r = 0.7, no budget):
  prefill and end-to-end (16 decoded tokens) speedup over the unpruned forward.

Speedup and token reduction are E-RECAP's against the same backbone's No-Pruning row, as in the paper's Table 27.
Targets (checked for every backbone with a trained predictor): token reduction >= 70%, prefill speedup >= 2x at
N >= 2048, first-step agreement at the decision points within 5 points of No-Pruning. Writes <out>/backbones.csv and
backbones.png.

    python bench/backbones.py                                   # SmolLM2-135M and Gemma 3 270M, bfloat16 on AMX
    python bench/backbones.py --models gemma3-270m --episodes 4

Quick mode (`--quick`, what `make test` runs): SmolLM2 and a tiny random-weight Gemma 3 folder, 1 decision point, one
episode of K = 2 cut off after 4 steps, N = 256 timed once without a warm-up; options given explicitly still win.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
from pathlib import Path

from closed_loop_trace import run_episodes, sim_planner
from erecap_speed import measure, prompt_ids
from planner_choice import score_points
from report import (
    fill_defaults,
    load_planner_model,
    print_written,
    report_checks,
    save_plot,
    sim_planner_checkpoint,
    write_csv,
)

from brace_common.config import resolve_path
from brace_training.plan_data import decision_points
from erecap_planner.models import GEMMA3, SMOLLM2
from erecap_planner.precision import resolve
from erecap_planner.predictor import PredictorBank
from erecap_planner.pruned_forward import ErecapModel
from erecap_planner.pruning import PruneSchedule, table8_layers

OUT = Path(__file__).parent / "out"
KEEP_RATIO = 0.7
"""Table 27's per-pruning-layer keep ratio r."""
GEMMA_RUN = "demo_gemma"
"""The run configuration that names Gemma 3 270M's warehouse adapter and predictor."""


def shipped(model_path: str) -> tuple[str, str]:
    """(adapter, predictor) URIs a packaged backbone runs the warehouse with, read where the runs read them: the sim
    planner's parameters (SmolLM2) and `GEMMA_RUN` (Gemma 3); ('', '') for any other model."""
    if model_path == SMOLLM2:
        return sim_planner_checkpoint("adapter_path"), sim_planner_checkpoint("predictor_path")
    if model_path == GEMMA3:
        from brace_bringup.run_config import RunConfig

        planner = RunConfig.load(GEMMA_RUN).overrides["erecap_planner"]
        return planner["adapter_path"], planner["predictor_path"]
    return "", ""


METHODS = {"none": "No-Pruning", "erecap": "E-RECAP"}


def checkpoint(uri: str) -> str:
    """The file `uri` names, or '' when it is empty or not there (a backbone without that training)."""
    if not uri:
        return ""
    try:
        path = Path(resolve_path(uri))
    except (FileNotFoundError, ValueError):
        return ""
    return str(path) if path.is_file() else ""


def backbone_rows(model_path: str, adapter: str, predictor: str, args) -> list[dict]:
    """The No-Pruning and E-RECAP rows of one backbone."""
    model, tok = load_planner_model(adapter, dtype=args.dtype, model_path=model_path)
    layers = table8_layers(model.config.num_hidden_layers)
    bank = (PredictorBank.load(predictor, model.config) if predictor
            else PredictorBank.for_model(model.config, layers, seed=0))
    label = Path(model_path).name if Path(model_path).is_dir() else model_path
    rows = []
    for compressor, method in METHODS.items():
        print(f"== {label}, {method}", flush=True)
        loop = sim_planner(model, tok, compressor, bank if compressor == "erecap" else None, args.dtype, args.agents,
                           0, args.max_steps)
        points = itertools.islice(decision_points(range(args.point_episodes), args.agents, 8, 4), args.points)
        scores = score_points(loop[0], points, args.budget if compressor == "erecap" else 100_000)
        print(f"decision points: {scores}", flush=True)
        _, summary = run_episodes(*loop, args.episodes, verbose=False)
        rows.append({"model": label, "layers": model.config.num_hidden_layers, "method": method,
                     "adapter": Path(adapter).name if adapter else "", "predictor": Path(predictor).name if predictor
                     else "untrained", "dtype": args.dtype, **summary, "decision_points": scores["points"],
                     "valid_plans": scores["valid_plans"], "first_step_agreement": scores["first_step_agreement"],
                     "plan_agreement": scores["plan_agreement"], "points_tokens_after": scores["tokens_after"],
                     "points_latency_p50_ms": scores["latency_p50_ms"]})
    runners = {r: ErecapModel(model, PruneSchedule(tuple(layers), r), bank) for r in (1.0, KEEP_RATIO)}
    if not args.quick:  # a smoke run times once, cold
        runners[1.0].decode(runners[1.0].prefill(prompt_ids(tok, 64)), 2)  # warm-up
    for n in args.lengths:
        ids = prompt_ids(tok, n)
        samples = {r: [] for r in runners}
        for _ in range(args.repeats):  # interleaved: a change of load on a shared machine hits both alike
            for r, runner in runners.items():
                samples[r].append(measure(runner, ids, model.device))
        med = {r: {k: statistics.median(s[k] for s in runs) for k in ("prefill_ms", "decode_ms", "tokens_after")}
               for r, runs in samples.items()}
        for r, row in zip((1.0, KEEP_RATIO), rows, strict=True):
            row[f"prefill_{n}_ms"] = round(med[r]["prefill_ms"], 1)
            row[f"e2e_{n}_ms"] = round(med[r]["prefill_ms"] + med[r]["decode_ms"], 1)
            row[f"kept_{n}"] = int(med[r]["tokens_after"])
    base = rows[0]
    for row in rows:
        row["speedup"] = round(base["latency_mean_ms"] / row["latency_mean_ms"], 2) if row["latency_mean_ms"] else 0.0
        row["token_reduction"] = round(1 - row["tokens_after"] / base["tokens_after"], 3) if base["tokens_after"] else 0.0
        for n in args.lengths:
            row[f"prefill_speedup_{n}"] = round(base[f"prefill_{n}_ms"] / row[f"prefill_{n}_ms"], 2)
            row[f"e2e_speedup_{n}"] = round(base[f"e2e_{n}_ms"] / row[f"e2e_{n}_ms"], 2)
    return rows


def table(rows: list[dict], lengths: list[int]) -> str:
    """Table 27's columns (Markdown), the prefill speedups appended."""
    head = ["model", "layers", "method", "success", "delivered", "tokens/replan", "latency mean / P95 (s)", "speedup",
            "token reduction", "oracle agr. (loop)", "first step / plan agr. (points)",
            *(f"prefill N={n}" for n in lengths)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["model"], r["layers"], r["method"], f"{r['success']}/{r['episodes']}",
                 f"{r['delivered']}/{r['tasks']}", f"{r['tokens_after']:,.0f}",
                 f"{r['latency_mean_ms'] / 1e3:.2f} / {r['latency_p95_ms'] / 1e3:.2f}", f"{r['speedup']:.2f}x",
                 f"{r['token_reduction']:.1%}", f"{r['oracle_agreement']:.1%}",
                 f"{r['first_step_agreement']:.1%} / {r['plan_agreement']:.1%} ({r['decision_points']})",
                 *(f"{r[f'prefill_{n}_ms'] / 1e3:.2f} s ({r[f'prefill_speedup_{n}']:.2f}x)" for n in lengths)]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def checks(rows: list[dict], lengths: list[int]) -> list[tuple[str, bool, str]]:
    """The issue's targets for every backbone whose predictor is trained."""
    out = []
    for base, pruned in zip(rows[::2], rows[1::2], strict=True):
        if pruned["predictor"] == "untrained":
            continue
        name = pruned["model"]
        out.append((f"{name}: token reduction >= 70%", pruned["token_reduction"] >= 0.70,
                    f"{pruned['token_reduction']:.1%}"))
        for n in (n for n in lengths if n >= 2048):
            out.append((f"{name}: prefill speedup >= 2x at N={n}", pruned[f"prefill_speedup_{n}"] >= 2.0,
                        f"{pruned[f'prefill_speedup_{n}']:.2f}x"))
        gap = base["first_step_agreement"] - pruned["first_step_agreement"]
        out.append((f"{name}: oracle agreement (decision points) within 5 points of No-Pruning", gap <= 0.05,
                    f"{pruned['first_step_agreement']:.1%} vs {base['first_step_agreement']:.1%}"))
    return out


def plot(plt, rows: list[dict], lengths: list[int]):
    """Per backbone: success and oracle agreement, tokens per replan, and prefill speedup against N."""
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    models = list(dict.fromkeys(r["model"] for r in rows))
    width = 0.35
    for i, method in enumerate(METHODS.values()):
        sub = [next(r for r in rows if r["model"] == m and r["method"] == method) for m in models]
        xs = [j + (i - 0.5) * width for j in range(len(models))]
        axes[0].bar(xs, [r["success"] / max(r["episodes"], 1) for r in sub], width, label=f"{method} success")
        axes[0].plot(xs, [r["oracle_agreement"] for r in sub], "kx")
        axes[1].bar(xs, [r["tokens_after"] for r in sub], width, label=method)
    for m in models:
        pruned = next(r for r in rows if r["model"] == m and r["method"] == "E-RECAP")
        axes[2].plot(lengths, [pruned[f"prefill_speedup_{n}"] for n in lengths], "o-", label=m)
    axes[2].axhline(2.0, color="r", ls="--", lw=0.8, label="target 2x (N >= 2048)")
    axes[0].set(xticks=range(len(models)), xticklabels=models, ylim=(0, 1.05),
                title="Success (bars), oracle agreement (x)")
    axes[1].set(xticks=range(len(models)), xticklabels=models, title="Tokens per replan")
    axes[2].set(xlabel="context tokens N", ylabel="prefill speedup", title=f"E-RECAP prefill, r = {KEEP_RATIO}")
    for ax in axes:
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def main() -> int:
    """Run every backbone; print Table 27 and the targets; write CSV and PNG."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", help=f"model_path values (default {SMOLLM2} {GEMMA3})")
    ap.add_argument("--adapters", nargs="+", help="one per model, '' = none (default: the shipped warehouse adapter)")
    ap.add_argument("--predictors", nargs="+", help="one per model, '' = untrained (default: the shipped predictor)")
    ap.add_argument("--agents", type=int, help="K (default 4)")
    ap.add_argument("--episodes", type=int, help="closed-loop episodes, seeds 0 .. E-1 (default 4)")
    ap.add_argument("--max-steps", type=int, help="steps before an unfinished episode fails (default 60)")
    ap.add_argument("--points", type=int, help="oracle decision points scored per method (default 40)")
    ap.add_argument("--point-episodes", type=int, default=2, help="oracle episodes (seeds 0 ..) of the decision points")
    ap.add_argument("--budget", type=int, default=384, help="E-RECAP's B at the decision points (the demo's full mode)")
    ap.add_argument("--lengths", type=int, nargs="+", help="prefill context lengths N (default 2048 4096)")
    ap.add_argument("--repeats", type=int, help="prefill timings per N and method (median; default 2)")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], help="default: what dtype 'auto' picks on this CPU")
    ap.add_argument("--out", type=Path, default=OUT, help="folder of the CSV and PNG")
    ap.add_argument("--quick", action="store_true", help="smoke run (see the module docstring)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        tiny = ""
        if args.quick and args.models is None:
            from erecap_planner.testing import saved_tiny

            tiny = saved_tiny(Path(scratch) / "tiny-gemma3", "gemma3")
        fill_defaults(args, quick=dict(models=[SMOLLM2, tiny], agents=2, episodes=1, max_steps=4, lengths=[256],
                                       points=1, repeats=1),
                      full=dict(models=[SMOLLM2, GEMMA3], agents=4, episodes=4, max_steps=60, lengths=[2048, 4096],
                                points=40, repeats=2))
        args.dtype = args.dtype or resolve("cpu", "auto").dtype
        adapters = args.adapters or [checkpoint(shipped(m)[0]) for m in args.models]
        predictors = args.predictors or [checkpoint(shipped(m)[1]) for m in args.models]
        if not len(adapters) == len(predictors) == len(args.models):
            ap.error("--adapters and --predictors take one value per model")
        rows = []
        for model_path, adapter, predictor in zip(args.models, adapters, predictors, strict=True):
            rows += backbone_rows(model_path, adapter, predictor, args)
    print("\n" + table(rows, args.lengths) + "\n")
    status = report_checks(checks(rows, args.lengths))
    print_written(write_csv(rows, args.out / "backbones.csv"),
                  save_plot(args.out / "backbones.png", lambda plt: plot(plt, rows, args.lengths)))
    return status


if __name__ == "__main__":
    sys.exit(main())
