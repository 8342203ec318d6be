#!/usr/bin/env python3
"""Planner backends side by side: in process, `transformers serve`, llama.cpp's server — one run.

1. latency  replanning calls on K = 8 warehouse contexts of N ~ 1k, 2k, 4k tokens at B_t = 256, 384 and the whole
            context, calls of the three backends interleaved: call P50 / P95 and its phases. In process: the
            planner's call path (float32 model, float16 decode weights, in-model E-RECAP two-stage at B_t < N).
            Servers: the server call path (the context compressed here by prompt-level E-RECAP with the same
            model and predictor, the kept text sent; the server decodes). Every backend decodes a free JSON plan
            of at most --max-new-tokens tokens and stops when the plan is written.
2. quality  oracle agreement (first step equals the oracle's) on K = 4 warehouse decision points: in-model vs
            prompt-level E-RECAP at B_t = 256 / 384 (in process, constrained decoding, so only the compression
            differs), and each server at the whole context and at B_t = 384.

Models: SmolLM2-135M-Instruct with the warehouse LoRA adapter merged, everywhere: in process, the merged folder in
`transformers serve`, and the packaged GGUF rewritten with the merged weights in float16 (erecap_planner.gguf_export)
in llama.cpp, which is asked for structured output (its json_object + schema form). The llama.cpp rows need `make
bench-setup` (llama-cpp-python[server], built from source); they are skipped, and said so, when it is missing.

    python bench/planner_backends.py [--calls 3] [--sizes 1024 2048 4096] [--budgets 256 384 0] [--points 20]
    python bench/planner_backends.py --avx2          # PyTorch / oneDNN / MKL capped at AVX2 (server processes too)

Prints the tables with the CPU, writes <out>/planner_backends{,_quality}.csv, planner_backends.png and the servers'
logs (--out, default bench/out); always exits 0 (no target). `source scripts/env.sh` first.

Quick mode (`--quick`, what `make test` runs): one call per backend at N ~ 512 and B_t = 256 with free plans cut
at 16 tokens (too few for a whole plan: the latency table's valid_plans is 0), and the quality table on one decision
point at B_t = 384 only; the llama.cpp rows are skipped (and said so) unless llama-cpp-python[server] is installed.
Options given explicitly still win.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from pathlib import Path

from report import (
    cpu_report,
    describe_cpu,
    fill_defaults,
    load_planner_model,
    reexec_as_avx2,
    save_plot,
    sim_planner_checkpoint,
    write_csv,
)

OUT = Path(__file__).resolve().parent / "out"
BACKENDS = ("in_process", "transformers_serve", "llama_cpp")


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def llama_cpp_available() -> bool:
    """llama-cpp-python and its server extra are installed."""
    try:
        import llama_cpp.server.app  # noqa: F401
    except ImportError:
        return False
    return True


def build(args, stack):
    """Model, tokenizer, schedule, predictors, the warehouse schemas (K = 8 and K = 4) and the adapter's folder."""
    import yaml  # noqa: F401 - the schemas are dicts

    from brace_common.config import resolve_path
    from erecap_planner.local_server import prepare_model_folder
    from erecap_planner.plan_parser import ActionSchema
    from erecap_planner.predictor import PredictorBank
    from erecap_planner.pruning import PruneSchedule, table8_layers
    from sim_bridges.warehouse.warehouse_feed import action_schema
    from sim_bridges.warehouse.warehouse_world import Warehouse, WorldConfig

    model, tokenizer = load_planner_model(args.adapter, "cpu", "float32")
    layers = table8_layers(model.config.num_hidden_layers)
    schedule = PruneSchedule(tuple(layers), 0.7, first_cut=1.5)
    predictors = PredictorBank.load(resolve_path(args.predictor), model.config)
    schemas = {k: ActionSchema.from_dict(action_schema(Warehouse(WorldConfig(num_agents=k)))) for k in (4, 8)}
    folder = prepare_model_folder("smollm2-135m-instruct", args.adapter)
    stack.update(model=model, tokenizer=tokenizer, schedule=schedule, predictors=predictors, schemas=schemas,
                 folder=folder)


def prompt_compressor(stack, layers: int):
    """Prompt-level E-RECAP whose scorer runs the first `layers` pruning layers (0 = all; prompt_scoring_layers)."""
    from erecap_planner.compressors import make_compressor
    from erecap_planner.factory import prompt_scoring_schedule
    from erecap_planner.pruned_forward import ErecapModel

    schedule = prompt_scoring_schedule(stack["schedule"], layers)
    predictors = stack["predictors"].subset(list(schedule.layers))
    return make_compressor("erecap", schedule, scorer=ErecapModel(stack["model"], schedule, predictors))


def paths(stack, schema, url: dict[str, str], max_new_tokens: int, decoding: str = "json") -> dict:
    """backend -> {'full': call path without compression, 'budget': with E-RECAP (in-model or prompt-level)}."""
    from erecap_planner.call_path import CallOptions, CallPath, LocalModel, PlannerCallPath
    from erecap_planner.compressors import make_compressor
    from erecap_planner.openai_client import OpenAIClient
    from erecap_planner.server_backend import ServerBackend

    model, tok, schedule, predictors = stack["model"], stack["tokenizer"], stack["schedule"], stack["predictors"]
    local = {name: PlannerCallPath(LocalModel(model, tok, schedule, bank, decode_weights="float16"),
                                   CallOptions(compressor=compressor, max_new_tokens=max_new_tokens, decoding=decoding),
                                   schema)
             for name, compressor, bank in (("full", "none", None), ("budget", "erecap", predictors))}
    out = {"in_process": local}
    prompt_level = prompt_compressor(stack, 1)
    for backend, base_url in url.items():
        endpoint, structured = (("completions", "none") if backend == "transformers_serve" else ("chat", "json_object"))
        out[backend] = {}
        for name, compressor, label in (("full", make_compressor("none"), "none"), ("budget", prompt_level, "erecap")):
            options = CallOptions(label, max_new_tokens)
            server = ServerBackend(OpenAIClient(base_url), tok, options, endpoint=endpoint, structured_output=structured)
            out[backend][name] = CallPath(server, options, compressor, schema)
    return out


def latency(stack, url: dict[str, str], args) -> list[dict]:
    """Per backend, N and B_t: P50 / P95 call latency and mean phases (calls interleaved across backends)."""
    from budget_targets import growth_stream, position_of

    from brace_common.vocabulary import CallStatus
    from brace_training.plan_data import context_buffer
    from erecap_planner.call_path import CallRequest

    tok, schema = stack["tokenizer"], stack["schemas"][8]
    calls_by = paths(stack, schema, url, args.max_new_tokens)
    entries = growth_stream(8, 0, tok, schema, max(args.sizes) + 64)
    samples: dict[tuple, list] = {}
    for size in args.sizes:
        buffer = context_buffer(entries[:position_of(entries, size, tok, schema)])
        for _ in range(args.calls):
            for budget in args.budgets:
                for backend, variants in calls_by.items():
                    path = variants["full" if budget == 0 else "budget"]
                    out = path.run(buffer, CallRequest("agent_0", budget or 10**6, 60_000, 120_000))
                    samples.setdefault((backend, size, budget), []).append(out)
                    if out.status not in (CallStatus.OK, CallStatus.PLANNER_ERROR):
                        print(f"  {backend} N={size} B={budget}: {CallStatus(out.status).label} {out.error}",
                              flush=True)
        print(f"  N ~ {size}: done", flush=True)
    rows = []
    for (backend, _size, budget), outs in samples.items():
        lat = [o.latency_ms for o in outs]
        phase_ms: dict[str, list[float]] = {}
        for o in outs:
            for p in o.phases:
                phase_ms.setdefault(p.phase, []).append(p.duration_ms)
        decode_tokens = [next((p.tokens_out for p in o.phases if p.phase == "decode"), 0) for o in outs]
        rows.append({"backend": backend, "tokens_n": round(statistics.mean(o.tokens_before for o in outs)),
                     "budget": budget or "full", "calls": len(outs),
                     "tokens_sent": round(statistics.mean(o.tokens_after for o in outs)),
                     "p50_ms": round(statistics.median(lat), 1), "p95_ms": round(_p95(lat), 1),
                     "compress_ms": round(statistics.mean(phase_ms.get("context_compress", [0])), 1),
                     "to_first_token_ms": round(statistics.mean(
                         phase_ms.get("prefill", [0]) if backend == "in_process" else
                         [a + b for a, b in zip(phase_ms.get("request", [0]), phase_ms.get("first_token", [0]),
                                                strict=False)]), 1),
                     "decode_ms_per_token": round(statistics.mean(phase_ms.get("decode", [0]))
                                                  / max(1.0, statistics.mean(decode_tokens)), 1),
                     "valid_plans": sum(o.status == CallStatus.OK for o in outs)})
    return rows


def quality(stack, url: dict[str, str], args) -> list[dict]:
    """Oracle agreement of each (backend, compression, B_t) on K = 4 decision points."""
    from brace_common.action_schema import Step
    from brace_training.plan_data import context_buffer, decision_points
    from erecap_planner.call_path import CallOptions, CallPath, CallRequest, LocalModel, PlannerCallPath
    from sim_bridges.warehouse.warehouse_feed import same_first_step

    model, tok, schedule, predictors = stack["model"], stack["tokenizer"], stack["schedule"], stack["predictors"]
    schema = stack["schemas"][4]
    def local_path(compressor: str, bank) -> CallPath:
        return PlannerCallPath(LocalModel(model, tok, schedule, bank, decode_weights="float16"),
                               CallOptions(compressor=compressor, max_new_tokens=64, decoding="constrained"), schema)

    local = {"in_model": local_path("erecap", predictors), "none": local_path("none", None)}
    prompts = {}
    for layers, label in ((1, "prompt_level_first_layer"), (0, "prompt_level_all_layers")):
        prompts[label] = local_path("recency", None)
        prompts[label].compressor = prompt_compressor(stack, layers)  # kept tokens re-prefilled from scratch
    servers = paths(stack, schema, url, args.max_new_tokens)
    budgets = args.quality_budgets
    configs = [("in_process", "none", 0, local["none"]), *[("in_process", "in_model", b, local["in_model"])
                                                          for b in budgets],
               *[("in_process", label, b, path) for label, path in prompts.items() for b in budgets]]
    for backend in url:
        configs += [(backend, "none", 0, servers[backend]["full"]), (backend, "prompt_level_first_layer", 384,
                                                                      servers[backend]["budget"])]
    points = list(decision_points(range(args.episodes), 4))[: args.points]
    rows = []
    for backend, compression, budget, path in configs:
        agree, lat, sent = 0, [], []
        for point in points:
            out = path.run(context_buffer(point.entries), CallRequest(point.agent_id, budget or 10**6, 60_000, 120_000))
            agree += same_first_step([Step(s.action, s.parameters) for s in out.steps], point.oracle, point.here)
            lat.append(out.latency_ms)
            sent.append(out.tokens_after)
        rows.append({"backend": backend, "compression": compression, "budget": budget or "full",
                     "decoding": "constrained" if backend == "in_process" else
                     ("schema grammar" if backend == "llama_cpp" else "free json"),
                     "points": len(points), "first_step_agreement": round(agree / len(points), 3),
                     "tokens_sent": round(statistics.mean(sent)), "p50_ms": round(statistics.median(lat), 1)})
        print(f"  {rows[-1]}", flush=True)
    return rows


def markdown(rows: list[dict]) -> str:
    """Rows as a markdown table."""
    keys = list(rows[0])
    return "\n".join(["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys),
                      *("| " + " | ".join(str(r[k]) for k in keys) + " |" for r in rows)])


def plot(plt, rows: list[dict], caption: str):
    """P50 / P95 call latency vs N, one panel per budget, one line per backend."""
    budgets = list(dict.fromkeys(r["budget"] for r in rows))
    fig, axes = plt.subplots(1, len(budgets), figsize=(5 * len(budgets), 4), squeeze=False, sharey=True)
    for ax, budget in zip(axes[0], budgets, strict=True):
        for backend in dict.fromkeys(r["backend"] for r in rows):
            mine = sorted((r for r in rows if r["backend"] == backend and r["budget"] == budget),
                          key=lambda r: r["tokens_n"])
            line, = ax.plot([r["tokens_n"] for r in mine], [r["p50_ms"] for r in mine], marker="o", label=backend)
            ax.plot([r["tokens_n"] for r in mine], [r["p95_ms"] for r in mine], ls="--", color=line.get_color())
        ax.set_title(f"B_t = {budget}")
        ax.set_xlabel("context tokens N")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("call latency ms (P50 solid, P95 dashed)")
    axes[0][0].legend()
    fig.suptitle(caption, fontsize=8)
    fig.tight_layout()
    return fig


def main() -> int:
    """Run the backends side by side; print and write the tables."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, help="calls per backend, N and B_t (default 3)")
    ap.add_argument("--sizes", type=int, nargs="+", help="context sizes N (default 1024 2048 4096)")
    ap.add_argument("--budgets", type=int, nargs="+", help="B_t of the latency table, 0 = the whole context "
                                                           "(default 256 384 0)")
    ap.add_argument("--points", type=int, help="decision points of the quality table (default 20)")
    ap.add_argument("--quality-budgets", type=int, nargs="+", help="in-process B_t of the quality table "
                                                                   "(default 256 384)")
    ap.add_argument("--episodes", type=int, help="oracle episodes the decision points come from (default 2)")
    ap.add_argument("--max-new-tokens", type=int, help="plan tokens (a whole 4-step plan is ~80; default 160)")
    ap.add_argument("--adapter", default=sim_planner_checkpoint("adapter_path"))
    ap.add_argument("--predictor", default=sim_planner_checkpoint("predictor_path"))
    ap.add_argument("--skip", nargs="*", default=[], choices=["latency", "quality", "llama_cpp"])
    ap.add_argument("--avx2", action="store_true", help="cap PyTorch / oneDNN / MKL at AVX2 (servers too)")
    ap.add_argument("--out", type=Path, default=OUT, help="folder of the tables, plot and server logs")
    ap.add_argument("--quick", action="store_true", help="smoke run (see the module docstring)")
    args = ap.parse_args()
    fill_defaults(args,
                  quick=dict(calls=1, sizes=[512], budgets=[256], points=1, quality_budgets=[384], episodes=1,
                             max_new_tokens=16),
                  full=dict(calls=3, sizes=[1024, 2048, 4096], budgets=[256, 384, 0], points=20,
                            quality_budgets=[256, 384], episodes=2, max_new_tokens=160))
    out = args.out
    if args.avx2:
        reexec_as_avx2()
    from erecap_planner.gguf_export import merged_gguf
    from erecap_planner.local_server import LocalServer

    cpu = cpu_report()
    caption = describe_cpu(cpu)
    print(f"CPU: {caption}", flush=True)
    stack: dict = {}
    build(args, stack)
    out.mkdir(parents=True, exist_ok=True)
    llama = "llama_cpp" not in args.skip and llama_cpp_available()
    if "llama_cpp" not in args.skip and not llama:
        print("llama.cpp rows SKIPPED: llama-cpp-python[server] is not installed (make bench-setup)", flush=True)
    with contextlib.ExitStack() as servers:
        serve = servers.enter_context(LocalServer(stack["folder"], dtype="float32",
                                                  log_path=out / "planner_backends_serve.log"))
        url = {"transformers_serve": serve.base_url}
        if llama:
            gguf = merged_gguf("smollm2-135m-instruct", args.adapter)
            url["llama_cpp"] = servers.enter_context(LocalServer(
                gguf, engine="llama_cpp", log_path=out / "planner_backends_llama.log")).base_url
        lat_rows = [] if "latency" in args.skip else latency(stack, url, args)
        qual_rows = [] if "quality" in args.skip else quality(stack, url, args)
    skipped = "" if llama or "llama_cpp" in args.skip else \
        "\n\nllama_cpp: SKIPPED (llama-cpp-python[server] is not installed: make bench-setup)"
    if lat_rows:
        lat_rows.sort(key=lambda r: (str(r["budget"]), r["tokens_n"], BACKENDS.index(r["backend"])))
        write_csv(lat_rows, out / "planner_backends.csv")
        save_plot(out / "planner_backends.png", lambda plt: plot(plt, lat_rows, caption), dpi=120)
        print("\n## Call latency by backend\n\n" + markdown(lat_rows) + skipped)
    if qual_rows:
        write_csv(qual_rows, out / "planner_backends_quality.csv")
        print("\n## Oracle agreement by backend and compression (K = 4 decision points)\n\n" + markdown(qual_rows)
              + skipped)
    print(f"\nCPU: {caption}\nwritten: {out}/planner_backends*.csv, planner_backends.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
